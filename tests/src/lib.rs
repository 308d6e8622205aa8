//! Test support: the real `krm-runner` binary and plugin libraries from this workspace's build,
//! started as processes and called over loopback gRPC.
//!
//! The tests need `cargo build --workspace` to have run first (the plugins are `cdylib`s, which
//! `cargo test` does not build); `tests/run.sh` does that.

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use krm_runner_proto::evaluator::{EvaluateFunctionRequest, EvaluateFunctionResponse};
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

pub use krm_kube_standin::fixture::static_wrapper_server_context;

/// The cargo target folder holding this build's binary and plugin libraries.
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test binary>
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_owned()
}

/// The `krm-runner` binary of this build.
pub fn runner_binary() -> PathBuf {
    let binary = build_dir().join("krm-runner");
    for executable in [&binary, &build_dir().join("krm-runner-server")] {
        assert!(
            executable.is_file(),
            "{} is missing: run `cargo build --workspace` before the tests (tests/run.sh does)",
            executable.display()
        );
    }
    for plugin in ["builtin", "exec", "multi", "testkit"] {
        let library = build_dir().join(format!("libkrm_plugin_{plugin}.so"));
        assert!(
            library.is_file(),
            "{} is missing: run `cargo build --workspace` before the tests (tests/run.sh does)",
            library.display()
        );
    }
    binary
}

/// A scratch folder removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("krm-runner-test-")
        .tempdir()
        .expect("temp dir")
}

/// Writes an executable shell script (a KRM function, for the exec evaluator).
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod script");
    path
}

/// A loopback port nobody is listening on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// How [`Server::launch`] starts the runner.
#[derive(Default)]
pub struct Launch<'a> {
    /// Extra environment variables.
    pub env: &'a [(&'a str, &'a str)],
    /// A command that runs the runner (its path and arguments appended), such as
    /// `unshare --pid --kill-child --mount-proc` to make it PID 1.
    pub under: &'a [&'a str],
    /// RLIMIT_NOFILE for the runner.
    pub max_open_files: Option<u64>,
    /// RLIMIT_AS for the runner, in bytes: a test whose regression would allocate without
    /// bound then fails with the runner, not the machine.
    pub memory_limit: Option<u64>,
}

/// A `krm-runner serve` process on loopback, killed when dropped.
pub struct Server {
    pub port: u16,
    child: Child,
    stderr_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts the runner with `config` (YAML) as its `--config-file`, plus `args`.
    pub fn start(config: &str, args: &[&str]) -> Self {
        Self::start_with_env(config, args, &[])
    }

    pub fn start_with_env(config: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::launch(
            config,
            args,
            &Launch {
                env,
                ..Launch::default()
            },
        )
    }

    /// Starts the runner as `launch` says.
    pub fn launch(config: &str, args: &[&str], launch: &Launch<'_>) -> Self {
        let dir = scratch();
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, config).expect("write config");
        let stderr_path = dir.path().join("stderr.log");
        let port = free_port();
        let mut command = match launch.under.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(runner_binary());
                command
            }
            None => Command::new(runner_binary()),
        };
        let limits: Vec<(libc::__rlimit_resource_t, u64)> = [
            (libc::RLIMIT_NOFILE, launch.max_open_files),
            (libc::RLIMIT_AS, launch.memory_limit),
        ]
        .into_iter()
        .filter_map(|(resource, limit)| Some((resource, limit?)))
        .collect();
        if !limits.is_empty() {
            // SAFETY: setrlimit is async-signal-safe; the closure touches nothing else.
            unsafe {
                command.pre_exec(move || {
                    for &(resource, limit) in &limits {
                        let limit = libc::rlimit {
                            rlim_cur: limit,
                            rlim_max: limit,
                        };
                        if libc::setrlimit(resource, &limit) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        let env = launch.env;
        let child = command
            .arg("--config-file")
            .arg(&config_path)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--plugin-dir")
            .arg(build_dir())
            .args(args)
            .arg("serve")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
            .spawn()
            .expect("start krm-runner");
        let mut server = Self {
            port,
            child,
            stderr_path,
            _dir: dir,
        };
        server.wait_until_serving();
        server
    }

    fn wait_until_serving(&mut self) {
        let started = Instant::now();
        // Its own thread and runtime: callers may be inside an async test already.
        let endpoint = self.endpoint();
        let probe = move || {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(health_check(endpoint)).is_ok()
            })
            .join()
            .unwrap_or(false)
        };
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "krm-runner exited early ({status}); stderr:\n{}",
                    self.stderr()
                );
            }
            if probe.clone()() {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "krm-runner did not serve within 20 s; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub async fn client(&self) -> FunctionEvaluatorClient<Channel> {
        FunctionEvaluatorClient::connect(self.endpoint())
            .await
            .expect("connect")
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20)
    }

    /// One Health/Check round trip.
    pub async fn health_check(&self) -> Result<i32, tonic::Status> {
        health_check(self.endpoint()).await
    }

    /// Calls EvaluateFunction; on success also returns the `x-krm-evaluator` header.
    pub async fn call(
        &self,
        image: &str,
        resource_list: &[u8],
    ) -> Result<(EvaluateFunctionResponse, String), tonic::Status> {
        let response = self
            .client()
            .await
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: resource_list.to_vec(),
                image: image.to_owned(),
                tag: String::new(),
            })
            .await?;
        let evaluator = response
            .metadata()
            .get("x-krm-evaluator")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Ok((response.into_inner(), evaluator))
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the process started (the runner, or the command it runs under).
    pub fn signal(&self, signal: i32) {
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if started.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) takes plain integers; the child is not reaped yet, so its pid is ours.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "runner ignored SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn health_check(endpoint: String) -> Result<i32, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint)
        .expect("endpoint")
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await?;
    Ok(response.into_inner().status)
}

/// One HTTP/1.1 exchange with the server on loopback `port` (JSON body, `headers`: extra
/// header lines, each ending in `\r\n`); the status code and the body. The server may answer
/// (and close) before taking a body it refuses.
pub fn http_exchange(
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> (u16, String) {
    let (status, _, body) = http_exchange_with_head(port, method, path, headers, body);
    (status, body)
}

/// [`http_exchange`], with the response's head (its status line and header lines) between the
/// status code and the body.
pub fn http_exchange_with_head(
    port: u16,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the HTTP listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_owned(), body.to_owned())
}

/// Runs `krm-runner ARGS` to completion (plugins from this build), feeding `stdin`.
pub fn run_cli(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    // A line starting with `fn` keeps it first, so that `krm-runner` runs the call itself
    // rather than through `krm-runner-server`.
    let (first, rest) = match args.split_first() {
        Some((&"fn", rest)) => (&["fn"][..], rest),
        _ => (&[][..], args),
    };
    run_with_input(
        Command::new(runner_binary())
            .args(first)
            .arg("--plugin-dir")
            .arg(build_dir())
            .args(rest)
            .envs(env.iter().copied()),
        stdin,
    )
}

/// Runs `command` to completion, feeding `stdin` (from another thread, so that a process
/// that writes before it reads cannot block on a full pipe) and collecting its output.
pub fn run_with_input(command: &mut Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run krm-runner");
    let mut input = child.stdin.take().expect("stdin");
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let output = child.wait_with_output().expect("krm-runner output");
    writer.join().expect("stdin writer");
    output
}

/// Runs `krm-runner ARGS` (plugins from this build, no stdin) expecting it to exit by itself:
/// one still running after `limit` (a hang, or a server that started when it should have
/// refused) is killed and fails the test.
pub fn run_cli_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(runner_binary())
        .arg("--plugin-dir")
        .arg(build_dir())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run krm-runner");
    let started = Instant::now();
    while child.try_wait().expect("wait for krm-runner").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().expect("krm-runner output");
            panic!(
                "krm-runner {args:?} still running after {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("krm-runner output")
}

/// A runner configuration: `exec` serving each (image, executable) pair, two testkit instances
/// (`kit` and `kit2`, which decline images they do not know), `default` asking the multi
/// `chain` (e.g. `"kit, exec"`), then `extra`, top-level YAML.
pub fn exec_chain_config(functions: &[(&str, &Path)], chain: &str, extra: &str) -> String {
    let mut text = String::from("evaluators:\n  exec:\n    plugin: exec\n    config:\n");
    if functions.is_empty() {
        text.push_str("      functions: []\n");
    } else {
        text.push_str("      functions:\n");
    }
    for (image, path) in functions {
        text.push_str(&format!(
            "        - {{image: \"{image}\", path: \"{}\"}}\n",
            path.display()
        ));
    }
    text.push_str(&format!(
        "  kit:\n    plugin: testkit\n  kit2:\n    plugin: testkit\n  default:\n    plugin: multi\n    config: {{chain: [{chain}]}}\n{extra}"
    ));
    text
}

/// Runs the real kpt with `args`.
pub fn kpt(args: &[&str]) -> Output {
    Command::new("kpt").args(args).output().expect("run kpt")
}

/// The command that makes kpt run this build's `krm-runner fn FUNCTION` (`kpt fn eval --exec`,
/// a Kptfile `exec:` step).
pub fn fn_command(function: &str) -> String {
    format!("{} fn {function}", runner_binary().display())
}

/// `kpt fn eval PACKAGE --exec "krm-runner fn FUNCTION" [-- ARGS]`, this build's runner
/// standing for the function.
pub fn kpt_eval_exec(package: &Path, function: &str, args: &[&str]) -> Output {
    let command = fn_command(function);
    let mut all = vec!["fn", "eval", package.to_str().unwrap(), "--exec", &command];
    if !args.is_empty() {
        all.push("--");
        all.extend_from_slice(args);
    }
    kpt(&all)
}

/// A kpt package: the folder `pkg` under `dir`, holding `app.yaml`.
pub fn kpt_package(dir: &Path, app_yaml: &str) -> PathBuf {
    let package = dir.join("pkg");
    std::fs::create_dir(&package).unwrap();
    std::fs::write(package.join("app.yaml"), app_yaml).unwrap();
    package
}

/// A small ResourceList with one ConfigMap per name.
pub fn resource_list(names: &[&str]) -> Vec<u8> {
    let mut text =
        String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    for name in names {
        text.push_str(&format!(
            "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: {name}\n  data:\n    key: value\n"
        ));
    }
    text.into_bytes()
}

/// What the tests read of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy)]
pub struct ProcessStat {
    pub pid: i32,
    pub state: char,
    pub parent: i32,
    /// User plus system CPU time, in clock ticks.
    pub cpu_ticks: u64,
}

/// One process's `/proc/PID/stat`, if it exists.
pub fn process_stat(pid: i32) -> Option<ProcessStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let number = |index: usize| fields.get(index)?.parse::<u64>().ok();
    Some(ProcessStat {
        pid,
        state: fields.first()?.chars().next()?,
        parent: fields.get(1)?.parse().ok()?,
        cpu_ticks: number(11)? + number(12)?,
    })
}

/// Every process whose parent is `parent`.
pub fn children_of(parent: i32) -> Vec<ProcessStat> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(process_stat)
        .filter(|stat| stat.parent == parent)
        .collect()
}

/// Resident memory of a process, in KiB.
pub fn resident_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Whether a process with this id exists (zombies count as gone).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Waits up to `limit` for every process in `pids` to be gone.
pub fn wait_gone(pids: &[i32], limit: Duration) -> Vec<i32> {
    let started = Instant::now();
    loop {
        let alive: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|pid| process_alive(*pid))
            .collect();
        if alive.is_empty() || started.elapsed() > limit {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads whitespace-separated pids a function wrote to `path`, waiting for it to appear.
pub fn read_pids(path: &Path, expected: usize, limit: Duration) -> Vec<i32> {
    let started = Instant::now();
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.len() >= expected {
            return pids;
        }
        assert!(
            started.elapsed() < limit,
            "function never wrote {} pids to {}",
            expected,
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The workspace's root folder (the checkout), for tests that read its files.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// Builds the `testkit` plugin against the *previous* plugin ABI (krm-plugin-api compiled with
/// `--cfg krm_plugin_api_previous`) in a separate target folder, and returns the library.
/// The first build takes a minute; later ones are cached.
pub fn previous_abi_plugin() -> PathBuf {
    let workspace = repo_root();
    let target = build_dir().parent().expect("target").join("previous-abi");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&workspace)
        .args([
            "build",
            "--quiet",
            "-p",
            "krm-plugin-testkit",
            "--target-dir",
        ])
        .arg(&target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env("RUSTFLAGS", "--cfg krm_plugin_api_previous")
        .status()
        .expect("run cargo");
    assert!(
        status.success(),
        "building the previous-ABI testkit plugin failed"
    );
    target.join("debug").join("libkrm_plugin_testkit.so")
}

/// Builds the standalone plugin template (`plugin-template/`, its own workspace depending on
/// the SDK by path, as a platform team's plugin would) with the given panic strategy, in a
/// target folder of its own, and returns its library. The first build takes a minute or two.
pub fn template_plugin(panic_strategy: &str) -> PathBuf {
    let target = build_dir()
        .parent()
        .expect("target")
        .join(format!("plugin-template-{panic_strategy}"));
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(repo_root().join("plugin-template"))
        .args(["build", "--quiet", "--lib", "--config"])
        .arg(format!("profile.dev.panic=\"{panic_strategy}\""))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .status()
        .expect("run cargo");
    assert!(status.success(), "building plugin-template failed");
    target.join("debug").join("libkrm_plugin_stamp.so")
}

/// Whether `tool` is on PATH. When it is not, the test is reported as skipped (one `SKIPPED`
/// line in cargo's output) and the caller returns; under `CI=true` a missing tool fails the
/// test instead, so CI never passes by skipping.
pub fn have_tool(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        krm_kube_standin::fixture::skip(&format!(
            "{tool} is not on PATH; this test needs the real {tool}"
        ));
    }
    found
}

/// One EvaluateFunction call carrying `grpc-timeout: <grpc_timeout>` but with no deadline timer
/// on the client side (tonic's channel would cancel locally at the same instant and answer
/// CANCELLED itself), so the answer is the server's own.
pub async fn call_with_remote_deadline(
    endpoint: &str,
    request: EvaluateFunctionRequest,
    grpc_timeout: &str,
) -> Result<EvaluateFunctionResponse, tonic::Status> {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let http = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<tonic::body::Body>();
    let origin: http::Uri = endpoint.parse().expect("endpoint URI");
    let mut client = FunctionEvaluatorClient::with_origin(http, origin);
    let mut request = tonic::Request::new(request);
    request.metadata_mut().insert(
        "grpc-timeout",
        grpc_timeout.parse().expect("grpc-timeout value"),
    );
    tokio::time::timeout(Duration::from_secs(60), client.evaluate_function(request))
        .await
        .expect("call did not finish")
        .map(tonic::Response::into_inner)
}

/// The server's answer to a call whose deadline passed: Porch's DEADLINE_EXCEEDED, which our
/// servers send 20 ms before tonic's own `grpc-timeout` timer (started at the same arrival
/// instant) would answer CANCELLED "Timeout expired".
pub fn assert_deadline_answer(status: &tonic::Status) {
    assert_eq!(
        status.code(),
        tonic::Code::DeadlineExceeded,
        "expected DEADLINE_EXCEEDED, got {status:?}"
    );
}

/// Builds the WASI test function `tests/wasm/NAME.c` into `dir/NAME.wasm` with Debian's clang
/// and wasi-libc (`tests/run.sh` installs them). `None`, reported as skipped, when the
/// toolchain is missing (a failure under `CI=true`).
pub fn wasm_module(dir: &Path, name: &str) -> Option<PathBuf> {
    if !have_tool("clang") {
        return None;
    }
    if !Path::new("/usr/lib/wasm32-wasi/libc.a").is_file() {
        krm_kube_standin::fixture::skip(
            "wasi-libc is not installed; this test builds WASI modules",
        );
        return None;
    }
    let source = repo_root().join("tests/wasm").join(format!("{name}.c"));
    let module = dir.join(format!("{name}.wasm"));
    let output = Command::new("clang")
        .args(["--target=wasm32-wasi", "-O2", "-o"])
        .arg(&module)
        .arg(&source)
        .output()
        .expect("run clang");
    assert!(
        output.status.success(),
        "clang could not build {}: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(module)
}
