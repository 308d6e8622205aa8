//! Running one function process: its own process group, bounded output, and a kill of the whole
//! group on cancellation and on exit.

use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use krm_plugin_api::results::result_lines;
use krm_plugin_api::{CallContext, EvalError, EvalResponse};

use crate::Function;
use crate::config::Limits;

/// How long to wait for output pipes to close once the process group is dead. Only a process
/// that left the group (setsid) can hold them open longer.
const PIPE_DRAIN_LIMIT: Duration = Duration::from_secs(2);

pub(crate) fn check_executable(path: &Path) -> Result<(), String> {
    let metadata = std::fs::metadata(path)
        .map_err(|e| format!("executable {} is not usable: {e}", path.display()))?;
    if !metadata.is_file() || metadata.permissions().mode() & 0o111 == 0 {
        return Err(format!("{} is not an executable file", path.display()));
    }
    Ok(())
}

pub(crate) fn run(
    context: &CallContext<'_>,
    image: &str,
    function: &Function,
    resource_list: &[u8],
    limits: &Limits,
) -> Result<EvalResponse, EvalError> {
    let fail = |detail: String| {
        EvalError::failed(format!("Failed to execute function {image:?}: {detail}"))
    };
    check_executable(&function.path).map_err(fail)?;

    let mut command = Command::new(&function.path);
    command
        .env_clear()
        .envs(function.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&function.working_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // No pre_exec hook (e.g. PR_SET_PDEATHSIG): it would force fork() instead of posix_spawn()
    // and cost 0.7 ms per call. Should the runner die, a function loses its pipes and dies of
    // SIGPIPE on its next write; graceful shutdown cancels, and so kills, every call.
    let mut child = command
        .spawn()
        .map_err(|e| fail(format!("cannot start {}: {e}", function.path.display())))?;
    let group = Arc::new(ProcessGroup::new(child.id()));
    let on_cancel = group.clone();
    context.on_cancel(move |_| on_cancel.kill());

    let overflowed = Arc::new(AtomicBool::new(false));
    let stdout = child.stdout.take().map(|pipe| {
        let (group, overflowed) = (group.clone(), overflowed.clone());
        let limit = limits.max_output_bytes;
        spawn_reader(move || read_stdout(pipe, limit, &group, &overflowed))
    });
    let log_limit = limits.max_log_bytes;
    let stderr = child
        .stderr
        .take()
        .map(|pipe| spawn_reader(move || read_log(pipe, log_limit)));

    if let Some(mut stdin) = child.stdin.take() {
        // A function may exit without reading its input; a broken pipe is not an error.
        let _ = stdin.write_all(resource_list);
    }
    wait_without_reaping(group.pid);
    // The leader is a zombie now, so its group id cannot be reused: safe to kill the rest.
    group.retire();
    let status = child
        .wait()
        .map_err(|e| fail(format!("cannot wait for the process: {e}")))?;

    let drain_until = Instant::now() + PIPE_DRAIN_LIMIT;
    let stdout = join_within(stdout, drain_until);
    let log = join_within(stderr, drain_until).unwrap_or_default();

    if let Some(reason) = context.cancel_reason() {
        return Err(reason.to_error(image).with_output(Vec::new(), log));
    }
    if overflowed.load(Ordering::SeqCst) {
        return Err(fail(format!(
            "its output exceeded {} bytes and it was stopped",
            limits.max_output_bytes
        ))
        .with_output(Vec::new(), log));
    }
    let Some(stdout) = stdout else {
        return Err(fail(
            "its output pipe was held open by a process that left its process group".to_owned(),
        ));
    };
    if status.success() {
        return Ok(EvalResponse::new(stdout, log));
    }
    Err(fail(failure_detail(status, &stdout, &log)).with_output(stdout, log))
}

/// `exit status 1 (<stderr>)` as Porch words it, then the function's structured results, which
/// Porch drops.
fn failure_detail(status: ExitStatus, stdout: &[u8], log: &[u8]) -> String {
    let status = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    };
    let mut detail = format!("{status} ({})", String::from_utf8_lossy(log).trim());
    let results = result_lines(stdout);
    if !results.is_empty() {
        detail.push_str("\nresults:");
        for line in results {
            detail.push_str("\n  ");
            detail.push_str(&line);
        }
    }
    detail
}

/// A function's process group, killable until its leader is reaped.
struct ProcessGroup {
    pid: libc::pid_t,
    alive: Mutex<bool>,
}

impl ProcessGroup {
    fn new(pid: u32) -> Self {
        Self {
            pid: libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX),
            alive: Mutex::new(true),
        }
    }

    fn kill(&self) {
        let alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        if *alive {
            // SAFETY: plain syscall; the group exists while its leader is unreaped.
            unsafe { libc::killpg(self.pid, libc::SIGKILL) };
        }
    }

    /// Kills whatever the function left behind and stops later kills: the leader is about to
    /// be reaped, after which its id may name someone else's group.
    fn retire(&self) {
        let mut alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        if *alive {
            unsafe { libc::killpg(self.pid, libc::SIGKILL) };
            *alive = false;
        }
    }
}

/// Waits until `pid` has exited, leaving it a zombie (WNOWAIT) so its group id stays reserved.
fn wait_without_reaping(pid: libc::pid_t) {
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let id = libc::id_t::try_from(pid).unwrap_or_default();
        let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
    }
}

fn read_stdout(
    mut pipe: impl Read,
    limit: usize,
    group: &ProcessGroup,
    overflowed: &AtomicBool,
) -> Vec<u8> {
    let mut output = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => return output,
            Ok(n) if output.len() + n > limit => {
                overflowed.store(true, Ordering::SeqCst);
                group.kill();
                return Vec::new();
            }
            Ok(n) => output.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return output,
        }
    }
}

/// Keeps the first `limit` bytes of the log and drains the rest, so a chatty function never
/// blocks on a full pipe.
fn read_log(mut pipe: impl Read, limit: usize) -> Vec<u8> {
    let mut log = Vec::new();
    let mut dropped = 0usize;
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min(limit.saturating_sub(log.len()));
                log.extend_from_slice(&chunk[..keep]);
                dropped += n - keep;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if dropped > 0 {
        log.extend_from_slice(
            format!("\n[krm-runner: {dropped} more bytes of log dropped]\n").as_bytes(),
        );
    }
    log
}

/// A pipe reader on its own thread, so stdin can be written while stdout and stderr drain.
fn spawn_reader<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> Receiver<T> {
    let (sender, receiver) = mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let _ = sender.send(read());
    });
    receiver
}

fn join_within<T>(reader: Option<Receiver<T>>, until: Instant) -> Option<T> {
    reader?
        .recv_timeout(until.saturating_duration_since(Instant::now()))
        .ok()
}
