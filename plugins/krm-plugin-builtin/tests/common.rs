//! Helpers shared by the integration tests.
#![allow(dead_code)]

use krm_plugin_api::{ErrorKind, EvalError};

pub fn run(name: &str, input: &str) -> Result<String, EvalError> {
    krm_plugin_builtin::run_function(name, input.as_bytes())
        .map(|r| String::from_utf8(r.resource_list).expect("utf-8 output"))
}

/// Runs a function that must succeed (exit 0).
pub fn ok(name: &str, input: &str) -> String {
    match run(name, input) {
        Ok(out) => out,
        Err(e) => panic!(
            "{name} failed: {e:?}\n{}",
            String::from_utf8_lossy(&e.resource_list)
        ),
    }
}

/// Runs a function that must fail as a function (non-zero exit), returning its output.
pub fn failed(name: &str, input: &str) -> (String, String) {
    match run(name, input) {
        Ok(out) => panic!("{name} unexpectedly succeeded:\n{out}"),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Failed, "{e:?}");
            assert!(
                !e.resource_list.is_empty(),
                "failure carries the ResourceList"
            );
            (String::from_utf8(e.resource_list).unwrap(), e.message)
        }
    }
}

pub fn rl(items: &str, function_config: &str) -> String {
    let mut out = String::from("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n");
    out.push_str(items);
    if !function_config.is_empty() {
        out.push_str("functionConfig:\n");
        out.push_str(function_config);
    }
    out
}

/// Everything before `results:` (the items and config as written).
pub fn body(out: &str) -> &str {
    out.split("\nresults:\n").next().unwrap()
}

pub fn results(out: &str) -> &str {
    out.split_once("\nresults:\n").map_or("", |(_, r)| r)
}

pub fn configmap(data: &[(&str, &str)]) -> String {
    let mut out = String::from(
        "  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: function-input\n  data:\n",
    );
    for (k, v) in data {
        out.push_str(&format!("    {k}: {v:?}\n"));
    }
    out
}

pub fn deployments(n: usize) -> String {
    let mut out = String::new();
    for i in 0..n {
        out.push_str(&format!(
            "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: app-{i}\n    namespace: old\n    labels:\n      app: app-{i}\n  spec:\n    replicas: 1\n    selector:\n      matchLabels:\n        app: app-{i}\n    template:\n      metadata:\n        labels:\n          app: app-{i}\n      spec:\n        containers:\n        - name: app\n          image: nginx:1.20.2 # pinned\n"
        ));
    }
    out
}

/// Parses YAML (one or more documents) to JSON values, for semantic comparisons.
pub fn docs(text: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    yaml_serde::Deserializer::from_str(text)
        .map(|d| serde_json::Value::deserialize(d).expect("valid YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

pub fn items(out: &str) -> Vec<serde_json::Value> {
    let rl = docs(out).pop().unwrap();
    rl["items"].as_array().cloned().unwrap_or_default()
}
