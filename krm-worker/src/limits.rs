//! The hard limits a worker runs under, set by the kernel rather than checked by the code
//! they contain: no interpreter reports every allocation, and Rust aborts on a failed one.

use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A pool's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Address space of each worker (`RLIMIT_AS`), in bytes: an allocation past it fails, and
    /// the worker dies of it.
    pub memory_bytes: u64,
    /// CPU time one call may use (`RLIMIT_CPU`, moved on before each call), in seconds.
    pub cpu_seconds_per_call: u64,
    /// A worker is replaced after this many calls.
    pub calls_per_worker: u32,
    /// Workers kept started and waiting for a call.
    pub idle: usize,
    /// Workers at most, busy or not: calls beyond wait for one to be free.
    pub max: usize,
    /// Largest part of a message either way (a request, a ResourceList, a log).
    pub message_bytes: usize,
    /// How long a call may wait for a free worker when its caller set no deadline.
    pub queue_wait: Duration,
    /// Workers idle this long beyond [`Limits::idle`] are stopped, giving their memory back.
    pub idle_timeout: Duration,
}

/// In the forked child, before `exec`: the limits, no core dump, death with the runner, and
/// every descriptor but the three standard ones closed at `exec`. Only async-signal-safe calls.
pub(crate) fn apply_in_child(memory_bytes: u64) -> io::Result<()> {
    set_limit(libc::RLIMIT_AS, memory_bytes)?;
    set_limit(libc::RLIMIT_CORE, 0)?;
    // SAFETY: plain prctl with integer arguments. The spawning thread is the pool's own
    // long-lived thread: PDEATHSIG fires when the thread that forked exits, not the process.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // Descriptors the runner opened without CLOEXEC (a plugin's, a library's) stay out of
    // the worker: mark every one above stderr close-on-exec. std's own error pipe is one.
    // SAFETY: plain syscall with integer arguments; it only sets flags on descriptors.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Gives the next call `seconds` of CPU time beyond what the worker has used so far: past it
/// the kernel sends SIGXCPU, which ends the worker.
pub(crate) fn allow_cpu_seconds(seconds: u64) -> io::Result<()> {
    // SAFETY: rusage is plain data that getrusage fills.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall filling `usage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let used = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) as u64 + 1;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall filling `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    limit.rlim_cur = used.saturating_add(seconds).min(limit.rlim_max);
    // SAFETY: plain syscall reading `limit`.
    if unsafe { libc::setrlimit(libc::RLIMIT_CPU, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: plain syscall reading `limit`.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
