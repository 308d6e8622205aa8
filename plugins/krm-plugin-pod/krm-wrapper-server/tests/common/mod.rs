//! Helpers shared by the integration tests: the real `wrapper-server` binary on a loopback
//! port, shell-script functions, a gRPC client, bounded waits.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use krm_runner_proto::evaluator::{EvaluateFunctionRequest, EvaluateFunctionResponse};
use tonic::Status;

pub const WRAPPER: &str = env!("CARGO_BIN_EXE_wrapper-server");
pub const PROBE: &str = env!("CARGO_BIN_EXE_grpc-health-probe");

/// Upper bound for anything a test waits on.
pub const BOUND: Duration = Duration::from_secs(60);

pub const INPUT: &str = "\
apiVersion: config.kubernetes.io/v1
kind: ResourceList
# a comment the function must see, and the caller get back, untouched
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: cfg}
  data: {k: v}
";

/// A running wrapper server, killed when dropped.
pub struct Wrapper {
    child: Child,
    pub port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Wrapper {
    pub fn start(entrypoint: &[&str]) -> Self {
        Self::start_binary(WRAPPER, entrypoint)
    }

    pub fn start_binary(binary: &str, entrypoint: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wrapper.log");
        let port = free_port();
        let child = Command::new(binary)
            .args(["--port", &port.to_string(), "--"])
            .args(entrypoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut wrapper = Self {
            child,
            port,
            log,
            _dir: dir,
        };
        wrapper.wait_listening();
        wrapper
    }

    fn wait_listening(&mut self) {
        let until = Instant::now() + BOUND;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("wrapper-server exited with {status}: {}", self.log());
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < until,
                "wrapper-server not listening: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Waits (bounded) for the server to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        wait_bounded(&mut self.child, BOUND).expect("wrapper-server did not exit")
    }

    pub async fn call(
        &self,
        image: &str,
        input: &str,
        timeout: Option<Duration>,
    ) -> Result<EvaluateFunctionResponse, Status> {
        call(self.port, image, input, timeout).await
    }
}

impl Drop for Wrapper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, BOUND);
    }
}

/// One EvaluateFunction call over loopback, bounded.
pub async fn call(
    port: u16,
    image: &str,
    input: &str,
    timeout: Option<Duration>,
) -> Result<EvaluateFunctionResponse, Status> {
    let attempt = async {
        let mut client = FunctionEvaluatorClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut request = tonic::Request::new(EvaluateFunctionRequest {
            resource_list: input.as_bytes().to_vec(),
            image: image.to_owned(),
            tag: String::new(),
        });
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        client
            .evaluate_function(request)
            .await
            .map(tonic::Response::into_inner)
    };
    tokio::time::timeout(BOUND, attempt)
        .await
        .expect("call did not finish")
}

/// One call with the deadline enforced by the server only (see the runner's test support).
pub async fn call_with_remote_deadline(
    port: u16,
    image: &str,
    input: &str,
    grpc_timeout: &str,
) -> Result<EvaluateFunctionResponse, Status> {
    krm_runner_tests::call_with_remote_deadline(
        &format!("http://127.0.0.1:{port}"),
        EvaluateFunctionRequest {
            resource_list: input.as_bytes().to_vec(),
            image: image.to_owned(),
            tag: String::new(),
        },
        grpc_timeout,
    )
    .await
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A shell-script function; run it as `["/bin/sh", path]` (never exec a file just written: a
/// concurrently forked test process may still hold it open, and exec would fail with ETXTBSY).
pub fn script(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Waits for `child` to exit, at most `bound`; kills it when the bound passes.
pub fn wait_bounded(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs a command to completion, at most `bound`, capturing its output.
pub fn run_bounded(command: &mut Command, bound: Duration) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let status = wait_bounded(&mut child, bound)
        .unwrap_or_else(|| panic!("{command:?} did not finish within {bound:?}"));
    Output {
        status,
        stdout: fs::read(&out).unwrap(),
        stderr: fs::read(&err).unwrap(),
    }
}

/// Whether `pid` is gone (no such process, or only a zombie left).
pub fn gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Waits (bounded) until every pid is gone.
pub fn wait_gone(pids: &[i32]) {
    let until = Instant::now() + BOUND;
    while !pids.iter().all(|pid| gone(*pid)) {
        assert!(Instant::now() < until, "processes {pids:?} still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) for a file to hold a pid.
pub fn read_pid(path: &Path) -> i32 {
    let until = Instant::now() + BOUND;
    loop {
        if let Ok(text) = fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < until, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A test that needs a tool this machine lacks: skipped loudly, but a failure under CI=true.
pub fn missing_tool(tool: &str, test: &str) {
    let message = format!("{test}: `{tool}` is not on this machine");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message} (CI=true: required)");
    }
    eprintln!("\n!!!!! SKIPPED {message} !!!!!\n");
}
