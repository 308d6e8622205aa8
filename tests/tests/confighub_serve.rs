//! ConfigHub's typed functions served by the real `krm-runner serve`: functionsrv's HTTP routes
//! on `confighub_listen` (a raw HTTP/1.1 client, so that hostile requests can be sent as they
//! are) and `krmrunner.v1.FunctionExecutor` on the gRPC listener.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use base64::{Engine, engine::general_purpose::STANDARD};
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_client::FunctionExecutorClient;
use krm_runner_tests::{Server, free_port, http_exchange, repo_root};
use serde_json::{Value, json};
use tonic::Code;

const UNIT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # keep\n  namespace: shop\nspec:\n  replicas: 1\n";

/// Small enough that the limit tests stay quick, large enough for the path registry (about
/// 300 KB of JSON) and the signatures.
fn start() -> (Server, u16) {
    let http = free_port();
    let server = Server::start(
        &format!("confighub_listen: \"127.0.0.1:{http}\"\nmax_message_bytes: 1048576\n"),
        &[],
    );
    (server, http)
}

/// One HTTP/1.1 exchange; returns the status code and the body.
fn http(port: u16, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    http_exchange(port, method, path, "", body)
}

fn invoke_body(data: &str, invocations: Value) -> Vec<u8> {
    json!({
        "ToolchainType": "Kubernetes/YAML",
        "UnitSlug": "web",
        "UnitID": "5837950a-619e-44da-9b75-f957c2aee14c",
        "RevisionNum": 1,
        "ConfigData": STANDARD.encode(data),
        "CastStringArgsToScalars": true,
        "CombineValidationResults": true,
        "FunctionInvocations": invocations,
    })
    .to_string()
    .into_bytes()
}

fn config_data(response: &Value) -> String {
    let encoded = response["ConfigData"].as_str().expect("ConfigData");
    String::from_utf8(STANDARD.decode(encoded).unwrap()).unwrap()
}

#[test]
fn functionsrv_routes_over_http() {
    let (server, port) = start();
    assert_eq!(
        http(port, "GET", "/function/ok", b""),
        (200, "\"OK\"".to_owned())
    );
    assert_eq!(
        http(port, "GET", "/function/info", b""),
        (200, "\"OK\"".to_owned())
    );

    let (status, body) = http(port, "GET", "/function/kubernetes", b"");
    assert_eq!(status, 200, "{body}");
    let functions: Value = serde_json::from_str(&body).unwrap();
    let replicas = &functions["set-replicas"];
    assert_eq!(replicas["FunctionName"], "set-replicas", "{replicas}");
    assert_eq!(replicas["Mutating"], true, "{replicas}");
    assert_eq!(replicas["Parameters"][0]["DataType"], "int", "{replicas}");

    let (status, body) = http(port, "GET", "/function/kubernetes/paths", b"");
    assert_eq!(status, 200, "{body}");
    let paths: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        paths["replicas"]["apps/v1/Deployment"]["spec.replicas"]["DataType"],
        "int"
    );

    let request = invoke_body(
        UNIT,
        json!([
            {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
            {"FunctionName": "get-replicas", "Arguments": []}
        ]),
    );
    let (status, body) = http(port, "POST", "/function/kubernetes", &request);
    assert_eq!(status, 200, "{body}");
    let response: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(response["Success"], true, "{response}");
    assert_eq!(response["Mutators"], json!([0]), "{response}");
    assert_eq!(response["OutputType"], "AttributeValueList", "{response}");
    assert_eq!(response["UnitID"], "5837950a-619e-44da-9b75-f957c2aee14c");
    assert_eq!(
        config_data(&response),
        UNIT.replace("replicas: 1", "replicas: 3")
    );
    let output: Value = serde_json::from_slice(
        &STANDARD
            .decode(response["Output"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(output[0]["Value"], 3, "{output}");
    assert_eq!(
        response["Mutations"][0]["PathMutationMap"]["spec.replicas"]["MutationType"],
        "Update"
    );
    server.terminate();
}

/// The data of a served signature that `expected` holds: what ConfigHub's registrations
/// declare, without the descriptions and examples (krm-runner's own words). An omitted
/// `Regexp`, `Min`, `Max`, `EnumValues` or `AttributeName` is Go's omitempty of an empty one.
fn signature_data(served: &Value, expected: &Value) -> Value {
    let parameters: Vec<Value> = served["Parameters"]
        .as_array()
        .map(|parameters| {
            parameters
                .iter()
                .map(|parameter| {
                    let mut data = serde_json::Map::new();
                    for key in [
                        "ParameterName",
                        "Required",
                        "DataType",
                        "Regexp",
                        "Min",
                        "Max",
                        "EnumValues",
                    ] {
                        if let Some(value) = parameter.get(key) {
                            data.insert(key.to_owned(), value.clone());
                        }
                    }
                    Value::Object(data)
                })
                .collect()
        })
        .unwrap_or_default();
    let output = match &served["OutputInfo"] {
        Value::Null => Value::Null,
        output => json!({"ResultName": output["ResultName"], "OutputType": output["OutputType"]}),
    };
    let mut data = json!({
        "Parameters": parameters,
        "RequiredParameters": served["RequiredParameters"],
        "VarArgs": served["VarArgs"],
        "OutputInfo": output,
        "Mutating": served["Mutating"],
        "Validating": served["Validating"],
        "Hermetic": served["Hermetic"],
        "Idempotent": served["Idempotent"],
        "FunctionType": served["FunctionType"],
        "AttributeName": served.get("AttributeName").cloned().unwrap_or(json!("")),
    });
    // Where ConfigHub computes the affected types from its path registry, the file has none.
    if expected.get("AffectedResourceTypes").is_some() {
        data["AffectedResourceTypes"] = served["AffectedResourceTypes"].clone();
    }
    data
}

/// Every function of each toolchain, as ConfigHub's own registrations declare it
/// (confighub/sdk a4a979a, `function/internal/handlers/{generic,kubernetes,properties}`, with
/// the regular expressions they build resolved): `confighub/signatures.json` was written from
/// that code, not from krm-runner's answers, so no update mechanism rewrites it.
#[test]
fn signatures_carry_confighubs_data() {
    let file = repo_root().join("tests/tests/confighub/signatures.json");
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let (_server, port) = start();
    let mut failures = Vec::new();
    for (toolchain, route) in [
        ("Kubernetes/YAML", "kubernetes"),
        ("AppConfig/Properties", "properties"),
    ] {
        let (status, body) = http(port, "GET", &format!("/function/{route}"), b"");
        assert_eq!(status, 200, "{body}");
        let served: Value = serde_json::from_str(&body).unwrap();
        let expected = expected[toolchain].as_object().unwrap();
        let served_names: std::collections::BTreeSet<&String> =
            served.as_object().unwrap().keys().collect();
        let expected_names: std::collections::BTreeSet<&String> = expected.keys().collect();
        assert_eq!(served_names, expected_names, "{toolchain}: the functions");
        for (name, want) in expected {
            let got = signature_data(&served[name], want);
            if &got != want {
                failures.push(format!(
                    "{toolchain} {name}:\n  ConfigHub  {want}\n  served     {got}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn http_refuses_bad_requests_clearly_and_keeps_serving() {
    let (server, port) = start();
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "POST",
            "/function/kubernetes",
            b"{not json".to_vec(),
            400,
            "not a FunctionInvocationRequest",
        ),
        (
            "POST",
            "/function/kubernetes",
            invoke_body("kind: [unclosed\n", json!([])),
            400,
            "configuration data parsing error",
        ),
        (
            "POST",
            "/function/kubernetes",
            vec![b' '; 1_100_000],
            413,
            "over max_message_bytes 1048576",
        ),
        ("POST", "/function/shutdown", Vec::new(), 403, "SIGTERM"),
        (
            "POST",
            "/function/opentofu",
            Vec::new(),
            404,
            "GET and POST /function/properties, GET /function/properties/paths (AppConfig/Properties)",
        ),
    ];
    for (method, path, body, expected, message) in cases {
        let (status, answer) = http(port, method, path, &body);
        assert_eq!(status, expected, "{method} {path}: {answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::String(answer));
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains(message)),
            "{method} {path}: {answer}"
        );
    }
    // A toolchain the route does not serve is the request's fault.
    let mut request: Value = serde_json::from_slice(&invoke_body(UNIT, json!([]))).unwrap();
    request["ToolchainType"] = json!("OpenTofu/HCL");
    let (status, answer) = http(
        port,
        "POST",
        "/function/kubernetes",
        request.to_string().as_bytes(),
    );
    assert_eq!(status, 400, "{answer}");
    // A failing invocation is an answer, not an error: nothing changes.
    let request = invoke_body(
        UNIT,
        json!([{"FunctionName": "set-replicas", "Arguments": [{"Value": "-1"}]}]),
    );
    let (status, body) = http(port, "POST", "/function/kubernetes", &request);
    assert_eq!(status, 200, "{body}");
    let response: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(response["Success"], false, "{response}");
    assert!(
        response["ErrorMessages"][0]
            .as_str()
            .unwrap()
            .contains("replicas")
    );
    assert_eq!(config_data(&response), UNIT);
    // A client that stalls mid-body does not hold the server up.
    let mut stalled = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stalled
        .write_all(
            b"POST /function/kubernetes HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
        )
        .unwrap();
    assert_eq!(http(port, "GET", "/function/ok", b"").0, 200);
    // The server is still up after all of that, and the gRPC side too.
    assert!(
        server
            .stderr()
            .lines()
            .all(|line| !line.contains("panicked")),
        "{}",
        server.stderr()
    );
    drop(stalled);
    let mut server = server;
    server.signal(libc::SIGTERM);
    let status = server
        .wait_exit(Duration::from_secs(30))
        .expect("the runner stops on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", server.stderr());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "HTTP listener closed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn function_executor_over_grpc() {
    let (server, _) = start();
    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let argument = |value: pb::argument::Value| pb::Argument {
        parameter_name: String::new(),
        value: Some(value),
    };
    let invocation = |name: &str, arguments: Vec<pb::Argument>| pb::Invocation {
        function_name: name.to_owned(),
        arguments,
    };
    let request = pb::InvokeRequest {
        toolchain: "Kubernetes/YAML".to_owned(),
        config_data: UNIT.as_bytes().to_vec(),
        invocations: vec![
            invocation(
                "where-filter",
                vec![
                    argument(pb::argument::Value::StringValue(
                        "apps/v1/Deployment".into(),
                    )),
                    argument(pb::argument::Value::StringValue("spec.replicas < 2".into())),
                ],
            ),
            invocation(
                "set-replicas",
                vec![argument(pb::argument::Value::IntValue(7))],
            ),
            invocation("get-replicas", Vec::new()),
        ],
        num_filters: 1,
        stop_on_error: true,
        combine_validation_results: true,
        context_json: json!({"UnitSlug": "web", "RevisionNum": 2}).to_string(),
        ..Default::default()
    };
    let response = client.invoke(request.clone()).await.unwrap().into_inner();
    assert!(response.success, "{:?}", response.error_messages);
    assert_eq!(response.mutators, [1]);
    // The filter's verdict is the first output, as ConfigHub combines it; get-replicas'
    // list is of another type and discarded.
    assert_eq!(response.output_type, "ValidationResult");
    let output: Value = serde_json::from_str(&response.output_json).unwrap();
    assert_eq!(output["Passed"], true, "{output}");
    assert_eq!(response.error_messages.len(), 1);
    assert!(
        response.error_messages[0]
            .starts_with("functions with incompatible output types; output of "),
        "{:?}",
        response.error_messages
    );
    assert_eq!(
        String::from_utf8(response.config_data).unwrap(),
        UNIT.replace("replicas: 1", "replicas: 7")
    );
    let mutations: Value = serde_json::from_str(&response.mutations_json).unwrap();
    assert_eq!(mutations[0]["PathMutationMap"]["spec.replicas"]["Index"], 1);

    // The filter fails on the changed data: the sequence ends quietly, nothing changes.
    let mut filtered = request.clone();
    filtered.config_data = UNIT.replace("replicas: 1", "replicas: 5").into_bytes();
    let response = client.invoke(filtered.clone()).await.unwrap().into_inner();
    assert!(response.success);
    assert!(response.mutators.is_empty());
    assert_eq!(response.output_json, "null");
    assert_eq!(response.config_data, filtered.config_data);

    // Requests that cannot run are INVALID_ARGUMENT, naming the problem.
    let mut broken = request.clone();
    broken.config_data = b"kind: [unclosed\n".to_vec();
    let status = client.invoke(broken).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("configuration data parsing error"),
        "{status:?}"
    );
    let mut no_value = request.clone();
    no_value.invocations[1].arguments[0].value = None;
    let status = client.invoke(no_value).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("invocations[1].arguments[0] has no value"),
        "{status:?}"
    );
    // An answer over max_message_bytes is refused, naming the limit.
    let mut large = pb::InvokeRequest {
        config_data: Vec::new(),
        invocations: vec![invocation(
            "get-resources",
            vec![argument(pb::argument::Value::StringValue("yaml".into()))],
        )],
        ..request.clone()
    };
    large.num_filters = 0;
    for i in 0..6000 {
        large.config_data.extend(
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n---\n").bytes(),
        );
    }
    let status = client.invoke(large).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("over max_message_bytes 1048576"),
        "{status:?}"
    );
    let mut bad_context = request.clone();
    bad_context.context_json = "[1]".to_owned();
    let status = client.invoke(bad_context).await.unwrap_err();
    assert!(status.message().contains("context_json"), "{status:?}");

    let functions = client
        .list_typed_functions(pb::ListTypedFunctionsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let functions: Value = serde_json::from_str(&functions.json).unwrap();
    assert_eq!(
        functions["get-image"]["OutputInfo"]["OutputType"],
        "AttributeValueList"
    );
    let paths = client
        .list_paths(pb::ListPathsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let paths: Value = serde_json::from_str(&paths.json).unwrap();
    assert!(paths["container-image"].is_object(), "{paths}");
    server.terminate();
}

#[test]
fn attributes_declared_in_the_configuration_are_served() {
    let http_port = free_port();
    let _server = Server::start(
        &format!(
            "confighub_listen: \"127.0.0.1:{http_port}\"\nexecutor:\n  attributes:\n  - name: team\n    upsert: true\n    paths: {{apps/v1/Deployment: [metadata.labels.team]}}\n"
        ),
        &[],
    );
    let (status, body) = http(http_port, "GET", "/function/kubernetes", b"");
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listed["set-team"]["AttributeName"], "team", "{body}");
    let (status, body) = http(http_port, "GET", "/function/kubernetes/paths", b"");
    assert_eq!(status, 200, "{body}");
    let paths: Value = serde_json::from_str(&body).unwrap();
    assert!(
        paths["team"]["apps/v1/Deployment"]["metadata.labels.team"].is_object(),
        "{body}"
    );

    let request = invoke_body(
        UNIT,
        json!([{"FunctionName": "set-team", "Arguments": [{"Value": "payments"}]}]),
    );
    let (status, body) = http(http_port, "POST", "/function/kubernetes", &request);
    assert_eq!(status, 200, "{body}");
    let response: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(response["Success"], true, "{body}");
    let data = config_data(&response);
    assert!(
        data.contains("  name: web # keep\n  namespace: shop\n  labels:\n    team: payments\n"),
        "{data}"
    );
}

const PROPERTIES: &str = "\
# shop settings
configHub.configName=shop
configHub.configSchema=ShopApp
db.host = localhost
! the pool
db.pool.size: 10
";

/// AppConfig/Properties on its own route and through the gRPC request's toolchain: the same
/// executor, edits that keep the file's comments and order, and clear refusals.
#[tokio::test(flavor = "multi_thread")]
async fn properties_over_http_and_grpc() {
    let (server, port) = start();
    let mut request: Value = serde_json::from_slice(&invoke_body(
        PROPERTIES,
        json!([
            {"FunctionName": "set-string-path", "Arguments": [{"Value": "ShopApp"}, {"Value": "db.host"}, {"Value": "db.prod"}]},
            {"FunctionName": "get-int-path", "Arguments": [{"Value": "*"}, {"Value": "db.pool.size"}]},
        ]),
    ))
    .unwrap();
    // The route names the toolchain when the body does not.
    request.as_object_mut().unwrap().remove("ToolchainType");
    let (status, body) = http(
        port,
        "POST",
        "/function/properties",
        request.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let response: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(response["Success"], true, "{response}");
    assert_eq!(
        config_data(&response),
        PROPERTIES.replace("db.host = localhost", "db.host=db.prod")
    );
    let output: Value = serde_json::from_slice(
        &STANDARD
            .decode(response["Output"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(output[0]["Value"], 10, "{output}");
    assert_eq!(output[0]["ResourceName"], "shop");
    assert_eq!(output[0]["ResourceType"], "ShopApp");
    assert_eq!(output[0]["ResourceCategory"], "AppConfig");
    assert_eq!(response["Mutators"], json!([0]));

    let (status, body) = http(port, "GET", "/function/properties", b"");
    assert_eq!(status, 200, "{body}");
    let functions: Value = serde_json::from_str(&body).unwrap();
    assert!(functions["set-bool-path"].is_object(), "{functions}");
    assert!(functions.get("set-replicas").is_none(), "{functions}");
    let (status, body) = http(port, "GET", "/function/properties/paths", b"");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("configHub.configName"), "{body}");

    // A malformed escape names its line; a request for another toolchain on a route is refused.
    let bad = invoke_body("a=1\nb=\\uZZZZ\n", json!([]));
    let mut bad: Value = serde_json::from_slice(&bad).unwrap();
    bad["ToolchainType"] = json!("AppConfig/Properties");
    let (status, body) = http(
        port,
        "POST",
        "/function/properties",
        bad.to_string().as_bytes(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("line 2: Malformed \\\\uxxxx encoding"),
        "{body}"
    );
    let (status, body) = http(
        port,
        "POST",
        "/function/kubernetes",
        bad.to_string().as_bytes(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("this executor serves Kubernetes/YAML, not AppConfig/Properties"),
        "{body}"
    );

    let mut client = FunctionExecutorClient::connect(server.endpoint())
        .await
        .unwrap();
    let string = |text: &str| pb::Argument {
        parameter_name: String::new(),
        value: Some(pb::argument::Value::StringValue(text.to_owned())),
    };
    let request = pb::InvokeRequest {
        toolchain: "AppConfig/Properties".to_owned(),
        config_data: PROPERTIES.as_bytes().to_vec(),
        invocations: vec![pb::Invocation {
            function_name: "set-bool-path".to_owned(),
            arguments: vec![
                string("ShopApp"),
                string("db.ssl"),
                pb::Argument {
                    parameter_name: String::new(),
                    value: Some(pb::argument::Value::BoolValue(true)),
                },
            ],
        }],
        ..Default::default()
    };
    let response = client.invoke(request.clone()).await.unwrap().into_inner();
    assert!(response.success, "{:?}", response.error_messages);
    assert_eq!(
        String::from_utf8(response.config_data).unwrap(),
        format!("{PROPERTIES}db.ssl=true\n")
    );
    let status = client
        .invoke(pb::InvokeRequest {
            toolchain: "AppConfig/INI".to_owned(),
            ..request
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "toolchain \"AppConfig/INI\" is not supported; supported: Kubernetes/YAML, AppConfig/Properties"
    );
    let functions = client
        .list_typed_functions(pb::ListTypedFunctionsRequest {
            toolchain: "AppConfig/Properties".to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    let functions: Value = serde_json::from_str(&functions.json).unwrap();
    assert!(functions["get-string-path"].is_object(), "{functions}");
    assert!(functions.get("get-image").is_none(), "{functions}");
    let paths = client
        .list_paths(pb::ListPathsRequest {
            toolchain: "AppConfig/Properties".to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        paths.json.contains("configHub.configName"),
        "{}",
        paths.json
    );
    server.terminate();
}
