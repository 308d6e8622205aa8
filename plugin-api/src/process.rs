//! Running a KRM function as a child process: ResourceList on stdin, its own process group
//! (killed on demand and after the function exits, so nothing it spawned survives the call),
//! stdout and stderr bounded. Used by the `exec` evaluator and by the pods' wrapper server.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long to wait for output pipes to close once the process group is dead. Only a process
/// that left the group (setsid) can hold them open longer.
const PIPE_DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Output bounds for one call.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest stdout accepted; a function writing more is killed.
    pub max_stdout_bytes: usize,
    /// Stderr kept; the rest is drained and dropped.
    pub max_log_bytes: usize,
}

/// How a function process ended.
#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    /// `None` when the output pipe was held open by a process that left the group.
    pub stdout: Option<Vec<u8>>,
    pub stderr: Vec<u8>,
    /// Stdout went over its limit and the process group was killed.
    pub overflowed: bool,
}

/// A started function process.
pub struct FunctionProcess {
    child: Child,
    group: Arc<ProcessGroup>,
    limits: Limits,
}

/// Kills a function's process group; harmless once the function has been reaped.
#[derive(Clone)]
pub struct Killer(Arc<ProcessGroup>);

impl Killer {
    pub fn kill(&self) {
        self.0.kill();
    }
}

/// Starts `command` (its program, arguments, environment and directory set by the caller) in
/// a new process group with piped stdio. No `pre_exec` hook is used, so std spawns through
/// posix_spawn, which costs a fraction of fork() in a large process.
pub fn spawn(mut command: Command, limits: Limits) -> io::Result<FunctionProcess> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = command.spawn()?;
    let group = ProcessGroup::register(child.id());
    Ok(FunctionProcess {
        child,
        group,
        limits,
    })
}

impl FunctionProcess {
    pub fn killer(&self) -> Killer {
        Killer(self.group.clone())
    }

    /// Feeds `input`, waits for the function to exit, kills whatever it left in its group, and
    /// collects its output. Blocks the calling thread.
    pub fn wait(mut self, input: &[u8]) -> Exited {
        let group = self.group.clone();
        let overflowed = Arc::new(AtomicBool::new(false));
        let stdout = self.child.stdout.take().map(|pipe| {
            let (group, overflowed) = (group.clone(), overflowed.clone());
            let limit = self.limits.max_stdout_bytes;
            spawn_reader(move || read_stdout(pipe, limit, &group, &overflowed))
        });
        let log_limit = self.limits.max_log_bytes;
        let stderr = self
            .child
            .stderr
            .take()
            .map(|pipe| spawn_reader(move || read_log(pipe, log_limit)));
        if let Some(mut stdin) = self.child.stdin.take() {
            // A function may exit without reading its input; a broken pipe is not an error.
            let _ = stdin.write_all(input);
        }
        wait_without_reaping(group.pid);
        // The leader is a zombie now, so its group id cannot be reused: safe to kill the rest.
        group.retire();
        let status = loop {
            match self.child.wait() {
                Ok(status) => break status,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Not our child any more (cannot happen): report a failed exit.
                Err(_) => break ExitStatus::from_raw(255 << 8),
            }
        };
        let drain_until = Instant::now() + PIPE_DRAIN_LIMIT;
        Exited {
            status,
            stdout: join_within(stdout, drain_until),
            stderr: join_within(stderr, drain_until).unwrap_or_default(),
            overflowed: overflowed.load(Ordering::SeqCst),
        }
    }
}

/// `exit status 1` as Go words it, or `killed by signal 9`.
pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// The process groups of functions still running, so that a forced exit can kill them all.
static LIVE_GROUPS: Mutex<Option<HashMap<libc::pid_t, Arc<ProcessGroup>>>> = Mutex::new(None);

/// Kills every function process group still running (before a forced exit).
pub fn kill_all() {
    let live = LIVE_GROUPS.lock().unwrap_or_else(PoisonError::into_inner);
    for group in live.iter().flat_map(|groups| groups.values()) {
        group.kill();
    }
}

/// A function's process group, killable until its leader is reaped.
struct ProcessGroup {
    pid: libc::pid_t,
    alive: Mutex<bool>,
}

impl ProcessGroup {
    fn register(pid: u32) -> Arc<Self> {
        let group = Arc::new(Self {
            pid: libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX),
            alive: Mutex::new(true),
        });
        LIVE_GROUPS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashMap::new)
            .insert(group.pid, group.clone());
        group
    }

    fn kill(&self) {
        let alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        if *alive {
            // SAFETY: plain syscall; the group id is reserved while its leader is unreaped.
            unsafe { libc::killpg(self.pid, libc::SIGKILL) };
        }
    }

    /// Kills whatever the function left behind and stops later kills: the leader is about to
    /// be reaped, after which its id may name someone else's group.
    fn retire(&self) {
        let mut alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        if *alive {
            // SAFETY: as in `kill`.
            unsafe { libc::killpg(self.pid, libc::SIGKILL) };
            *alive = false;
        }
        if let Some(groups) = LIVE_GROUPS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            groups.remove(&self.pid);
        }
    }
}

/// Waits until `pid` has exited, leaving it a zombie (WNOWAIT) so its group id stays reserved.
fn wait_without_reaping(pid: libc::pid_t) {
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let id = libc::id_t::try_from(pid).unwrap_or_default();
        // SAFETY: plain syscall on our own child.
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
    let mut chunk = vec![0u8; 64 * 1024];
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
    let mut chunk = vec![0u8; 64 * 1024];
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
