//! Running the function once per call: its own process group (killed when the call is
//! cancelled, when its deadline passes, and after it exits, so nothing is left behind),
//! input on stdin, stdout and stderr bounded.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

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

/// How a call's process ended.
#[derive(Debug)]
pub enum Outcome {
    /// The process could not be started.
    NotStarted(io::Error),
    /// The process exited (or was killed for writing too much).
    Exited(Exited),
    /// The deadline passed; the process group was killed.
    DeadlineExceeded,
}

#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    /// `None` when the output pipe was held open by a process that left the group.
    pub stdout: Option<Vec<u8>>,
    pub stderr: Vec<u8>,
    /// Stdout went over its limit and the process group was killed.
    pub overflowed: bool,
}

/// Runs `entrypoint` with `input` on stdin. Dropping the returned future (the caller went away)
/// kills the process group.
pub async fn run(
    entrypoint: &[String],
    input: Vec<u8>,
    deadline: Option<tokio::time::Instant>,
    limits: Limits,
) -> Outcome {
    let Some((program, args)) = entrypoint.split_first() else {
        return Outcome::NotStarted(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no entrypoint configured",
        ));
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // No pre_exec hook, so std spawns through posix_spawn. Environment and working directory are
    // inherited: the wrapper runs inside the function's own container.
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return Outcome::NotStarted(error),
    };
    let group = ProcessGroup::register(child.id());
    let kill_on_drop = KillOnDrop(group.clone());
    let (sender, receiver) = oneshot::channel();
    let supervised = group.clone();
    std::thread::spawn(move || {
        let _ = sender.send(supervise(child, &supervised, input, limits));
    });
    let exited = match deadline {
        Some(deadline) => tokio::select! {
            exited = receiver => exited,
            () = tokio::time::sleep_until(deadline) => {
                group.kill();
                kill_on_drop.disarm();
                return Outcome::DeadlineExceeded;
            }
        },
        None => receiver.await,
    };
    kill_on_drop.disarm();
    match exited {
        Ok(exited) => Outcome::Exited(exited),
        Err(_) => Outcome::NotStarted(io::Error::other("the supervising thread failed")),
    }
}

/// Kills the process group when a call is dropped before its process finished.
struct KillOnDrop(Arc<ProcessGroup>);

impl KillOnDrop {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill();
    }
}

fn supervise(
    mut child: std::process::Child,
    group: &Arc<ProcessGroup>,
    input: Vec<u8>,
    limits: Limits,
) -> Exited {
    let overflowed = Arc::new(AtomicBool::new(false));
    let stdout = child.stdout.take().map(|pipe| {
        let (group, overflowed) = (group.clone(), overflowed.clone());
        spawn_reader(move || read_stdout(pipe, limits.max_stdout_bytes, &group, &overflowed))
    });
    let stderr = child
        .stderr
        .take()
        .map(|pipe| spawn_reader(move || read_log(pipe, limits.max_log_bytes)));
    if let Some(mut stdin) = child.stdin.take() {
        // A function may exit without reading its input; a broken pipe is not an error.
        let _ = stdin.write_all(&input);
    }
    wait_without_reaping(group.pid);
    // The leader is a zombie now, so its group id cannot be reused: safe to kill the rest.
    group.retire();
    let status = loop {
        match child.wait() {
            Ok(status) => break status,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                // Not our child any more (cannot happen): report a failed exit.
                tracing::error!(%error, "cannot reap the function process");
                break std::os::unix::process::ExitStatusExt::from_raw(255 << 8);
            }
        }
    };
    let drain_until = Instant::now() + PIPE_DRAIN_LIMIT;
    let stdout = join_within(stdout, drain_until);
    let stderr = join_within(stderr, drain_until).unwrap_or_default();
    Exited {
        status,
        stdout,
        stderr,
        overflowed: overflowed.load(Ordering::SeqCst),
    }
}

/// The process groups of calls in flight, so that a forced exit can kill them all.
static LIVE_GROUPS: Mutex<Option<HashMap<libc::pid_t, Arc<ProcessGroup>>>> = Mutex::new(None);

/// Kills every function process group still running (used before a forced exit).
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
            format!("\n[wrapper-server: {dropped} more bytes of stderr dropped]\n").as_bytes(),
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
