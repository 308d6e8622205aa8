//! Every manifest under `deploy/kubernetes/` parses into the Kubernetes API types, and no field
//! is lost on the way: a misspelt field (which the types would silently ignore) fails here.

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodTemplate, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn round_trip<T: DeserializeOwned + Serialize>(document: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(document.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// Paths present in `original` but missing from `parsed`.
fn lost_fields(original: &Value, parsed: &Value, path: &str, lost: &mut Vec<String>) {
    match (original, parsed) {
        (Value::Object(original), Value::Object(parsed)) => {
            for (key, value) in original {
                let child = format!("{path}.{key}");
                match parsed.get(key) {
                    Some(parsed_value) => lost_fields(value, parsed_value, &child, lost),
                    None if value.is_null() => {}
                    None => lost.push(child),
                }
            }
        }
        (Value::Array(original), Value::Array(parsed)) => {
            for (index, (o, p)) in original.iter().zip(parsed).enumerate() {
                lost_fields(o, p, &format!("{path}[{index}]"), lost);
            }
        }
        _ => {}
    }
}

#[test]
fn deploy_manifests_are_valid_kubernetes_objects() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/kubernetes exists") {
        let path = entry.unwrap().path();
        // kustomization.yaml lists the manifests; it is not one.
        if path.extension().and_then(|e| e.to_str()) != Some("yaml")
            || path.ends_with("kustomization.yaml")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (index, document) in text.split("\n---\n").enumerate() {
            let document: Value = yaml_serde::from_str(document)
                .unwrap_or_else(|e| panic!("{} document {index}: {e}", path.display()));
            let kind = document["kind"].as_str().unwrap_or_default().to_owned();
            let parsed = match kind.as_str() {
                "Namespace" => round_trip::<Namespace>(&document),
                "ServiceAccount" => round_trip::<ServiceAccount>(&document),
                "Role" => round_trip::<Role>(&document),
                "RoleBinding" => round_trip::<RoleBinding>(&document),
                "ConfigMap" => round_trip::<ConfigMap>(&document),
                "Deployment" => round_trip::<Deployment>(&document),
                "Service" => round_trip::<Service>(&document),
                "PodTemplate" => round_trip::<PodTemplate>(&document),
                other => panic!(
                    "{} document {index}: no type for kind {other:?}",
                    path.display()
                ),
            }
            .unwrap_or_else(|e| panic!("{} document {index} ({kind}): {e}", path.display()));
            let mut lost = Vec::new();
            lost_fields(&document, &parsed, "", &mut lost);
            assert!(
                lost.is_empty(),
                "{} document {index} ({kind}): unknown fields {lost:?}",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 8,
        "only {checked} manifests found in {}",
        dir.display()
    );
}

#[test]
fn the_runner_config_in_the_manifest_is_a_valid_chain() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes/runner.yaml"),
    )
    .unwrap();
    let config_map: ConfigMap = serde_json::from_value(
        yaml_serde::from_str(text.split("\n---\n").next().unwrap()).unwrap(),
    )
    .unwrap();
    let config: Value = yaml_serde::from_str(&config_map.data.unwrap()["config.yaml"]).unwrap();
    assert_eq!(
        config["evaluators"]["default"]["config"]["chain"],
        serde_json::json!(["builtin", "confighub", "starlark", "exec", "pod"])
    );
    assert_eq!(config["evaluators"]["pod"]["plugin"], "pod");
}
