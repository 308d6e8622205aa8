//! The committed CRD is the one the types generate, and it is a well-formed CRD.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaPropsOrArray,
};
use krm_runner_function_config::FunctionConfig;
use kube::CustomResourceExt;

const UPDATE: &str = "KRM_UPDATE_CRDS=1 cargo test -p krm-runner-function-config --test crd";

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/crds/functionconfigs.yaml")
}

fn generated() -> String {
    let body = yaml_serde::to_string(&FunctionConfig::crd()).expect("the CRD serializes");
    format!(
        "# Generated from the FunctionConfig types in krm-runner-function-config/src/types.rs; do not edit.\n\
         # Regenerate with: {UPDATE}\n{body}"
    )
}

/// Compares the committed file with the generated CRD (or rewrites it under `KRM_UPDATE_CRDS=1`),
/// then checks that the text is a CustomResourceDefinition with Porch's shape.
#[test]
fn committed_crd_matches_the_types_and_is_well_formed() {
    let path = committed_path();
    let generated = generated();
    if std::env::var_os("KRM_UPDATE_CRDS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("write the CRD");
        eprintln!("rewrote {}", path.display());
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; create it with: {UPDATE}",
            path.display()
        )
    });
    assert!(
        committed == generated,
        "{} differs from what the FunctionConfig types generate; update it with: {UPDATE}",
        path.display()
    );
    check_shape(&committed);
}

fn check_shape(text: &str) {
    let crd: CustomResourceDefinition = yaml_serde::from_str(text).expect("parses as a CRD");
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("functionconfigs.config.porch.kpt.dev")
    );
    assert_eq!(crd.spec.group, "config.porch.kpt.dev");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "FunctionConfig");
    assert_eq!(crd.spec.names.plural, "functionconfigs");
    let [version] = crd.spec.versions.as_slice() else {
        panic!("one version expected");
    };
    assert_eq!(version.name, "v1alpha1");
    assert!(version.served && version.storage);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Server Applied", ".status.apiServerObservedGeneration"),
            (
                "FnRunner Applied",
                ".status.functionRunnerObservedGeneration"
            ),
            ("Controller Applied", ".status.controllerObservedGeneration"),
        ]
    );

    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap();
    let spec = &schema.properties.as_ref().unwrap()["spec"];
    let rules: Vec<_> = spec
        .x_kubernetes_validations
        .iter()
        .flatten()
        .map(|r| r.rule.as_str())
        .collect();
    assert_eq!(
        rules,
        [
            "has(self.podExecutor) || has(self.binaryExecutor) || has(self.goExecutor) \
             || has(self.wasmExecutor)"
        ]
    );
    let properties = spec.properties.as_ref().unwrap();
    assert_eq!(spec.required.as_deref(), Some(&["image".to_owned()][..]));
    assert_eq!(properties["image"].min_length, Some(1));
    for executor in ["binaryExecutor", "goExecutor", "wasmExecutor"] {
        let fields = properties[executor].properties.as_ref().unwrap();
        assert_eq!(fields["tags"].min_items, Some(1), "{executor}.tags");
    }
    // krm-runner's extension: a module from a file or a registry, never both.
    let wasm = &properties["wasmExecutor"];
    let wasm_rules: Vec<_> = wasm
        .x_kubernetes_validations
        .iter()
        .flatten()
        .map(|r| r.rule.as_str())
        .collect();
    assert_eq!(wasm_rules, ["has(self.path) != has(self.image)"]);
    assert_eq!(wasm.required.as_deref(), Some(&["tags".to_owned()][..]));
    assert_eq!(
        properties["binaryExecutor"].properties.as_ref().unwrap()["path"].min_length,
        Some(1)
    );
    let pod = properties["podExecutor"].properties.as_ref().unwrap();
    let ttl = &pod["timeToLive"];
    assert_eq!(
        ttl.default.as_ref().map(|d| &d.0),
        Some(&serde_json::json!("30m"))
    );
    assert_eq!(ttl.format.as_deref(), Some("duration"));
    let overrides = pod["templateOverrides"].properties.as_ref().unwrap();
    for field in [
        "serviceAccountName",
        "securityContext",
        "initContainer",
        "container",
    ] {
        assert!(overrides.contains_key(field), "templateOverrides.{field}");
    }
    let status = schema.properties.as_ref().unwrap()["status"]
        .properties
        .as_ref()
        .unwrap();
    let mut status_fields: Vec<_> = status.keys().map(String::as_str).collect();
    status_fields.sort();
    assert_eq!(
        status_fields,
        [
            "apiServerObservedGeneration",
            "conditions",
            "controllerObservedGeneration",
            "error",
            "executors",
            "functionRunnerObservedGeneration",
        ]
    );
    // Standard conditions, one per type (server-side apply merges them by type).
    let conditions = &status["conditions"];
    assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
    assert_eq!(
        conditions.x_kubernetes_list_map_keys.as_deref(),
        Some(&["type".to_owned()][..])
    );
    let condition = match conditions.items.as_ref() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => item,
        other => panic!("conditions items: {other:?}"),
    };
    let mut required = condition.required.clone().unwrap_or_default();
    required.sort();
    assert_eq!(
        required,
        ["lastTransitionTime", "message", "reason", "status", "type"]
    );
    let executor = match status["executors"].items.as_ref() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => item,
        other => panic!("executors items: {other:?}"),
    };
    let mut fields: Vec<_> = executor.properties.as_ref().unwrap().keys().collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "digest",
            "evaluator",
            "executor",
            "lastError",
            "resolvedTag",
            "state",
            "tag"
        ]
    );
}
