//! Typed functions contributed by a plugin (the testkit's `list-names`, `stamp`, `sleep`,
//! `explode` and a clashing `get-replicas`), through the real binary: `krm-runner list`, `do`
//! and `doseq` next to the builtin functions, the HTTP routes and gRPC
//! `krmrunner.v1.FunctionExecutor` of `krm-runner serve`, name clashes, bad arguments, a
//! panicking function, deadlines; and FunctionConfig goExecutor ids reaching the builtin's
//! typed functions.

use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use base64::{Engine, engine::general_purpose::STANDARD};
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_client::FunctionExecutorClient;
use krm_runner_tests::{Server, free_port, http_exchange, run_cli, scratch};
use serde_json::{Value, json};
use tonic::Code;

const UNIT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # keep\n  namespace: shop\nspec:\n  replicas: 1\n";

/// The default configuration plus the testkit instance `kit` (and `more` more instances).
fn config(more: &[&str], extra: &str) -> String {
    let mut text = String::from("evaluators:\n  kit: {plugin: testkit}\n");
    for name in more {
        text.push_str(&format!("  {name}: {{plugin: testkit}}\n"));
    }
    text.push_str(extra);
    text
}

/// `krm-runner ARGS` with `config` as its configuration file and UNIT on stdin.
fn cli(dir: &Path, config: &str, args: &[&str]) -> (i32, String, String) {
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).unwrap();
    let mut all = vec!["--config-file", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let output = run_cli(&all, &[], UNIT.as_bytes());
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn plugin_functions_are_listed_and_clashes_reported_naming_both() {
    let dir = scratch();
    let (code, list, stderr) = cli(dir.path(), &config(&[], ""), &["list"]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<&str> = list.lines().filter_map(|l| l.split(' ').next()).collect();
    for name in [
        "list-names",
        "stamp",
        "kit/list-names",
        "kit/stamp",
        "kit/get-replicas",
        "get-replicas",
        "set-replicas",
    ] {
        assert!(rows.contains(&name), "{name} missing from:\n{list}");
    }
    let stamp = list
        .lines()
        .find(|l| l.starts_with("stamp "))
        .expect("stamp row");
    assert!(stamp.contains("testkit: annotates"), "{stamp}");
    assert!(
        stderr.contains(
            "evaluators.kit: typed function \"get-replicas\" clashes with the builtin typed \
             function \"get-replicas\": the builtin keeps \"get-replicas\", kit's answers to \
             \"kit/get-replicas\""
        ),
        "{stderr}"
    );

    // Two instances of one plugin: neither takes the bare names, both are reported.
    let (code, list, stderr) = cli(dir.path(), &config(&["kit2"], ""), &["list"]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<&str> = list.lines().filter_map(|l| l.split(' ').next()).collect();
    assert!(!rows.contains(&"list-names"), "{list}");
    assert!(rows.contains(&"kit/list-names") && rows.contains(&"kit2/list-names"));
    assert!(
        stderr.contains(
            "evaluators.kit, evaluators.kit2: typed function \"list-names\" is contributed by \
             each of them: none answers to \"list-names\"; call kit/list-names or kit2/list-names"
        ),
        "{stderr}"
    );
}

#[test]
fn do_and_doseq_run_plugin_functions_next_to_builtin_ones() {
    let dir = scratch();
    let config = config(&[], "");
    let (code, out, stderr) = cli(
        dir.path(),
        &config,
        &["do", "--output-only", "-", "web", "list-names", "-x"],
    );
    assert_eq!(code, 0, "{stderr}");
    let output: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(output[0]["Value"], "web-x", "{out}");
    assert_eq!(output[0]["ResourceName"], "shop/web", "{out}");

    // The builtin keeps the bare name; the plugin's answers to its qualified one.
    let (_, out, _) = cli(
        dir.path(),
        &config,
        &["do", "--output-only", "-", "web", "get-replicas"],
    );
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()[0]["Value"], 1);
    let (_, out, _) = cli(
        dir.path(),
        &config,
        &["do", "--output-only", "-", "web", "kit/get-replicas"],
    );
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()[0]["Value"],
        "testkit"
    );

    // A sequence: builtin setter, plugin setter, plugin getter, builtin getter; the outputs
    // are appended, the data carries both changes, comments kept.
    let invocations = json!([
        {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
        {"FunctionName": "stamp", "Arguments": [{"Value": "v1"}]},
        {"FunctionName": "kit/list-names", "Arguments": [{"ParameterName": "suffix", "Value": "-y"}]},
        {"FunctionName": "get-replicas"}
    ])
    .to_string();
    let (code, out, stderr) = cli(dir.path(), &config, &["doseq", "-", "web", &invocations]);
    assert_eq!(code, 0, "{stderr}\n{out}");
    assert!(out.starts_with("SUCCESS    true"), "{out}");
    assert!(out.contains("  name: web # keep\n"), "{out}");
    assert!(out.contains("testkit.example.com/stamp: v1"), "{out}");
    assert!(out.contains("  replicas: 3\n"), "{out}");
    let output = out.split("OUTPUT\n------\n").nth(1).expect("OUTPUT");
    let output: Value = serde_json::from_str(output).unwrap();
    assert_eq!(output[0]["Value"], "web-y", "{output}");
    assert_eq!(output[1]["Value"], 3, "{output}");
}

#[test]
fn bad_arguments_are_checked_against_the_plugins_signature_before_it_runs() {
    let dir = scratch();
    let config = config(&[], "");
    let (code, out, _) = cli(
        dir.path(),
        &config,
        &["do", "-", "web", "stamp", "Not Valid"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ERRORMESSAGES"), "{out}");
    assert!(out.contains("stamp") && out.contains("value"), "{out}");
    assert!(!out.contains("CONFIGDATA"), "nothing changed: {out}");
    let (code, out, _) = cli(
        dir.path(),
        &config,
        &["do", "-", "web", "sleep", "--millis=999999"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("millis"), "{out}");
    let (code, out, _) = cli(dir.path(), &config, &["do", "-", "web", "stamp"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("value"), "names the missing parameter: {out}");
    // A qualified name that is not fctl's, or an unknown instance.
    let (code, _, stderr) = cli(dir.path(), &config, &["do", "-", "web", "kit/Stamp"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, out, _) = cli(dir.path(), &config, &["do", "-", "web", "nokit/stamp"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("nokit/stamp: function does not exist"),
        "{out}"
    );
}

#[test]
fn a_panicking_plugin_function_fails_its_invocation_and_changes_nothing() {
    let dir = scratch();
    let config = config(&[], "");
    let invocations = json!([
        {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
        {"FunctionName": "explode"},
        {"FunctionName": "stamp", "Arguments": [{"Value": "after"}]}
    ])
    .to_string();
    let (code, out, stderr) = cli(
        dir.path(),
        &config,
        &["doseq", "--stop", "-", "web", &invocations],
    );
    assert_eq!(code, 1, "{stderr}\n{out}");
    assert!(
        out.contains("explode: evaluator panicked while running typed function \"explode\": testkit's explode was asked to panic"),
        "{out}"
    );
    // Stopped there: the first change stays, the third never ran.
    assert!(out.contains("  replicas: 3\n"), "{out}");
    assert!(!out.contains("testkit.example.com/stamp"), "{out}");
}

#[test]
fn a_cli_timeout_stops_the_sequence_between_invocations() {
    let dir = scratch();
    let invocations = json!([
        {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
        {"FunctionName": "sleep", "Arguments": [{"Value": "20000"}]},
        {"FunctionName": "set-replicas", "Arguments": [{"Value": "5"}]}
    ])
    .to_string();
    let started = Instant::now();
    let (code, out, stderr) = cli(
        dir.path(),
        &config(&[], ""),
        &["doseq", "--timeout", "0.5", "-", "web", &invocations],
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(out, "", "nothing is printed but the error");
    assert!(
        stderr.contains(
            "the sequence exceeded the caller's deadline at invocation 1 (sleep); no data changed"
        ),
        "{stderr}"
    );
}

// ---- served ----

fn serve(more: &[&str]) -> (Server, u16) {
    let http = free_port();
    let server = Server::start(
        &config(more, &format!("confighub_listen: \"127.0.0.1:{http}\"\n")),
        &[],
    );
    (server, http)
}

fn invoke_body(invocations: Value) -> Vec<u8> {
    json!({
        "ToolchainType": "Kubernetes/YAML",
        "ConfigData": STANDARD.encode(UNIT),
        "CastStringArgsToScalars": true,
        "FunctionInvocations": invocations,
    })
    .to_string()
    .into_bytes()
}

/// The server's answer, waiting for the listener to come up.
fn post(port: u16, headers: &str, invocations: Value) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let (status, body) = http_exchange(
                port,
                "POST",
                "/function/kubernetes",
                headers,
                &invoke_body(invocations),
            );
            let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
            return (status, body);
        }
        assert!(Instant::now() < deadline, "confighub_listen never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn config_data(response: &Value) -> String {
    let encoded = response["ConfigData"].as_str().expect("ConfigData");
    String::from_utf8(STANDARD.decode(encoded).unwrap()).unwrap()
}

#[test]
fn http_runs_plugin_functions_in_sequences_and_keeps_serving_after_a_panic() {
    let (_server, port) = serve(&[]);
    let (status, response) = post(
        port,
        "",
        json!([
            {"FunctionName": "stamp", "Arguments": [{"Value": "http"}]},
            {"FunctionName": "set-replicas", "Arguments": [{"Value": 4}]},
            {"FunctionName": "list-names"}
        ]),
    );
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["Success"], true, "{response}");
    assert_eq!(response["Mutators"], json!([0, 1]), "{response}");
    let data = config_data(&response);
    assert!(data.contains("testkit.example.com/stamp: http"), "{data}");
    assert!(data.contains("replicas: 4"), "{data}");
    let output: Value = serde_json::from_slice(
        &STANDARD
            .decode(response["Output"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(output[0]["Value"], "web", "{output}");

    let (status, list) = http_exchange(port, "GET", "/function/kubernetes", "", b"");
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["kit/stamp"]["Mutating"], true, "{list}");
    assert_eq!(list["stamp"]["Parameters"][0]["Regexp"], "^[a-z0-9-]+$");

    for _ in 0..2 {
        let (status, response) = post(
            port,
            "",
            json!([
                {"FunctionName": "stamp", "Arguments": [{"Value": "before"}]},
                {"FunctionName": "explode"}
            ]),
        );
        assert_eq!(status, 200, "{response}");
        assert_eq!(response["Success"], false);
        let messages = response["ErrorMessages"].to_string();
        assert!(
            messages.contains("testkit's explode was asked to panic"),
            "{messages}"
        );
        // The panicking invocation changed nothing; the one before it stands.
        assert!(config_data(&response).contains("stamp: before"));
    }
    let (status, response) = post(port, "", json!([{"FunctionName": "list-names"}]));
    assert_eq!(
        (status, &response["Success"]),
        (200, &json!(true)),
        "{response}"
    );

    // A deadline: the sequence stops at the slow invocation, and nothing is answered but why.
    let started = Instant::now();
    let (status, response) = post(
        port,
        "X-Krm-Timeout: 0.5\r\n",
        json!([
            {"FunctionName": "set-replicas", "Arguments": [{"Value": 7}]},
            {"FunctionName": "sleep", "Arguments": [{"Value": 20000}]}
        ]),
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(status, 504, "{response}");
    // The runner stopping the worker may answer first, or the sequence the plugin's stopped
    // function ended, naming where.
    let message = response["message"].as_str().unwrap();
    assert!(
        message.contains("exceeded the caller's deadline; its worker was stopped and no data changed")
            || message.contains(
                "the sequence exceeded the caller's deadline at invocation 1 (sleep); no data changed"
            ),
        "{response}"
    );
    let (status, _) = post(port, "X-Krm-Timeout: soon\r\n", json!([]));
    assert_eq!(status, 400);
}

/// Fault 12 of issue 27: SIGTERM lets a sequence in flight over HTTP and over gRPC finish
/// within the grace period, as it does an EvaluateFunction call.
#[tokio::test(flavor = "multi_thread")]
async fn shutdown_lets_sequences_in_flight_finish() {
    let (server, port) = serve(&[]);
    let slow = json!([
        {"FunctionName": "set-replicas", "Arguments": [{"Value": 4}]},
        {"FunctionName": "sleep", "Arguments": [{"Value": 4000}]}
    ]);
    let over_http = std::thread::spawn(move || post(port, "", slow));
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let over_grpc = tokio::spawn(async move {
        client
            .invoke(pb::InvokeRequest {
                toolchain: "Kubernetes/YAML".to_owned(),
                config_data: UNIT.as_bytes().to_vec(),
                invocations: vec![invocation("sleep", vec![int_argument(4000)])],
                ..pb::InvokeRequest::default()
            })
            .await
    });
    // Both sequences are in their sleep when the signal comes: a request still unread then
    // would rightly be refused, so the signal waits half the sleep, a generous margin on a
    // loaded machine.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    server.signal(libc::SIGTERM);
    let Ok((status, response)) = over_http.join() else {
        panic!(
            "the HTTP sequence was not answered; the runner said:\n{}",
            server.stderr()
        );
    };
    assert_eq!(
        (status, &response["Success"]),
        (200, &json!(true)),
        "{response}"
    );
    let response = over_grpc
        .await
        .unwrap()
        .expect("answered, not cut")
        .into_inner();
    assert!(response.success, "{:?}", response.error_messages);
    let mut server = server;
    assert!(
        server
            .wait_exit(Duration::from_secs(10))
            .is_some_and(|s| s.success())
    );
}

/// A `FunctionExecutor/Invoke` carrying `grpc-timeout` but with no deadline timer on the
/// client (tonic's channel would answer CANCELLED locally), so the answer is the server's.
async fn invoke_with_remote_deadline(
    endpoint: &str,
    request: pb::InvokeRequest,
    grpc_timeout: &str,
) -> Result<pb::InvokeResponse, tonic::Status> {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let http = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<tonic::body::Body>();
    let mut client = FunctionExecutorClient::with_origin(http, endpoint.parse().unwrap());
    let mut request = tonic::Request::new(request);
    request
        .metadata_mut()
        .insert("grpc-timeout", grpc_timeout.parse().unwrap());
    client
        .invoke(request)
        .await
        .map(tonic::Response::into_inner)
}

fn invocation(name: &str, arguments: Vec<pb::Argument>) -> pb::Invocation {
    pb::Invocation {
        function_name: name.to_owned(),
        arguments,
    }
}

fn int_argument(value: i64) -> pb::Argument {
    pb::Argument {
        parameter_name: String::new(),
        value: Some(pb::argument::Value::IntValue(value)),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_runs_plugin_functions_and_answers_deadline_exceeded() {
    let (server, _) = serve(&[]);
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let request = |invocations| pb::InvokeRequest {
        toolchain: "Kubernetes/YAML".to_owned(),
        config_data: UNIT.as_bytes().to_vec(),
        invocations,
        ..pb::InvokeRequest::default()
    };
    let response = client
        .invoke(request(vec![
            invocation("set-replicas", vec![int_argument(2)]),
            invocation(
                "kit/stamp",
                vec![pb::Argument {
                    parameter_name: "value".to_owned(),
                    value: Some(pb::argument::Value::StringValue("grpc".to_owned())),
                }],
            ),
            invocation("list-names", vec![]),
        ]))
        .await
        .unwrap()
        .into_inner();
    assert!(response.success, "{:?}", response.error_messages);
    let data = String::from_utf8(response.config_data).unwrap();
    assert!(
        data.contains("stamp: grpc") && data.contains("replicas: 2"),
        "{data}"
    );
    assert_eq!(response.output_type, "AttributeValueList");

    let list = client
        .list_typed_functions(pb::ListTypedFunctionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(list.json.contains("\"kit/list-names\""), "{}", list.json);

    // Bad arguments: named, and the plugin never ran (nothing changed).
    let response = client
        .invoke(request(vec![invocation("sleep", vec![int_argument(-5)])]))
        .await
        .unwrap()
        .into_inner();
    assert!(!response.success);
    assert!(
        response.error_messages[0].contains("millis"),
        "{:?}",
        response.error_messages
    );

    let started = Instant::now();
    let status = invoke_with_remote_deadline(
        &server.endpoint(),
        request(vec![
            invocation("set-replicas", vec![int_argument(9)]),
            invocation("sleep", vec![int_argument(20_000)]),
            invocation("set-replicas", vec![int_argument(10)]),
        ]),
        "500m",
    )
    .await
    .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    // The server's deadline layer may answer first, or the stopped sequence, naming where.
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // Still serving.
    let response = client
        .invoke(request(vec![invocation("list-names", vec![])]))
        .await
        .unwrap()
        .into_inner();
    assert!(response.success);
}

#[tokio::test(flavor = "multi_thread")]
async fn function_config_go_executor_ids_reach_typed_functions() {
    let dir = scratch();
    std::fs::create_dir_all(dir.path().join("fc")).unwrap();
    std::fs::write(
        dir.path().join("fc/typed.yaml"),
        r#"apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: replicas}
spec:
  image: replicas
  prefixes: [example.com/fns]
  goExecutor: {tags: [v1], id: set-replicas}
---
apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata: {name: namespace}
spec:
  image: namespace
  prefixes: [example.com/fns]
  goExecutor: {tags: [v1], id: confighub/set-namespace}
"#,
    )
    .unwrap();
    let server = Server::start(
        &format!(
            "function_configs:\n  paths: [\"{}\"]\n",
            dir.path().join("fc").display()
        ),
        &[],
    );
    let input = |data: &str| {
        format!(
            "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: fn-config}}\n  data: {{{data}}}\nitems:\n- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web\n    namespace: shop\n  spec:\n    replicas: 1\n"
        )
        .into_bytes()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (response, evaluator) = loop {
        match server
            .call("example.com/fns/replicas:v1", &input("replicas: \"6\""))
            .await
        {
            Ok(answer) => break answer,
            Err(status) if Instant::now() < deadline => {
                assert_eq!(status.code(), Code::NotFound, "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("never routed: {status:?}"),
        }
    };
    assert_eq!(evaluator, "confighub");
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(output.contains("replicas: 6"), "{output}");

    // ConfigHub's set-namespace (parameter namespace-name), not the catalog's.
    let (response, _) = server
        .call(
            "example.com/fns/namespace:v1",
            &input("namespace-name: routed"),
        )
        .await
        .unwrap();
    let output = String::from_utf8(response.resource_list).unwrap();
    assert!(output.contains("namespace: routed"), "{output}");
    // A tag the FunctionConfig does not list is not routed; the chain declines the image.
    let status = server
        .call("example.com/fns/replicas:v2", &input("replicas: \"6\""))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}
