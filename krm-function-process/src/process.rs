//! Running a KRM function as a child process: ResourceList on stdin, its own process group
//! (killed on demand and after the function exits), stdout and stderr bounded. Used by the
//! `exec` evaluator and by the pods' wrapper server.
//!
//! A process that leaves the group (setsid, a double fork) escapes `killpg`. Servers that run
//! functions therefore call [`adopt_orphans`]: such escapees then stay their children instead
//! of init's, and a sweep kills and reaps them once no call that could own them is running
//! (see [`CallInFlight`]).

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long to wait for output pipes to close once the process group is dead. Only a process
/// that left the group (setsid) can hold them open longer.
const PIPE_DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Why a path cannot be run as a function.
#[derive(Debug, thiserror::Error)]
pub enum NotExecutable {
    #[error("executable {path} is not usable: {source}", path = .path.display())]
    Unusable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not an executable file", path = .path.display())]
    NotAnExecutableFile { path: PathBuf },
}

/// Whether `path` is a regular file someone may execute: the one check the runner's routing
/// and the evaluators that spawn apply before trusting a path.
pub fn check_executable(path: &Path) -> Result<(), NotExecutable> {
    let metadata = fs::metadata(path).map_err(|source| NotExecutable::Unusable {
        path: path.to_owned(),
        source,
    })?;
    if !metadata.is_file() || metadata.permissions().mode() & 0o111 == 0 {
        return Err(NotExecutable::NotAnExecutableFile {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Output bounds for one call.
#[derive(Debug, Clone, Copy)]
pub struct OutputLimits {
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
    limits: OutputLimits,
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
pub fn spawn(mut command: Command, limits: OutputLimits) -> io::Result<FunctionProcess> {
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

/// Sweeps run at most this often, however many calls end.
const SWEEP_INTERVAL: Duration = Duration::from_millis(50);
/// While escapees or zombies are left (protected by a running call, or still dying), the sweep
/// looks again after this long, doubling up to [`SWEEP_RETRY_MAX`].
const SWEEP_RETRY_MIN: Duration = Duration::from_millis(50);
const SWEEP_RETRY_MAX: Duration = Duration::from_secs(1);
/// With nothing asked for, the sweep still looks this often: as PID 1 (in a container) this
/// process also inherits orphans that no call of its own left.
const SWEEP_IDLE: Duration = Duration::from_secs(1);
/// How long [`kill_orphans_now`] keeps sweeping for processes still being re-parented.
const FINAL_SWEEP_LIMIT: Duration = Duration::from_secs(1);

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`; PID 1
/// is one anyway) and starts the sweep that kills and reaps a function's escaped processes.
/// For the servers that run functions: the runner and the pods' wrapper server.
pub fn adopt_orphans() -> io::Result<()> {
    adopt_orphans_for_one_call()?;
    let already_running = std::mem::replace(&mut sweeper().lock().running, true);
    if !already_running {
        std::thread::Builder::new()
            .name("orphan-sweep".into())
            .spawn(|| sweeper().run())?;
    }
    Ok(())
}

/// Makes this process the reaper of its orphaned descendants, as [`adopt_orphans`] does, without
/// the sweep: for a process that makes one call and then ends its escapees with
/// [`kill_orphans_now`] (`krm-runner fn` and `eval`), which needs no thread for them.
pub fn adopt_orphans_for_one_call() -> io::Result<()> {
    // SAFETY: plain prctl on this process, with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A call that may be running function processes. An escapee (a child of this process that
/// left the process group it was started in) is killed, or reaped if it is a zombie, only once
/// every call that was in flight when it started has ended: it belongs to one of them, and
/// never to a call that started after it. Create before starting the function; drop once its
/// process has been reaped.
pub struct CallInFlight {
    id: u64,
}

/// Registers a call for the orphan sweep; see [`CallInFlight`].
pub fn call_in_flight() -> CallInFlight {
    let mut state = sweeper().lock();
    state.next_id += 1;
    let id = state.next_id;
    state.calls.insert(id, boot_ticks_now());
    CallInFlight { id }
}

/// How many [`CallInFlight`]s are registered.
pub fn calls_in_flight() -> usize {
    sweeper().lock().calls.len()
}

impl Drop for CallInFlight {
    fn drop(&mut self) {
        let sweeper = sweeper();
        let mut state = sweeper.lock();
        state.calls.remove(&self.id);
        state.requested = true;
        sweeper.wake.notify_one();
    }
}

/// Kills and reaps every escapee now, calls in flight or not, sweeping until none is left or
/// [`FINAL_SWEEP_LIMIT`] passes: for a server about to exit, after it has cancelled its calls.
pub fn kill_orphans_now() {
    let until = Instant::now() + FINAL_SWEEP_LIMIT;
    while sweep(None).left > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct Sweeper {
    state: Mutex<SweepState>,
    wake: Condvar,
}

#[derive(Default)]
struct SweepState {
    running: bool,
    requested: bool,
    next_id: u64,
    /// Calls in flight: id -> start, in clock ticks since boot (as `/proc/PID/stat` counts).
    calls: HashMap<u64, u64>,
}

fn sweeper() -> &'static Sweeper {
    static SWEEPER: OnceLock<Sweeper> = OnceLock::new();
    SWEEPER.get_or_init(|| Sweeper {
        state: Mutex::new(SweepState::default()),
        wake: Condvar::new(),
    })
}

impl Sweeper {
    fn lock(&self) -> std::sync::MutexGuard<'_, SweepState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut next_look = SWEEP_IDLE;
        loop {
            let oldest_call = {
                let state = self.lock();
                let (mut state, _) = self
                    .wake
                    .wait_timeout_while(state, next_look, |state| !state.requested)
                    .unwrap_or_else(PoisonError::into_inner);
                state.requested = false;
                state.calls.values().min().copied()
            };
            let swept = sweep(oldest_call);
            next_look = match swept.left {
                0 => SWEEP_IDLE,
                _ if swept.killed > 0 => SWEEP_RETRY_MIN,
                _ => (next_look * 2).clamp(SWEEP_RETRY_MIN, SWEEP_RETRY_MAX),
            };
            std::thread::sleep(SWEEP_INTERVAL);
        }
    }
}

#[derive(Debug, Default)]
struct Swept {
    /// Escapees killed (with their descendants) in this sweep.
    killed: usize,
    /// Escapees and zombies still there: protected by a call in flight, or dying.
    left: usize,
}

/// Whether this process has any child, running or a zombie: without one there is nothing to
/// sweep, and asking costs one syscall where reading the process table costs hundreds.
fn has_children() -> bool {
    // SAFETY: `info` is a plain C struct waitid fills; WNOWAIT leaves any exited child
    // unreaped for whoever waits for it.
    let found = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    !(found == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
}

/// One pass: every child of this process that escaped its process group is reaped if it is a
/// zombie and killed, with all its descendants, if it is not, unless it started after
/// `oldest_call` (the start of the oldest call in flight), which may own it.
fn sweep(oldest_call: Option<u64>) -> Swept {
    if !has_children() {
        return Swept::default();
    }
    let me = libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX);
    // SAFETY: plain syscalls about this process.
    let (my_group, my_session) = unsafe { (libc::getpgrp(), libc::getsid(0)) };
    let table = process_table();
    let mut swept = Swept::default();
    for process in &table {
        let escaped = process.session != my_session
            || (process.group != my_group && process.group != process.pid);
        if process.parent != me || !escaped {
            continue;
        }
        // A tick of slack: both clocks are truncated to ticks.
        let owned_by_a_call = oldest_call.is_some_and(|oldest| process.started + 1 >= oldest);
        if owned_by_a_call {
            swept.left += 1;
        } else if process.zombie {
            // SAFETY: reaps our own child, which no one else waits for: the spawners of this
            // process wait for children that stayed in their group, or that belong to a call
            // still in flight.
            unsafe { libc::waitpid(process.pid, std::ptr::null_mut(), libc::WNOHANG) };
        } else {
            for pid in descendants(&table, process.pid) {
                // SAFETY: plain syscall; these processes are ours (our child and its tree).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            swept.killed += 1;
            // Killed, it is now a zombie to reap on a later pass.
            swept.left += 1;
        }
    }
    swept
}

/// `root` and every process below it.
fn descendants(table: &[ProcessStat], root: libc::pid_t) -> Vec<libc::pid_t> {
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(table.iter().filter(|p| p.parent == parent).map(|p| p.pid));
        next += 1;
    }
    found
}

/// What the sweep needs of `/proc/PID/stat`.
struct ProcessStat {
    pid: libc::pid_t,
    zombie: bool,
    parent: libc::pid_t,
    group: libc::pid_t,
    session: libc::pid_t,
    /// Clock ticks after boot.
    started: u64,
}

fn process_table() -> Vec<ProcessStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: libc::pid_t = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

fn parse_stat(pid: libc::pid_t, stat: &str) -> Option<ProcessStat> {
    // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    // Field 22, starttime, is the 16th after the session.
    let started = fields.nth(15)?.parse().ok()?;
    Some(ProcessStat {
        pid,
        zombie: state == "Z",
        parent,
        group,
        session,
        started,
    })
}

/// Now, in the clock ticks since boot that `/proc/PID/stat` gives process start times in.
fn boot_ticks_now() -> u64 {
    // SAFETY: timespec is plain data; clock_gettime fills it.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) };
    // SAFETY: plain sysconf query.
    let ticks_per_second =
        u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100);
    let seconds = u64::try_from(now.tv_sec).unwrap_or_default();
    let nanos = u64::try_from(now.tv_nsec).unwrap_or_default();
    seconds * ticks_per_second + nanos * ticks_per_second / 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let stat = "4242 (a) b (c)) S 7 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615";
        let parsed = parse_stat(4242, stat).unwrap();
        assert_eq!(
            (
                parsed.zombie,
                parsed.parent,
                parsed.group,
                parsed.session,
                parsed.started
            ),
            (false, 7, 4242, 4242, 987654)
        );
    }

    #[test]
    fn own_start_time_is_not_after_now() {
        // SAFETY: plain syscall.
        let me = unsafe { libc::getpid() };
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let started = parse_stat(me, &stat).unwrap().started;
        let now = boot_ticks_now();
        assert!(started <= now, "started {started}, now {now}");
    }
}
