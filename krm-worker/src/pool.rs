//! The runner's side: a pool of workers of one role, started ahead of the calls by a thread of
//! its own, each serving one call at a time.

use std::ffi::OsString;
use std::io::{BufReader, BufWriter, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::limits::{self, Limits};
use crate::message::{Kind, MAX_HEADER_BYTES, Message, MessageError};
use crate::serve::{InitHeader, ReadyHeader};

/// How a pool starts its workers.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The executable (the runner's own).
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The worker's whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// The role's `Init` header, which the worker's `serve` hands to its role.
    pub role: serde_json::Value,
    /// The role's `Init` parts.
    pub role_parts: Vec<Vec<u8>>,
}

/// Why a call through a worker did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// No worker could be started (and none was idle): the role failed, or the executable.
    #[error("no worker of {pool} could start: {reason}")]
    Start { pool: String, reason: String },
    /// Every worker stayed busy until the call's deadline (or the queue wait without one).
    #[error("all {max} workers of {pool} stayed busy for {} ms", waited.as_millis())]
    Busy {
        pool: String,
        max: usize,
        waited: Duration,
    },
    /// The call was cancelled (its caller, its deadline, shutdown): its worker was killed.
    #[error("the call was cancelled and its worker killed")]
    Cancelled,
    /// The worker's allocation failed at its address-space limit, and it died of it.
    #[error(
        "the call needed more memory than a worker's limit of {} MiB ({detail}); the worker \
         was replaced",
        limit >> 20
    )]
    OutOfMemory { limit: u64, detail: String },
    /// The call used its CPU time and the kernel ended the worker.
    #[error("the call used more than a worker's {seconds} s of CPU time; the worker was replaced")]
    CpuLimit { seconds: u64 },
    /// The worker's answer was over the message limit; it was killed before sending more.
    #[error("the worker's answer is too large: {0}")]
    TooLarge(#[source] MessageError),
    /// The worker died another way: a crash, a signal from outside.
    #[error("the worker died ({status}){log}")]
    Died { status: String, log: String },
    /// The worker sent what the protocol does not allow.
    #[error("the worker broke the protocol: {0}")]
    Protocol(#[source] MessageError),
}

/// A pool of workers of one role.
pub struct Pool {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    command: WorkerCommand,
    limits: Limits,
    state: Mutex<State>,
    /// Signalled whenever `state` changes: the keeper and the waiting calls watch it.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// Started workers waiting for a call, each with when it began to wait; the last one is
    /// the most recently used.
    idle: Vec<(Worker, Instant)>,
    busy: usize,
    starting: usize,
    /// Calls waiting for a worker.
    waiting: usize,
    /// Failed starts so far, and the last one's reason: calls that waited through a failure
    /// are answered with it.
    failures: u64,
    last_failure: String,
    closed: bool,
}

impl Pool {
    /// A pool named `name` (for messages and thread names) whose keeper thread starts
    /// `limits.idle` workers now and replaces them as they are used up.
    pub fn start(name: &str, command: WorkerCommand, limits: Limits) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            command,
            limits,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let keeper = shared.clone();
        // Workers are started from this thread alone: it lives as long as the pool, and a
        // worker's PDEATHSIG fires when the thread that started it ends.
        std::thread::Builder::new()
            .name(format!("workers-{name}"))
            .spawn(move || keeper.keep_started())?;
        Ok(Self { shared })
    }

    /// The pool's limits.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// Runs one call on a worker: waits for a free one until `deadline` (or the queue wait),
    /// hands `watch` the means to kill it for this call (call it when the call is cancelled),
    /// sends `request` and answers the worker's callbacks with `callback` until its answer.
    pub fn call(
        &self,
        request: &Message,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
        watch: impl FnOnce(Killer),
        callback: &mut dyn FnMut(Message) -> Message,
    ) -> Result<Message, WorkerError> {
        let shared = &self.shared;
        let mut worker = shared.checkout(deadline, cancelled)?;
        let killer = worker.begin_call();
        watch(killer.clone());
        // The cancellation may have come before `watch` registered the killer.
        if cancelled() {
            killer.kill();
        }
        let exchanged = worker.exchange(request, shared.limits.message_bytes, callback);
        killer.end();
        match exchanged {
            Ok(answer) => {
                shared.give_back(worker);
                Ok(answer)
            }
            Err(error) => {
                let error = worker.death(error, &shared.limits);
                shared.lose_busy();
                Err(error)
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let idle: Vec<(Worker, Instant)> = {
            let mut state = self.shared.lock();
            state.closed = true;
            std::mem::take(&mut state.idle)
        };
        self.shared.changed.notify_all();
        for (worker, _) in idle {
            worker.stop();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn checkout(
        &self,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Worker, WorkerError> {
        let asked = Instant::now();
        let give_up = deadline.unwrap_or(asked + self.limits.queue_wait);
        let mut state = self.lock();
        let failures_before = state.failures;
        state.waiting += 1;
        self.changed.notify_all();
        let outcome = loop {
            if let Some((mut worker, _)) = state.idle.pop() {
                // One killed while it waited (from outside) is replaced, not handed out.
                if worker.exited() {
                    drop(worker);
                    self.changed.notify_all();
                    continue;
                }
                state.busy += 1;
                break Ok(worker);
            }
            if state.failures != failures_before || state.closed {
                break Err(WorkerError::Start {
                    pool: self.name.clone(),
                    reason: if state.closed {
                        "the runner is stopping".to_owned()
                    } else {
                        state.last_failure.clone()
                    },
                });
            }
            if cancelled() {
                break Err(WorkerError::Cancelled);
            }
            let now = Instant::now();
            if now >= give_up {
                break Err(WorkerError::Busy {
                    pool: self.name.clone(),
                    max: self.limits.max,
                    waited: now - asked,
                });
            }
            // In slices, so that a cancelled caller stops waiting soon.
            let slice = (give_up - now).min(Duration::from_millis(50));
            state = self
                .changed
                .wait_timeout(state, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        state.waiting -= 1;
        drop(state);
        self.changed.notify_all();
        outcome
    }

    fn give_back(&self, mut worker: Worker) {
        worker.calls += 1;
        let spent = worker.calls >= self.limits.calls_per_worker;
        let mut state = self.lock();
        state.busy -= 1;
        if spent || state.closed {
            drop(state);
            worker.stop();
        } else {
            state.idle.push((worker, Instant::now()));
            drop(state);
        }
        self.changed.notify_all();
    }

    fn lose_busy(&self) {
        self.lock().busy -= 1;
        self.changed.notify_all();
    }

    /// The keeper: starts workers while fewer are idle or starting than wanted (the standing
    /// `idle` count, or as many as calls wait for, within `max`), and stops those idle past
    /// `idle_timeout` beyond the standing count.
    fn keep_started(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut state = self.lock();
            loop {
                if state.closed {
                    return;
                }
                let surplus = self.expired_idle(&mut state);
                if !surplus.is_empty() {
                    drop(state);
                    for worker in surplus {
                        worker.stop();
                    }
                    state = self.lock();
                    continue;
                }
                let ready = state.idle.len() + state.starting;
                let total = ready + state.busy;
                if ready < self.limits.idle.max(state.waiting) && total < self.limits.max {
                    break;
                }
                state = self
                    .changed
                    .wait_timeout(state, Duration::from_secs(1))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            state.starting += 1;
            drop(state);
            let started = Worker::start(&self);
            let mut state = self.lock();
            state.starting -= 1;
            let failed = match started {
                Ok(worker) => {
                    state.idle.insert(0, (worker, Instant::now()));
                    backoff = Duration::from_millis(100);
                    false
                }
                Err(reason) => {
                    tracing::warn!(pool = %self.name, "a worker could not start: {reason}");
                    state.failures += 1;
                    state.last_failure = reason;
                    true
                }
            };
            drop(state);
            self.changed.notify_all();
            if failed {
                // A role that cannot start fails every call waiting, but is not retried in a
                // tight loop.
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }

    /// Idle workers beyond the standing count that have waited longer than `idle_timeout`,
    /// taken out of the pool (oldest first: they are at the front).
    fn expired_idle(&self, state: &mut State) -> Vec<Worker> {
        let mut expired = Vec::new();
        while state.idle.len() > self.limits.idle
            && state.idle[0].1.elapsed() >= self.limits.idle_timeout
        {
            expired.push(state.idle.remove(0).0);
        }
        expired
    }
}

/// One worker process and its pipes.
struct Worker {
    child: Child,
    /// `None` once closed, which asks the worker to end.
    input: Option<BufWriter<ChildStdin>>,
    output: BufReader<ChildStdout>,
    /// The end of its standard error, kept for saying why it died.
    log: LogTail,
    calls: u32,
    kill: Arc<KillState>,
}

/// What decides whether a [`Killer`] may still kill: the call it was made for must be the
/// worker's current one, and the worker unreaped (after which its pid may be reused).
struct KillState {
    pid: libc::pid_t,
    inner: Mutex<KillInner>,
}

#[derive(Default)]
struct KillInner {
    call: u64,
    in_call: bool,
    reaped: bool,
    killed_for_call: bool,
}

/// Kills a worker for the one call it was handed out for, and never after that call ended.
#[derive(Clone)]
pub struct Killer {
    state: Arc<KillState>,
    call: u64,
}

impl Killer {
    /// Kills the worker if it is still serving the call this killer was made for.
    pub fn kill(&self) {
        let mut inner = self.state.lock();
        if inner.in_call && inner.call == self.call && !inner.reaped {
            inner.killed_for_call = true;
            // SAFETY: plain syscall; the group's leader is our unreaped child.
            unsafe { libc::killpg(self.state.pid, libc::SIGKILL) };
        }
    }

    fn end(&self) {
        let mut inner = self.state.lock();
        if inner.call == self.call {
            inner.in_call = false;
        }
    }
}

impl KillState {
    fn lock(&self) -> MutexGuard<'_, KillInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn kill_now(&self) {
        let inner = self.lock();
        if !inner.reaped {
            // SAFETY: as in `Killer::kill`.
            unsafe { libc::killpg(self.pid, libc::SIGKILL) };
        }
    }
}

/// How long a worker may take to start and take its role.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long a worker asked to stop may take before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(1);
/// The end of a worker's standard error kept.
const LOG_TAIL_BYTES: usize = 4096;

impl Worker {
    fn start(pool: &Shared) -> Result<Self, String> {
        let spec = &pool.command;
        let mut command = Command::new(&spec.program);
        command
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, which it leads: the runner's orphan sweep leaves it alone, and a
            // kill reaches anything it started.
            .process_group(0);
        let memory = pool.limits.memory_bytes;
        // SAFETY: `apply_in_child` makes only async-signal-safe calls (setrlimit, prctl,
        // close_range) and touches no memory shared with the parent.
        unsafe { command.pre_exec(move || limits::apply_in_child(memory)) };
        let mut child = command
            .spawn()
            .map_err(|error| format!("cannot run {}: {error}", spec.program.display()))?;
        let pid = child.id();
        let kill = Arc::new(KillState {
            pid: libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX),
            inner: Mutex::default(),
        });
        let (Some(input), Some(output), Some(errors)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            unreachable!("all three streams are piped above");
        };
        let mut worker = Worker {
            child,
            input: Some(BufWriter::with_capacity(64 * 1024, input)),
            output: BufReader::with_capacity(64 * 1024, output),
            log: LogTail::follow(errors),
            calls: 0,
            kill,
        };
        let init = Message {
            header: serde_json::to_vec(&InitHeader {
                cpu_seconds_per_call: pool.limits.cpu_seconds_per_call,
                message_bytes: pool.limits.message_bytes,
                role: spec.role.clone(),
            })
            .unwrap_or_default(),
            parts: spec.role_parts.clone(),
        };
        let watchdog = Watchdog::arm(worker.kill.clone(), START_LIMIT);
        let ready = worker
            .send(Kind::Init, &init)
            .and_then(|()| Message::read(&mut worker.output, MAX_HEADER_BYTES));
        let timed_out = watchdog.disarm();
        let failure = match ready {
            Ok((Kind::Ready, message)) => match message.header::<ReadyHeader>() {
                Ok(ReadyHeader { error: None }) => return Ok(worker),
                Ok(ReadyHeader { error: Some(error) }) => error,
                Err(error) => error.to_string(),
            },
            Ok((kind, _)) => format!("it answered {kind:?} instead of Ready"),
            Err(_) if timed_out => format!("it did not start within {} s", START_LIMIT.as_secs()),
            Err(_) => {
                let status = worker.reap();
                format!("it {}{}", describe(status), worker.log.text())
            }
        };
        worker.kill.kill_now();
        worker.reap();
        Err(failure)
    }

    fn begin_call(&mut self) -> Killer {
        let mut inner = self.kill.lock();
        inner.call += 1;
        inner.in_call = true;
        inner.killed_for_call = false;
        Killer {
            state: self.kill.clone(),
            call: inner.call,
        }
    }

    fn exchange(
        &mut self,
        request: &Message,
        part_limit: usize,
        callback: &mut dyn FnMut(Message) -> Message,
    ) -> Result<Message, MessageError> {
        self.send(Kind::Call, request)?;
        loop {
            match Message::read(&mut self.output, part_limit)? {
                (Kind::Answer, answer) => return Ok(answer),
                (Kind::Callback, question) => {
                    self.send(Kind::CallbackAnswer, &callback(question))?;
                }
                (kind, _) => return Err(MessageError::UnknownKind(kind as u8)),
            }
        }
    }

    fn send(&mut self, kind: Kind, message: &Message) -> Result<(), MessageError> {
        let input = self.input.as_mut().ok_or(MessageError::Closed)?;
        message.write(kind, input)
    }

    /// Why the call failed, once the worker is dead and reaped.
    fn death(mut self, error: MessageError, limits: &Limits) -> WorkerError {
        // After a protocol error or an oversized answer the worker may still be running.
        self.kill.kill_now();
        let status = self.reap();
        if self.kill.lock().killed_for_call {
            return WorkerError::Cancelled;
        }
        let log = self.log.text();
        match error {
            MessageError::TooLarge { .. } => return WorkerError::TooLarge(error),
            MessageError::UnknownKind(_) | MessageError::Header(_) => {
                return WorkerError::Protocol(error);
            }
            MessageError::Closed | MessageError::Io(_) => {}
        }
        match status.and_then(|status| status.signal()) {
            Some(libc::SIGXCPU) => WorkerError::CpuLimit {
                seconds: limits.cpu_seconds_per_call,
            },
            Some(_) if log.contains("memory allocation of") => WorkerError::OutOfMemory {
                limit: limits.memory_bytes,
                detail: log
                    .strip_prefix(": ")
                    .unwrap_or(&log)
                    .lines()
                    .find(|line| line.contains("memory allocation of"))
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            },
            _ => WorkerError::Died {
                status: describe(status),
                log,
            },
        }
    }

    /// Closes its input, which ends a worker between calls, and reaps it; killed if it does
    /// not end within [`STOP_LIMIT`].
    fn stop(mut self) {
        drop(self.input.take());
        let until = Instant::now() + STOP_LIMIT;
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.kill.lock().reaped = true;
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill.kill_now();
        self.reap();
    }

    /// Whether the worker has exited (reaping it if so).
    fn exited(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(None) => false,
            _ => {
                self.kill.lock().reaped = true;
                true
            }
        }
    }

    /// Waits for the worker to exit (it has been killed or is ending) and marks it reaped.
    fn reap(&mut self) -> Option<ExitStatus> {
        let status = self.child.wait().ok();
        self.kill.lock().reaped = true;
        status
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if !self.kill.lock().reaped {
            self.kill.kill_now();
            self.reap();
        }
    }
}

/// The worker's status in words.
fn describe(status: Option<ExitStatus>) -> String {
    match status {
        None => "could not be waited for".to_owned(),
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => {
                format!("was killed by signal {signal} ({})", signal_name(signal))
            }
            (None, None) => status.to_string(),
        },
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGKILL => "SIGKILL, not sent by the runner: the kernel's OOM killer, most likely",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGILL => "SIGILL",
        _ => "a signal",
    }
}

/// The last [`LOG_TAIL_BYTES`] of a worker's standard error, read by a thread of its own so
/// that a chatty worker never blocks on a full pipe.
struct LogTail {
    tail: Arc<Mutex<Vec<u8>>>,
    ended: mpsc::Receiver<()>,
}

impl LogTail {
    fn follow(mut errors: impl Read + Send + 'static) -> Self {
        let tail = Arc::new(Mutex::new(Vec::new()));
        let (done, ended) = mpsc::sync_channel(1);
        let kept = tail.clone();
        let _ = std::thread::Builder::new()
            .name("worker-log".into())
            .spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = errors.read(&mut chunk) {
                    let mut tail = kept.lock().unwrap_or_else(PoisonError::into_inner);
                    tail.extend_from_slice(&chunk[..n]);
                    let excess = tail.len().saturating_sub(LOG_TAIL_BYTES);
                    tail.drain(..excess);
                }
                let _ = done.send(());
            });
        Self { tail, ended }
    }

    /// The tail, once the worker's standard error has ended (or a moment has passed): `": "`
    /// and its text, or nothing when it printed nothing.
    fn text(&self) -> String {
        let _ = self.ended.recv_timeout(Duration::from_millis(500));
        let tail = self.tail.lock().unwrap_or_else(PoisonError::into_inner);
        let text = String::from_utf8_lossy(&tail);
        let text = text.trim();
        if text.is_empty() {
            String::new()
        } else {
            format!(": {text}")
        }
    }
}

/// Kills a worker that has not disarmed it within its limit.
struct Watchdog {
    disarm: mpsc::SyncSender<()>,
    fired: mpsc::Receiver<bool>,
}

impl Watchdog {
    fn arm(target: Arc<KillState>, limit: Duration) -> Self {
        let (disarm, disarmed) = mpsc::sync_channel(1);
        let (report, fired) = mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let timed_out = disarmed.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout);
            if timed_out {
                target.kill_now();
            }
            let _ = report.send(timed_out);
        });
        Self { disarm, fired }
    }

    /// Stops the watchdog; whether it had fired.
    fn disarm(self) -> bool {
        let _ = self.disarm.send(());
        self.fired.recv().unwrap_or(false)
    }
}
