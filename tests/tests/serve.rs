//! The runner as Porch sees it: the real `krm-runner` binary, real plugin libraries loaded from
//! the build folder, real function processes, called over loopback gRPC.

use std::time::{Duration, Instant};

use krm_runner_proto::evaluator::EvaluateFunctionRequest;
use krm_runner_tests::{
    Server, assert_deadline_answer, call_with_remote_deadline, exec_chain_config, read_pids,
    resource_list, scratch, script, wait_gone,
};
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
async fn exec_function_transforms_and_logs() {
    let dir = scratch();
    let function = script(
        dir.path(),
        "rename",
        "echo 'renaming' >&2\nsed 's/name: first/name: renamed/'",
    );
    let server = Server::start(
        &exec_chain_config(&[("example.com/rename:v1", &function)], "kit, exec", ""),
        &[],
    );
    let (response, evaluator) = server
        .call("example.com/rename:v1", &resource_list(&["first"]))
        .await
        .expect("call succeeds");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(output.contains("name: renamed"), "{output}");
    assert_eq!(String::from_utf8(response.log).unwrap(), "renaming\n");
    assert_eq!(evaluator, "exec");
    // The call's log line names the evaluator that served and the one that declined first.
    let log = server.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("example.com/rename:v1"))
        .unwrap_or_else(|| panic!("no call line in:\n{log}"));
    assert!(
        line.contains("evaluator=\"exec\"") || line.contains("evaluator=exec"),
        "{line}"
    );
    assert!(
        line.contains("declined=\"kit\"") || line.contains("declined=kit"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_image_is_not_found_with_porchs_message() {
    let server = Server::start(&exec_chain_config(&[], "kit, exec", ""), &[]);
    let status = server
        .call("example.com/nothing:v1", &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    // Porch's wording first, then why each evaluator declined.
    assert_eq!(
        status.message(),
        "function \"example.com/nothing:v1\" not found: kit: declined without a reason; \
         exec: no executable is mapped to this image (`functions`: exact image names)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_function_reports_status_stderr_and_results() {
    let dir = scratch();
    let function = script(
        dir.path(),
        "fails",
        r#"cat >/dev/null
cat <<'EOF'
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items: []
results:
- message: replicas must be at least 2
  severity: error
  resourceRef: {apiVersion: apps/v1, kind: Deployment, name: web, namespace: prod}
  field: {path: spec.replicas}
EOF
echo 'validation failed' >&2
exit 3"#,
    );
    let server = Server::start(
        &exec_chain_config(&[("example.com/fails:v1", &function)], "exec", ""),
        &[],
    );
    let status = server
        .call("example.com/fails:v1", &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    let message = status.message();
    assert!(
        message.starts_with("Failed to execute function \"example.com/fails:v1\""),
        "{message}"
    );
    assert!(message.contains("exit status 3"), "{message}");
    assert!(message.contains("validation failed"), "{message}");
    assert!(
        message.contains(
            "[error] apps/v1/Deployment/prod/web spec.replicas: replicas must be at least 2"
        ),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_executable_fails_naming_the_path() {
    let server = Server::start(
        &exec_chain_config(
            &[(
                "example.com/gone:v1",
                std::path::Path::new("/nonexistent/fn"),
            )],
            "exec",
            "",
        ),
        &[],
    );
    let status = server
        .call("example.com/gone:v1", &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        Code::Internal,
        "a mapped image never falls through"
    );
    assert!(
        status.message().contains("/nonexistent/fn"),
        "{}",
        status.message()
    );
}

/// A function that starts a background child, records both pids, and hangs.
fn hanging_function(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let pids = dir.join("pids");
    let function = script(
        dir,
        "hangs",
        &format!("sleep 300 &\necho $$ $! > {}\nsleep 300", pids.display()),
    );
    (function, pids)
}

#[tokio::test(flavor = "multi_thread")]
async fn deadline_kills_the_whole_process_group() {
    let dir = scratch();
    let (function, pids_file) = hanging_function(dir.path());
    let server = Server::start(
        &exec_chain_config(&[("example.com/hangs:v1", &function)], "exec", ""),
        &[],
    );
    let status = call_with_remote_deadline(
        &server.endpoint(),
        EvaluateFunctionRequest {
            resource_list: resource_list(&["a"]),
            image: "example.com/hangs:v1".into(),
            tag: String::new(),
        },
        "700m",
    )
    .await
    .unwrap_err();
    assert_deadline_answer(&status);
    let pids = read_pids(&pids_file, 2, Duration::from_secs(5));
    let alive = wait_gone(&pids, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "function processes survived the deadline: {alive:?}"
    );
    // And the runner keeps serving.
    assert!(server.health_check().await.is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn caller_cancel_kills_the_whole_process_group() {
    let dir = scratch();
    let (function, pids_file) = hanging_function(dir.path());
    let server = Server::start(
        &exec_chain_config(&[("example.com/hangs:v1", &function)], "exec", ""),
        &[],
    );
    let mut client = server.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: resource_list(&["a"]),
                image: "example.com/hangs:v1".into(),
                tag: String::new(),
            })
            .await
    });
    let pids = read_pids(&pids_file, 2, Duration::from_secs(10));
    // Dropping the call resets the HTTP/2 stream: gRPC cancellation.
    call.abort();
    let alive = wait_gone(&pids, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "function processes survived the cancellation: {alive:?}"
    );
    let started = Instant::now();
    while !server.stderr().contains("Cancelled") && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        server.stderr().contains("outcome=\"Cancelled\"")
            || server.stderr().contains("outcome=Cancelled"),
        "{}",
        server.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_request_is_resource_exhausted_and_server_keeps_serving() {
    let server = Server::start(
        &exec_chain_config(
            &[("krm-runner/identity", std::path::Path::new("/bin/cat"))],
            "exec",
            "max_message_bytes: 65536\n",
        ),
        &[],
    );
    let big = vec![b'x'; 100 * 1024];
    let status = server.call("krm-runner/identity", &big).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("65536"), "{}", status.message());
    let (response, _) = server
        .call("krm-runner/identity", &resource_list(&["a"]))
        .await
        .expect("normal call");
    assert_eq!(response.resource_list, resource_list(&["a"]));
}

/// Porch's `EvaluateFunctionRequest` with its string fields as bytes, so that they can carry
/// what is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct EvaluateFunctionBytes {
    #[prost(bytes = "vec", tag = "1")]
    resource_list: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    image: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    tag: Vec<u8>,
}

/// `krmrunner.v1.InvokeRequest` (and `ListTypedFunctionsRequest`, its first field) likewise.
#[derive(Clone, PartialEq, prost::Message)]
struct InvokeBytes {
    #[prost(bytes = "vec", tag = "1")]
    toolchain: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    config_data: Vec<u8>,
    #[prost(message, repeated, tag = "3")]
    invocations: Vec<InvocationBytes>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct InvocationBytes {
    #[prost(bytes = "vec", tag = "1")]
    function_name: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    arguments: Vec<ArgumentBytes>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ArgumentBytes {
    #[prost(bytes = "vec", tag = "1")]
    parameter_name: Vec<u8>,
    /// The `string_value` of the `value` oneof.
    #[prost(bytes = "vec", tag = "2")]
    string_value: Vec<u8>,
}

/// The answer to `message` sent to the gRPC method `path`: an error, whatever the method.
async fn refusal<M: prost::Message + Send + 'static>(
    channel: &tonic::transport::Channel,
    path: &str,
    message: M,
) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    grpc.unary::<_, (), _>(
        tonic::Request::new(message),
        path.parse().unwrap(),
        tonic_prost::ProstCodec::<M, ()>::default(),
    )
    .await
    .expect_err(path)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_string_field_that_is_not_utf8_is_an_invalid_argument_naming_it() {
    let server = Server::start("", &[]);
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let bad = b"set-\xff\xfenamespace".to_vec();
    let evaluate = |image: &[u8], tag: &[u8]| EvaluateFunctionBytes {
        resource_list: resource_list(&["a"]),
        image: image.to_vec(),
        tag: tag.to_vec(),
    };
    let invoke = |toolchain: &[u8], name: &[u8], parameter: &[u8], value: &[u8]| InvokeBytes {
        toolchain: toolchain.to_vec(),
        config_data: b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n".to_vec(),
        invocations: vec![InvocationBytes {
            function_name: name.to_vec(),
            arguments: vec![ArgumentBytes {
                parameter_name: parameter.to_vec(),
                string_value: value.to_vec(),
            }],
        }],
    };
    let yaml = b"Kubernetes/YAML";
    const EVALUATE: &str = "/evaluator.FunctionEvaluator/EvaluateFunction";
    const INVOKE: &str = "/krmrunner.v1.FunctionExecutor/Invoke";
    let refusals = [
        (
            refusal(&channel, EVALUATE, evaluate(&bad, b"")).await,
            "EvaluateFunctionRequest.image",
        ),
        (
            refusal(&channel, EVALUATE, evaluate(b"set-namespace", &bad)).await,
            "EvaluateFunctionRequest.tag",
        ),
        (
            refusal(&channel, INVOKE, invoke(&bad, b"get-replicas", b"", b"x")).await,
            "InvokeRequest.toolchain",
        ),
        (
            refusal(&channel, INVOKE, invoke(yaml, &bad, b"", b"x")).await,
            "Invocation.function_name",
        ),
        (
            refusal(&channel, INVOKE, invoke(yaml, b"set-replicas", &bad, b"x")).await,
            "Argument.parameter_name",
        ),
        (
            refusal(&channel, INVOKE, invoke(yaml, b"set-replicas", b"", &bad)).await,
            "Argument.value",
        ),
        (
            refusal(
                &channel,
                "/krmrunner.v1.FunctionExecutor/ListTypedFunctions",
                invoke(&bad, b"", b"", b""),
            )
            .await,
            "ListTypedFunctionsRequest.toolchain",
        ),
    ];
    for (status, field) in refusals {
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().contains(field) && status.message().contains("UTF-8"),
            "{field}: {status:?}"
        );
    }
    let (response, _) = server
        .call("krm-runner/identity", &resource_list(&["a"]))
        .await
        .expect("the runner keeps serving");
    assert_eq!(response.resource_list, resource_list(&["a"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn function_output_over_the_limit_is_resource_exhausted() {
    let dir = scratch();
    let function = script(
        dir.path(),
        "spews",
        "cat >/dev/null\nhead -c 200000 /dev/zero",
    );
    let server = Server::start(
        &exec_chain_config(
            &[("example.com/spews:v1", &function)],
            "exec",
            "max_message_bytes: 65536\n",
        ),
        &[],
    );
    let status = server
        .call("example.com/spews:v1", &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains("its output exceeded 65536 bytes (max_output_bytes)"),
        "{}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn plugins_loaded_from_one_folder_stay_distinct() {
    let dir = scratch();
    let function = script(dir.path(), "id", "cat");
    let server = Server::start(
        &exec_chain_config(&[("example.com/id:v1", &function)], "kit, exec", ""),
        &[],
    );
    let (response, evaluator) = server.call("testkit/echo", b"hello").await.unwrap();
    assert_eq!(
        (response.resource_list.as_slice(), evaluator.as_str()),
        (&b"hello"[..], "kit")
    );
    assert_eq!(response.log, b"kit");
    let (_, evaluator) = server.call("example.com/id:v1", b"x").await.unwrap();
    assert_eq!(evaluator, "exec");
}

#[tokio::test(flavor = "multi_thread")]
async fn panicking_plugin_answers_internal_and_server_keeps_serving() {
    let server = Server::start(&exec_chain_config(&[], "kit", ""), &[]);
    for _ in 0..3 {
        let status = server.call("testkit/panic", b"x").await.unwrap_err();
        assert_eq!(status.code(), Code::Internal);
        assert!(
            status.message().contains("testkit was asked to panic"),
            "{}",
            status.message()
        );
    }
    let (response, _) = server.call("testkit/echo", b"still here").await.unwrap();
    assert_eq!(response.resource_list, b"still here");
}

#[tokio::test(flavor = "multi_thread")]
async fn chain_order_is_the_configured_order() {
    for (chain, expected) in [("kit, kit2", "kit"), ("kit2, kit", "kit2")] {
        // Several starts each: Porch's order changed from start to start.
        for _ in 0..3 {
            let server = Server::start(&exec_chain_config(&[], chain, ""), &[]);
            let (response, evaluator) = server.call("testkit/echo", b"x").await.unwrap();
            assert_eq!(evaluator, expected, "chain [{chain}]");
            assert_eq!(response.log, expected.as_bytes());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn disabled_runtime_is_skipped() {
    let server = Server::start(
        &exec_chain_config(
            &[("krm-runner/identity", std::path::Path::new("/bin/cat"))],
            "kit, exec",
            "",
        ),
        &["--disable-runtimes", "exec,nosuch"],
    );
    let status = server.call("krm-runner/identity", b"x").await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(
        server.stderr().contains("nosuch"),
        "unknown names are warned about"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_stays_fast_while_slow_calls_are_in_flight() {
    let dir = scratch();
    let function = script(
        dir.path(),
        "slow",
        "cat >/dev/null\nsleep 2\necho 'items: []'",
    );
    let server = Server::start(
        &exec_chain_config(&[("example.com/slow:v1", &function)], "exec", ""),
        &[],
    );
    let endpoint = server.endpoint();
    let mut calls = Vec::new();
    for _ in 0..40 {
        let endpoint = endpoint.clone();
        calls.push(tokio::spawn(async move {
            let mut client =
                krm_runner_proto::evaluator::function_evaluator_client::FunctionEvaluatorClient::connect(endpoint)
                    .await
                    .unwrap();
            client
                .evaluate_function(EvaluateFunctionRequest {
                    resource_list: b"items: []".to_vec(),
                    image: "example.com/slow:v1".into(),
                    tag: String::new(),
                })
                .await
        }));
    }
    // Let the calls start their processes, then probe health while they sleep.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let started = Instant::now();
        server.health_check().await.expect("health answers");
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        slowest < Duration::from_millis(100),
        "slowest health check took {slowest:?}"
    );
    for call in calls {
        call.await.unwrap().expect("slow call completes");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_logs_reach_the_runner_log() {
    let server = Server::start(&exec_chain_config(&[], "kit", ""), &[]);
    server.call("testkit/log", b"x").await.unwrap();
    let started = Instant::now();
    while !server.stderr().contains("testkit log event")
        && started.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        server.stderr().contains("testkit log event"),
        "{}",
        server.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_in_flight_calls_finish() {
    let server = Server::start(&exec_chain_config(&[], "kit", ""), &[]);
    let mut client = server.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: b"x".to_vec(),
                image: "testkit/sleep:1000".into(),
                tag: String::new(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    let response = call.await.unwrap().expect("the in-flight call finished");
    assert_eq!(response.into_inner().resource_list, b"x");
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn grace_period_cancels_calls_that_outlive_it() {
    let server = Server::start(
        &exec_chain_config(&[], "kit", "shutdown_grace_seconds: 1\n"),
        &[],
    );
    let mut client = server.client().await;
    let call = tokio::spawn(async move {
        client
            .evaluate_function(EvaluateFunctionRequest {
                resource_list: b"x".to_vec(),
                image: "testkit/sleep:60000".into(),
                tag: String::new(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let status = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.code(), Code::Unavailable, "{error:?}");
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn porch_legacy_exec_config_and_functions_dir_load() {
    let dir = scratch();
    let functions = dir.path().join("functions");
    std::fs::create_dir(&functions).unwrap();
    script(&functions, "set-marker", "sed 's/key: value/key: marked/'");
    let legacy = dir.path().join("porch-config.yaml");
    std::fs::write(
        &legacy,
        "functions:\n- function: set-marker\n  images:\n  - ghcr.io/kptdev/krm-functions-catalog/set-marker:v1\n  - ghcr.io/kptdev/krm-functions-catalog/set-marker:latest\n",
    )
    .unwrap();
    let server = Server::start(
        &exec_chain_config(&[], "exec", ""),
        &[
            "--functions",
            functions.to_str().unwrap(),
            "--config",
            legacy.to_str().unwrap(),
        ],
    );
    for image in [
        "ghcr.io/kptdev/krm-functions-catalog/set-marker:v1",
        "ghcr.io/kptdev/krm-functions-catalog/set-marker:latest",
    ] {
        let (response, evaluator) = server
            .call(image, &resource_list(&["a"]))
            .await
            .expect(image);
        assert!(
            String::from_utf8(response.resource_list)
                .unwrap()
                .contains("key: marked")
        );
        assert_eq!(evaluator, "exec");
    }
    // Exact strings only: another tag, or the short name, is not mapped.
    let status = server
        .call("set-marker", &resource_list(&["a"]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn functions_get_a_minimal_environment() {
    let dir = scratch();
    let function = script(
        dir.path(),
        "env",
        "cat >/dev/null\nenv | sort >&2\necho 'items: []'",
    );
    let config_text = format!(
        "evaluators:\n  exec:\n    plugin: exec\n    config:\n      env: {{SHARED: everyone}}\n      inherit_env: [PASSED_THROUGH]\n      functions:\n        - {{image: example.com/env:v1, path: \"{}\", env: {{OWN: mine}}}}\n  default:\n    plugin: multi\n    config: {{chain: [exec]}}\n",
        function.display()
    );
    let server = Server::start_with_env(
        &config_text,
        &[],
        &[("RUNNER_SECRET", "do-not-leak"), ("PASSED_THROUGH", "yes")],
    );
    let (response, _) = server
        .call("example.com/env:v1", b"items: []")
        .await
        .unwrap();
    let env = String::from_utf8(response.log).unwrap();
    assert!(!env.contains("RUNNER_SECRET"), "{env}");
    for expected in [
        "OWN=mine",
        "SHARED=everyone",
        "PASSED_THROUGH=yes",
        "HOME=/tmp",
        "PATH=/usr/local/sbin",
    ] {
        assert!(env.contains(expected), "missing {expected} in:\n{env}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn health_is_serving_for_any_service_name() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let server = Server::start(&exec_chain_config(&[], "kit", ""), &[]);
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    for service in ["", "evaluator.FunctionEvaluator", "anything-at-all"] {
        let response = client
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap();
        assert_eq!(response.into_inner().status, 1, "SERVING for {service:?}");
    }
    let mut watch = client
        .watch(HealthCheckRequest {
            service: "x".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().status, 1);
    assert!(
        watch.message().await.unwrap().is_none(),
        "Watch sends exactly one message"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chatty_function_log_is_capped_not_fatal() {
    let dir = scratch();
    // 5 MiB of stderr, more than the 1 MiB log cap, and a normal result.
    let function = script(
        dir.path(),
        "chatty",
        "head -c 5242880 /dev/zero | tr '\\0' 'x' >&2\ncat",
    );
    let server = Server::start(
        &exec_chain_config(&[("example.com/chatty:v1", &function)], "exec", ""),
        &[],
    );
    let (response, _) = server
        .call("example.com/chatty:v1", &resource_list(&["a"]))
        .await
        .expect("call succeeds");
    assert_eq!(response.resource_list, resource_list(&["a"]));
    let log = String::from_utf8(response.log).unwrap();
    assert!(
        log.len() < 1024 * 1024 + 200,
        "log is capped, got {} bytes",
        log.len()
    );
    assert!(
        log.ends_with("[krm-runner: 4194304 more bytes of log dropped]\n"),
        "{}",
        &log[log.len() - 80..]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn crashing_function_is_internal_and_server_keeps_serving() {
    let dir = scratch();
    let function = script(dir.path(), "crash", "kill -SEGV $$");
    let server = Server::start(
        &exec_chain_config(
            &[
                ("example.com/crash:v1", &function),
                ("krm-runner/identity", std::path::Path::new("/bin/cat")),
            ],
            "exec",
            "",
        ),
        &[],
    );
    let status = server
        .call("example.com/crash:v1", b"items: []")
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal);
    assert!(
        status.message().contains("killed by signal 11"),
        "{}",
        status.message()
    );
    let (response, _) = server
        .call("krm-runner/identity", b"items: []")
        .await
        .unwrap();
    assert_eq!(response.resource_list, b"items: []");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_log_has_one_structured_line_per_call() {
    let server = Server::start(
        &exec_chain_config(&[], "kit", ""),
        &["--log-format", "json"],
    );
    server.call("testkit/echo", b"x").await.unwrap();
    let started = Instant::now();
    let line = loop {
        let found = server
            .stderr()
            .lines()
            .find(|l| l.contains("testkit/echo"))
            .map(str::to_owned);
        if let Some(line) = found {
            break line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no call line in:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let event: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(event["image"], "testkit/echo");
    assert_eq!(event["evaluator"], "kit");
    assert_eq!(event["outcome"], "Ok");
    assert!(event["duration_ms"].as_f64().is_some(), "{line}");
}
