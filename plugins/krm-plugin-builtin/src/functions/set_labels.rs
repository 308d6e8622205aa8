//! set-labels (catalog `functions/go/set-labels`, kpt Go SDK 2025).

use krm_plugin_api::{Parameter, ParameterType};
use serde_json::{Value, json};

use super::{Ctx, Exit, Function, check, group_of, param};
use crate::rl::FnResult;
use crate::yaml::NodeId;

pub static FUNCTION: Function = Function {
    name: "set-labels",
    description: "Add labels to metadata, selectors and pod templates of every non-local object.",
    tags: &[
        (
            "v0.2",
            "0.2 line: SDK transformer of the catalog snapshot (update-only selectors)",
        ),
        ("v0.2.0", "same transformer as v0.2"),
        ("v0.2.1", "same transformer as v0.2"),
        ("v0.2.2", "same transformer as v0.2"),
        ("v0.2.3", "same transformer as v0.2"),
    ],
    parameters,
    changes: &[
        "metadata.labels",
        "spec.selector / spec.selector.matchLabels",
        "pod template and volumeClaimTemplate labels",
    ],
    run,
    legacy_results: false,
    pure: true,
};

fn parameters() -> Vec<Parameter> {
    let mut labels = param(
        "labels",
        ParameterType::Map,
        true,
        "Labels to set (ConfigMap: all of `data`).",
    );
    labels.example = Some("{app: web}".into());
    vec![labels]
}

fn run(ctx: &mut Ctx) -> Exit {
    if ctx.non_local_items().is_empty() {
        ctx.results.push(FnResult::info("no input resources"));
        return Exit::Ok;
    }
    let config = ctx.config_json();
    let labels = match ctx.config_gvk() {
        None => None,
        Some((api_version, "ConfigMap")) if group_of(api_version).is_empty() => {
            Some(config.get("data").cloned().unwrap_or(Value::Null))
        }
        Some((api_version, "SetLabels")) if group_of(api_version) == "fn.kpt.dev" => {
            match config.get("labels") {
                Some(Value::Object(_)) | None | Some(Value::Null) => {
                    Some(config.get("labels").cloned().unwrap_or(json!({})))
                }
                Some(other) => {
                    return ctx.fail(format!(
                        "unable to convert object to *setlabels.SetLabels: `labels` must be a map, got {other}"
                    ));
                }
            }
        }
        Some((api_version, kind)) => {
            return ctx.fail(format!(
                "unknown FunctionConfig `{kind}.{}`, expect `SetLabels.fn.kpt.dev` or `ConfigMap.v1`",
                group_of(api_version)
            ));
        }
    };
    let typed = matches!(ctx.config_gvk(), Some((_, "SetLabels")));
    let labels = match labels {
        Some(Value::Object(map)) if !map.is_empty() => map,
        Some(Value::Object(_)) if typed => {
            ctx.results.push(FnResult::warning(
                "no `labels` arguments are given in FunctionConfig",
            ));
            return Exit::Ok;
        }
        _ => {
            let message = "`FunctionConfig` is not given";
            ctx.results.push(FnResult::info(message));
            return Exit::Failed(message.into());
        }
    };
    if let Err(exit) = check(ctx, &parameters(), &json!({"labels": labels})) {
        return exit;
    }
    // Keys in sorted order, values as strings (kpt forces ConfigMap data to strings).
    let mut labels: Vec<(String, String)> = labels
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (k, v)
        })
        .collect();
    labels.sort();
    let mut total = 0;
    for o in ctx.non_local_items() {
        if let Some(exit) = ctx.interrupted() {
            return exit;
        }
        total += label_object(ctx, o, &labels);
    }
    ctx.results
        .push(FnResult::info(format!("set {total} labels in total")));
    Exit::Ok
}

fn label_object(ctx: &mut Ctx, o: NodeId, labels: &[(String, String)]) -> usize {
    let obj = ctx.rl.obj(o);
    let doc = ctx.doc();
    let (group, version, kind) = (obj.group(), obj.version(), obj.kind());
    let n = labels.len();
    let mut count = 0;
    let mut create = |ctx: &mut Ctx, base: NodeId, path: &[&str]| {
        if ctx.ed.ensure_map(doc, base, path, labels, true) > 0 {
            count += n;
        }
    };
    create(ctx, o, &["metadata", "labels"]);
    if version == "v1" && matches!(kind, "Service" | "ReplicationController") {
        create(ctx, o, &["spec", "selector"]);
    }
    let workload = matches!(kind, "Deployment" | "ReplicaSet" | "DaemonSet")
        || (kind == "StatefulSet" && group == "apps");
    if workload {
        create(ctx, o, &["spec", "selector", "matchLabels"]);
    }
    let mut update_paths: Vec<NodeId> = Vec::new();
    let mut update = |node: Option<NodeId>| update_paths.extend(node.filter(|&m| doc.is_map(m)));
    if (kind == "Job" && group == "batch") || (kind == "PodDisruptionBudget" && group == "policy") {
        update(doc.get_path(o, &["spec", "selector", "matchLabels"]));
    }
    if kind == "NetworkPolicy" {
        update(doc.get_path(o, &["spec", "podSelector", "matchLabels"]));
        for (list, peer) in [("ingress", "from"), ("egress", "to")] {
            for &rule in doc
                .get_path(o, &["spec", list])
                .map_or(&[][..], |l| doc.items(l))
            {
                for &p in doc.get(rule, peer).map_or(&[][..], |l| doc.items(l)) {
                    update(doc.get_path(p, &["podSelector", "matchLabels"]));
                }
            }
        }
    }
    let templated = matches!(
        kind,
        "ReplicationController" | "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet" | "Job"
    );
    if templated {
        create(ctx, o, &["spec", "template", "metadata", "labels"]);
        let tsc = doc.get_path(
            o,
            &["spec", "template", "spec", "topologySpreadConstraints"],
        );
        for &c in tsc.map_or(&[][..], |l| doc.items(l)) {
            update(doc.get_path(c, &["labelSelector", "matchLabels"]));
        }
    }
    if kind == "CronJob" {
        create(ctx, o, &["spec", "jobTemplate", "metadata", "labels"]);
        update(doc.get_path(
            o,
            &["spec", "jobTemplate", "spec", "selector", "matchLabels"],
        ));
        create(
            ctx,
            o,
            &[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "metadata",
                "labels",
            ],
        );
    }
    if kind == "StatefulSet" {
        let templates = doc.get_path(o, &["spec", "volumeClaimTemplates"]);
        for &t in templates.map_or(&[][..], |l| doc.items(l)) {
            create(ctx, t, &["metadata", "labels"]);
            update(doc.get_path(t, &["spec", "selector", "matchLabels"]));
        }
    }
    for map in update_paths {
        count += n;
        for (key, value) in labels {
            if let Some(existing) = doc.get(map, key)
                && doc.str(existing).is_some_and(|v| v != value)
            {
                ctx.ed.set_scalar(doc, existing, value, true);
            }
        }
    }
    count
}
