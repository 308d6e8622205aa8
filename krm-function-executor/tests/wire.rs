//! The JSON a ConfigHub client sends and receives, end to end through the executor.

use base64::{Engine, engine::general_purpose::STANDARD};
use krm_function_executor::Executor;
use krm_function_executor::api::{FunctionInvocationRequest, FunctionInvocationResponse};
use serde_json::{Value, json};

const UNIT: &str =
    "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web # keep\nspec:\n  replicas: 1\n";

fn invoke(request: Value) -> Value {
    let request: FunctionInvocationRequest = serde_json::from_value(request).unwrap();
    let response = Executor::kubernetes().invoke(&request).unwrap();
    serde_json::to_value(&response).unwrap()
}

#[test]
fn a_confighub_request_round_trips() {
    let response = invoke(json!({
        "ToolchainType": "Kubernetes/YAML",
        "UnitSlug": "web",
        "UnitID": "5837950a-0000-4000-8000-000000000001",
        "SpaceID": "c73bbc39-0000-4000-8000-000000000002",
        "OrganizationID": "362c7a01-0000-4000-8000-000000000003",
        "RevisionNum": 1,
        "New": true,
        "PreviousContentHash": -12345,
        "ApprovedBy": null,
        "ConfigData": STANDARD.encode(UNIT),
        "LiveState": null,
        "CastStringArgsToScalars": false,
        "NumFilters": 0,
        "StopOnError": true,
        "CombineValidationResults": true,
        "FunctionInvocations": [
            {"FunctionName": "set-replicas", "Arguments": [{"Value": 3}]},
            {"FunctionName": "get-replicas", "Arguments": null}
        ]
    }));
    let keys: Vec<&str> = response
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in [
        "OrganizationID",
        "SpaceID",
        "UnitID",
        "RevisionID",
        "ConfigData",
        "Output",
        "OutputType",
        "Success",
        "Mutations",
        "Mutators",
        "ErrorMessages",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    assert_eq!(response["Success"], true, "{response:#}");
    assert_eq!(response["UnitID"], "5837950a-0000-4000-8000-000000000001");
    assert_eq!(
        response["RevisionID"],
        "00000000-0000-0000-0000-000000000000"
    );
    let data = STANDARD
        .decode(response["ConfigData"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        String::from_utf8(data).unwrap(),
        UNIT.replace("replicas: 1", "replicas: 3")
    );
    assert_eq!(response["OutputType"], "AttributeValueList");
    let output: Value = serde_json::from_slice(
        &STANDARD
            .decode(response["Output"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(output[0]["Value"], 3);
    assert_eq!(output[0]["ResourceName"], "/web");
    assert_eq!(output[0]["ResourceType"], "apps/v1/Deployment");
    assert_eq!(
        output[0]["Info"]["SetterInvocations"][0]["FunctionName"],
        "set-replicas"
    );
    assert_eq!(response["Mutators"], json!([0]));
    assert_eq!(
        response["Mutations"][0]["PathMutationMap"]["spec.replicas"],
        json!({"MutationType": "Update", "Index": 0, "Predicate": true, "Value": "3\n"})
    );
    // The response reads back as the same type.
    let _: FunctionInvocationResponse = serde_json::from_value(response).unwrap();
}

#[test]
fn no_output_is_null_and_bad_requests_are_errors() {
    let response = invoke(json!({
        "ConfigData": STANDARD.encode(UNIT),
        "FunctionInvocations": [{"FunctionName": "set-label", "Arguments": [
            {"ParameterName": "label-value", "Value": "x"},
            {"ParameterName": "label-key", "Value": "y"}
        ]}]
    }));
    assert_eq!(
        STANDARD
            .decode(response["Output"].as_str().unwrap())
            .unwrap(),
        b"null"
    );
    // Go's encoder writes an empty OutputType string, and the nil-free lists as [] (ConfigHub's
    // handler.go InvokeCore starts them empty).
    assert_eq!(response["OutputType"], json!(""));
    assert_eq!(response["ErrorMessages"], json!([]));
    let back: FunctionInvocationResponse = serde_json::from_value(response).unwrap();
    assert_eq!(back.output_type, None);

    let executor = Executor::kubernetes();
    let mut request = FunctionInvocationRequest {
        config_data: b"a: [unclosed\n".to_vec(),
        ..FunctionInvocationRequest::default()
    };
    let err = executor.invoke(&request).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("configuration data parsing error"),
        "{err}"
    );
    request.config_data = vec![0xff, 0xfe];
    assert_eq!(
        executor.invoke(&request).unwrap_err().to_string(),
        "config data is not UTF-8 text"
    );
    request.config_data = UNIT.as_bytes().to_vec();
    request.context.toolchain_type = "OpenTofu/HCL".into();
    assert!(
        executor
            .invoke(&request)
            .unwrap_err()
            .to_string()
            .contains("OpenTofu/HCL")
    );
    assert!(
        serde_json::from_value::<FunctionInvocationRequest>(json!({"ConfigData": "***"}))
            .unwrap_err()
            .to_string()
            .contains("not base64")
    );
}

#[test]
fn list_serves_confighub_signatures() {
    let list = serde_json::to_value(Executor::kubernetes().list()).unwrap();
    let set_replicas = &list["set-replicas"];
    assert_eq!(set_replicas["FunctionName"], "set-replicas");
    assert_eq!(set_replicas["RequiredParameters"], 1);
    assert_eq!(set_replicas["Mutating"], true);
    assert_eq!(set_replicas["FunctionType"], "PathVisitor");
    assert_eq!(set_replicas["AttributeName"], "replicas");
    assert_eq!(set_replicas["Parameters"][0]["DataType"], "int");
    assert_eq!(set_replicas["Parameters"][0]["Min"], 0);
    let get_image = &list["get-image"];
    assert_eq!(get_image["OutputInfo"]["OutputType"], "AttributeValueList");
    assert_eq!(get_image["OutputInfo"]["ResultName"], "container-image");
    assert_eq!(list["where-filter"]["Validating"], true);
    assert_eq!(list["get-resources"]["Parameters"][0]["DataType"], "enum");
}

#[test]
fn the_path_registry_serializes_as_confighub_lists_paths() {
    let executor = Executor::kubernetes();
    let paths = serde_json::to_value(executor.registry()).unwrap();
    let replicas = &paths["replicas"]["apps/v1/Deployment"]["spec.replicas"];
    assert_eq!(replicas["Path"], "spec.replicas");
    assert_eq!(replicas["AttributeName"], "replicas");
    assert_eq!(replicas["DataType"], "int");
    assert_eq!(
        replicas["Info"]["GetterInvocation"]["FunctionName"],
        "get-replicas"
    );
    // The schema's own words, as ConfigHub's addDescriptionToPathInfos puts them there.
    assert_eq!(
        replicas["Info"]["Description"],
        "Number of desired pods. This is a pointer to distinguish between explicit zero and not specified. Defaults to 1."
    );
    let namespace = &paths["namespace-name-reference"]["*"]["metadata.namespace"];
    assert_eq!(namespace["TypeExceptions"]["v1/Namespace"], json!({}));
    let back: krm_function_executor::registry::PathRegistry =
        serde_json::from_value(paths.clone()).unwrap();
    assert_eq!(&back, executor.registry());
    let uri = &paths["container-repository-uri"]["v1/Pod"]["spec.containers.?name:container-name=%s.image#uri"];
    assert_eq!(uri["EmbeddedAccessorType"], "Regexp");
    // The general registry as ConfigHub files it (kubernetes/standard_functions.go
    // initStandardFunctions, container_functions.go initContainerFunctions): keyed by the
    // normalized path, the entry keeping the bindings, under the registered attribute name.
    let general = &paths["attribute-value"];
    let name = &general["*"]["metadata.name"];
    assert_eq!(name["AttributeName"], "resource-name");
    assert_eq!(
        name["Info"]["SetterInvocations"][0]["FunctionName"],
        "set-default-names"
    );
    assert_eq!(
        name["Info"]["SetterInvocations"][0]["Arguments"],
        Value::Null
    );
    let uri = &general["apps/v1/Deployment"]["spec.template.spec.containers.*.image#uri"];
    assert_eq!(
        uri["Path"],
        "spec.template.spec.containers.*?name:container-name.image#uri"
    );
    assert_eq!(uri["AttributeName"], "container-repository-uri");
    assert_eq!(
        general["v1/Service"]["spec.type"]["AttributeName"],
        "service-type"
    );
}

#[test]
fn every_signature_converts_losslessly() {
    let executor = Executor::kubernetes();
    for (name, confighub) in executor.list() {
        let typed = krm_function_executor::TypedSignature::from_confighub(&confighub);
        assert_eq!(typed.to_confighub(), confighub, "{name}");
        let original = executor.function(&name).unwrap().signature();
        assert_eq!(&typed.base.parameters, &original.base.parameters, "{name}");
        assert_eq!(typed.typed, original.typed, "{name}");
    }
}

#[test]
fn an_unrecorded_run_differs_only_by_its_mutation_records() {
    let request: FunctionInvocationRequest = serde_json::from_value(json!({
        "ToolchainType": "Kubernetes/YAML",
        "ConfigData": STANDARD.encode(UNIT),
        "FunctionInvocations": [
            {"FunctionName": "set-replicas", "Arguments": [{"Value": 3}]},
            {"FunctionName": "get-replicas", "Arguments": null}
        ]
    }))
    .unwrap();
    let executor = Executor::kubernetes();
    let call = krm_plugin_api::CallContext::detached();
    let recorded = executor.invoke_within(&request, &call).unwrap();
    let unrecorded = executor.invoke_within_unrecorded(&request, &call).unwrap();
    assert!(!recorded.mutations.is_empty());
    assert!(unrecorded.mutations.is_empty());
    assert_eq!(unrecorded.mutators, [0]);
    assert_eq!(
        FunctionInvocationResponse {
            mutations: Vec::new(),
            ..recorded
        },
        unrecorded
    );
}

/// A unit of many resources that an expression fails on, each time printing the resource:
/// every message stays within the limit, the note of what was left out included.
#[test]
fn error_messages_are_cut_within_their_limit() {
    let big = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\ndata:\n  text: {}\n",
        "x".repeat(2_000)
    );
    let unit: Vec<String> = (0..200)
        .map(|n| big.replace("NAME", &format!("cm{n}")))
        .collect();
    for (function, argument) in [("cel-validate", "r + 1 == r"), ("yq", ".data.text | error")] {
        let response = invoke(json!({
            "ConfigData": STANDARD.encode(unit.join("---\n")),
            "FunctionInvocations": [{"FunctionName": function, "Arguments": [
                {"Value": argument}
            ]}]
        }));
        let messages = response["ErrorMessages"].as_array().unwrap();
        assert!(!messages.is_empty(), "{function}: {response}");
        for message in messages {
            let message = message.as_str().unwrap();
            assert!(
                message.len() <= krm_function_executor::executor::MAX_ERROR_MESSAGE_BYTES,
                "{function}: {} bytes",
                message.len()
            );
            // Each resource's error is cut too, so that more than one is named.
            assert!(message.contains("more bytes)"), "{function}: {message}");
        }
    }
}
