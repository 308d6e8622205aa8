//! The real wrapper-server binary, its functions shell scripts, called over loopback gRPC.

mod common;

use std::time::Duration;

use common::*;
use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

async fn health_client(port: u16) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

const IMAGE: &str = "example.com/fn/test:v1";

#[tokio::test]
async fn success_returns_raw_stdout_and_stderr_as_log() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(dir.path(), "fn.sh", "cat\necho 'to stderr' >&2\n");
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let response = wrapper.call(IMAGE, INPUT, None).await.unwrap();
    assert_eq!(String::from_utf8(response.resource_list).unwrap(), INPUT);
    assert_eq!(String::from_utf8(response.log).unwrap(), "to stderr\n");
}

/// The caller's W3C trace context (gRPC metadata) reaches the function as TRACEPARENT and
/// TRACESTATE; a `traceparent` that is not one is not passed on.
#[tokio::test]
async fn the_callers_trace_context_reaches_the_function_environment() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(
        dir.path(),
        "fn.sh",
        "cat\necho \"[$TRACEPARENT] [$TRACESTATE]\" >&2\n",
    );
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    for (sent, expected) in [
        (
            Some((traceparent, "vendor=value")),
            format!("[{traceparent}] [vendor=value]\n"),
        ),
        (
            Some(("not-a-traceparent", "vendor=value")),
            "[] []\n".to_owned(),
        ),
        (None, "[] []\n".to_owned()),
    ] {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", wrapper.port))
                .unwrap()
                .connect()
                .await
                .unwrap();
        let mut request = tonic::Request::new(EvaluateFunctionRequest {
            resource_list: INPUT.as_bytes().to_vec(),
            image: IMAGE.to_owned(),
            tag: String::new(),
        });
        if let Some((parent, state)) = sent {
            request
                .metadata_mut()
                .insert("traceparent", parent.parse().unwrap());
            request
                .metadata_mut()
                .insert("tracestate", state.parse().unwrap());
        }
        let response = FunctionEvaluatorClient::new(channel)
            .evaluate_function(request)
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            String::from_utf8(response.log).unwrap(),
            expected,
            "{sent:?}"
        );
    }
}

#[tokio::test]
async fn arguments_environment_and_working_directory_are_the_wrappers() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(
        dir.path(),
        "fn.sh",
        "cat\necho \"args=$1,$2 env=$WRAPPER_TEST_ENV pwd=$(pwd)\" >&2\n",
    );
    let mut child = std::process::Command::new(WRAPPER);
    let port = free_port();
    let log = dir.path().join("log");
    let mut child = child
        .args([
            "--port",
            &port.to_string(),
            "--",
            "/bin/sh",
            &function,
            "a",
            "b c",
        ])
        .env("WRAPPER_TEST_ENV", "inherited")
        .current_dir(dir.path())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + BOUND;
    let response = loop {
        match call(port, IMAGE, INPUT, None).await {
            Ok(response) => break response,
            Err(status) if status.code() == Code::Unavailable => {
                assert!(std::time::Instant::now() < until, "wrapper never listened");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    let _ = child.kill();
    wait_bounded(&mut child, BOUND);
    let expected = format!(
        "args=a,b c env=inherited pwd={}\n",
        dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(String::from_utf8(response.log).unwrap(), expected);
}

#[tokio::test]
async fn non_zero_exit_with_results_is_internal_with_results_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(
        dir.path(),
        "fn.sh",
        r#"cat >/dev/null
cat <<'YAML'
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items: []
results:
- message: namespace is required
  severity: error
  resourceRef: {apiVersion: v1, kind: ConfigMap, name: cfg, namespace: ns}
  field: {path: data.namespace}
- message: second finding
  severity: warning
YAML
echo "validation failed" >&2
exit 1
"#,
    );
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let status = wrapper.call(IMAGE, INPUT, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(
        status.message(),
        "failed to evaluate function \"example.com/fn/test:v1\" with structured results: \
         [error] v1/ConfigMap/ns/cfg data.namespace: namespace is required\n\n\
         [warning]: second finding and stderr: validation failed\n"
    );
}

#[tokio::test]
async fn non_zero_exit_with_garbage_output_is_a_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(
        dir.path(),
        "fn.sh",
        "cat >/dev/null\necho 'not: [yaml'\necho oops >&2\nexit 3\n",
    );
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let status = wrapper.call(IMAGE, INPUT, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    let prefix = "failed to parse the output of function \"example.com/fn/test:v1\" with stderr \
                  'oops\n': failed to parse input bytes: failed to parse input bytes: ";
    assert!(status.message().starts_with(prefix), "{status:?}");
}

#[tokio::test]
async fn exit_zero_without_a_resource_list_is_internal() {
    let dir = tempfile::tempdir().unwrap();
    let config_map = script(
        dir.path(),
        "cm.sh",
        "cat >/dev/null\necho 'kind: ConfigMap'\n",
    );
    let wrapper = Wrapper::start(&["/bin/sh", &config_map]);
    let status = wrapper.call(IMAGE, INPUT, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(
        status.message(),
        "failed to parse the output of function \"example.com/fn/test:v1\" with stderr '': \
         input was of unexpected kind \"ConfigMap\"; expected ResourceList"
    );
    drop(wrapper);

    let silent = script(dir.path(), "silent.sh", "cat >/dev/null\necho quiet >&2\n");
    let wrapper = Wrapper::start(&["/bin/sh", &silent]);
    let status = wrapper.call(IMAGE, INPUT, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert_eq!(
        status.message(),
        "failed to parse the output of function \"example.com/fn/test:v1\" with stderr \
         'quiet\n': failed to parse input bytes: expected exactly one object, got 0"
    );
}

#[tokio::test]
async fn an_entrypoint_that_cannot_start_is_internal() {
    let wrapper = Wrapper::start(&["/nonexistent/function"]);
    let status = wrapper.call(IMAGE, INPUT, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status
            .message()
            .starts_with("Failed to execute function \"example.com/fn/test:v1\": "),
        "{status:?}"
    );
    // The server keeps serving.
    let status = wrapper.call(IMAGE, INPUT, None).await.unwrap_err();
    assert_eq!(status.code(), Code::Internal);
}

/// A function that starts a child and blocks: the pids it writes, and its entrypoint.
fn blocking_function(dir: &std::path::Path) -> String {
    script(
        dir,
        "block.sh",
        &format!(
            "echo $$ > {dir}/leader.pid.tmp && mv {dir}/leader.pid.tmp {dir}/leader.pid\n\
             sleep 600 &\n\
             echo $! > {dir}/child.pid.tmp && mv {dir}/child.pid.tmp {dir}/child.pid\n\
             wait\n",
            dir = dir.display()
        ),
    )
}

#[tokio::test]
async fn deadline_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let function = blocking_function(dir.path());
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let status = call_with_remote_deadline(wrapper.port, IMAGE, INPUT, "3S")
        .await
        .unwrap_err();
    krm_runner_tests::assert_deadline_answer(&status);
    let leader = read_pid(&dir.path().join("leader.pid"));
    let child = read_pid(&dir.path().join("child.pid"));
    wait_gone(&[leader, child]);
}

// Multi-threaded: the call runs on its own task while the test blocks waiting for pid files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_kills_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let function = blocking_function(dir.path());
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let port = wrapper.port;
    let call = tokio::spawn(async move { call(port, IMAGE, INPUT, None).await });
    let leader = read_pid(&dir.path().join("leader.pid"));
    let child = read_pid(&dir.path().join("child.pid"));
    assert!(!gone(leader) && !gone(child));
    call.abort();
    wait_gone(&[leader, child]);
    // The server is still serving.
    let mut health = health_client(port).await;
    health.check(HealthCheckRequest::default()).await.unwrap();
}

#[tokio::test]
async fn output_over_the_limit_is_refused_and_the_function_killed() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(
        dir.path(),
        "big.sh",
        "cat >/dev/null\nwhile :; do echo 0123456789012345678901234567890123456789; done\n",
    );
    let port = free_port();
    let mut child = std::process::Command::new(WRAPPER)
        .args([
            "--port",
            &port.to_string(),
            "--max-request-body-size",
            "65536",
        ])
        .args(["--", "/bin/sh", &function])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + BOUND;
    let status = loop {
        match call(port, IMAGE, INPUT, None).await {
            Err(status) if status.code() == Code::Unavailable => {
                assert!(std::time::Instant::now() < until, "wrapper never listened");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => break other.unwrap_err(),
        }
    };
    let _ = child.kill();
    wait_bounded(&mut child, BOUND);
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status.message().contains("its output exceeded 65536 bytes"),
        "{status:?}"
    );
}

#[tokio::test]
async fn health_is_serving_for_any_name_and_watch_sends_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(dir.path(), "fn.sh", "cat\n");
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let mut health = health_client(wrapper.port).await;
    for service in ["", "evaluator.FunctionEvaluator", "anything"] {
        let response = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.status, ServingStatus::Serving as i32);
    }
    let mut stream = health
        .watch(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(BOUND, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    let end = tokio::time::timeout(BOUND, stream.message()).await.unwrap();
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[test]
fn sigterm_stops_the_server_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let function = script(dir.path(), "fn.sh", "cat\n");
    let mut wrapper = Wrapper::start(&["/bin/sh", &function]);
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(wrapper.pid(), libc::SIGTERM) };
    let status = wrapper.wait_exit();
    assert!(status.success(), "{status}: {}", wrapper.log());
    assert!(wrapper.log().contains("stopped"), "{}", wrapper.log());
}

#[test]
fn a_missing_entrypoint_is_a_start_up_error() {
    for args in [
        &["--port", "0"][..],
        &["--port", "0", "--"][..],
        &["-port=0", "/bin/cat"][..],
    ] {
        let output = run_bounded(std::process::Command::new(WRAPPER).args(args), BOUND);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("entrypoint"),
            "{args:?}: unclear message: {stderr}"
        );
    }
    let output = run_bounded(
        std::process::Command::new(WRAPPER).args(["--bogus", "1", "--", "/bin/cat"]),
        BOUND,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown flag: --bogus"));
}

/// Processes that leave the function's process group (a `setsid` child with a child of its own,
/// a double-forked daemon) die with the call, and the wrapper (PID 1 in a pod) reaps them.
#[tokio::test]
async fn processes_that_leave_the_process_group_die_with_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let function = script(
        dir.path(),
        "escapes.sh",
        &format!(
            "setsid sh -c 'sleep 600 & echo $$ $! >> {pids}; wait' </dev/null >/dev/null 2>&1 &\n\
             sh -c 'setsid sh -c \"echo \\$\\$ >> {pids}; exec sleep 600\" </dev/null >/dev/null 2>&1 &' &\n\
             while [ \"$(wc -w < {pids} 2>/dev/null)\" != 3 ]; do sleep 0.01; done\n\
             cat\n",
            pids = pids.display()
        ),
    );
    let wrapper = Wrapper::start(&["/bin/sh", &function]);
    let response = wrapper.call(IMAGE, INPUT, None).await.unwrap();
    assert_eq!(response.resource_list, INPUT.as_bytes());
    let escaped: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(escaped.len(), 3, "{escaped:?}");
    wait_gone(&escaped);
    // None is left as a zombie of the wrapper either.
    let until = std::time::Instant::now() + BOUND;
    while escaped
        .iter()
        .any(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(
            std::time::Instant::now() < until,
            "{escaped:?} never reaped"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
