//! Server-side printing (`meta.k8s.io/v1` `Table`), which `kubectl get` asks for.

use crate::resources::ResourceDef;
use crate::util::{self, meta_str, path_str};
use serde_json::{Value, json};

fn col(name: &str, type_: &str, priority: i64) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": type_, "format": format, "description": name, "priority": priority})
}

fn age(obj: &Value) -> Value {
    util::human_age(meta_str(obj, "creationTimestamp").unwrap_or("")).into()
}

fn pod_row(p: &Value) -> Vec<Value> {
    let statuses = p
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = p
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    let ready = statuses
        .iter()
        .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum();
    let mut status = path_str(p, "status.phase").to_string();
    if let Some(r) = p.pointer("/status/reason").and_then(Value::as_str) {
        status = r.to_string();
    }
    let inits = p
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map(Vec::len)
        .unwrap_or(0);
    let init_statuses = p
        .pointer("/status/initContainerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let done_inits = init_statuses
        .iter()
        .filter(|s| {
            s.pointer("/state/terminated/exitCode")
                .and_then(Value::as_i64)
                == Some(0)
        })
        .count();
    if inits > 0 && done_inits < inits && status == "Pending" {
        status = format!("Init:{done_inits}/{inits}");
    }
    for s in &statuses {
        if let Some(r) = s.pointer("/state/waiting/reason").and_then(Value::as_str) {
            status = r.to_string();
        }
    }
    if p.pointer("/metadata/deletionTimestamp").is_some() {
        status = "Terminating".into();
    }
    let ip = path_str(p, "status.podIP");
    let node = path_str(p, "spec.nodeName");
    let none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        meta_str(p, "name").unwrap_or("").into(),
        format!("{ready}/{total}").into(),
        status.into(),
        restarts.into(),
        age(p),
        none(ip).into(),
        none(node).into(),
        "<none>".into(),
        "<none>".into(),
    ]
}

fn service_row(s: &Value) -> Vec<Value> {
    let ports: Vec<String> = s
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.get("port").and_then(Value::as_i64).unwrap_or(0),
                        p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let selector = s
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "<none>".into());
    vec![
        meta_str(s, "name").unwrap_or("").into(),
        path_str(s, "spec.type").into(),
        path_str(s, "spec.clusterIP").into(),
        "<none>".into(),
        if ports.is_empty() {
            "<none>".to_string()
        } else {
            ports.join(",")
        }
        .into(),
        age(s),
        selector.into(),
    ]
}

fn endpoints_row(e: &Value) -> Vec<Value> {
    let mut eps = Vec::new();
    for subset in e
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ports: Vec<i64> = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("port").and_then(Value::as_i64))
            .collect();
        for a in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ip = a.get("ip").and_then(Value::as_str).unwrap_or("");
            if ports.is_empty() {
                eps.push(ip.to_string());
            }
            for p in &ports {
                eps.push(format!("{ip}:{p}"));
            }
        }
    }
    vec![
        meta_str(e, "name").unwrap_or("").into(),
        if eps.is_empty() {
            "<none>".to_string()
        } else {
            eps.join(",")
        }
        .into(),
        age(e),
    ]
}

/// Builds a Table for the given objects. `include` is `None`, `Metadata` (default) or `Object`.
pub fn table(def: &ResourceDef, items: &[Value], rv: u64, include: &str) -> Value {
    let (columns, rows): (Vec<Value>, Vec<Vec<Value>>) =
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "pods") => (
                vec![
                    col("Name", "string", 0),
                    col("Ready", "string", 0),
                    col("Status", "string", 0),
                    col("Restarts", "integer", 0),
                    col("Age", "string", 0),
                    col("IP", "string", 1),
                    col("Node", "string", 1),
                    col("Nominated Node", "string", 1),
                    col("Readiness Gates", "string", 1),
                ],
                items.iter().map(pod_row).collect(),
            ),
            ("", "services") => (
                vec![
                    col("Name", "string", 0),
                    col("Type", "string", 0),
                    col("Cluster-IP", "string", 0),
                    col("External-IP", "string", 0),
                    col("Port(s)", "string", 0),
                    col("Age", "string", 0),
                    col("Selector", "string", 1),
                ],
                items.iter().map(service_row).collect(),
            ),
            ("", "endpoints") => (
                vec![
                    col("Name", "string", 0),
                    col("Endpoints", "string", 0),
                    col("Age", "string", 0),
                ],
                items.iter().map(endpoints_row).collect(),
            ),
            ("", "namespaces") => (
                vec![
                    col("Name", "string", 0),
                    col("Status", "string", 0),
                    col("Age", "string", 0),
                ],
                items
                    .iter()
                    .map(|n| {
                        vec![
                            meta_str(n, "name").unwrap_or("").into(),
                            path_str(n, "status.phase").into(),
                            age(n),
                        ]
                    })
                    .collect(),
            ),
            _ => {
                let mut cols = vec![col("Name", "string", 0)];
                for c in &def.printer_columns {
                    cols.push(col(&c.name, &c.type_, 0));
                }
                cols.push(col("Age", "string", 0));
                let rows = items
                    .iter()
                    .map(|o| {
                        let mut r: Vec<Value> = vec![meta_str(o, "name").unwrap_or("").into()];
                        for c in &def.printer_columns {
                            let v = util::path(o, c.json_path.trim_start_matches('.'))
                                .cloned()
                                .unwrap_or(Value::Null);
                            r.push(if v.is_null() { "<none>".into() } else { v });
                        }
                        r.push(age(o));
                        r
                    })
                    .collect();
                (cols, rows)
            }
        };
    let rows: Vec<Value> = rows
        .into_iter()
        .zip(items)
        .map(|(cells, obj)| {
            let object = match include {
                "None" => Value::Null,
                "Object" => obj.clone(),
                _ => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": columns,
        "rows": rows,
    })
}
