//! set-annotations (catalog `functions/go/set-annotations`, kustomize annotations filter).

use krm_plugin_api::{Parameter, ParameterType};
use serde_json::{Value, json};

use super::fieldspec::{FieldSpec, Hit, walk};
use super::{Ctx, Exit, Function, check, param};
use crate::rl::FnResult;
use crate::yaml::New;

pub static FUNCTION: Function = Function {
    name: "set-annotations",
    description: "Add annotations to metadata and pod templates of every object (local-config included).",
    tags: &[
        (
            "v0.1",
            "kyaml-framework function with kustomize's commonAnnotations field specs",
        ),
        ("v0.1.4", "same implementation as v0.1"),
    ],
    parameters,
    changes: &["metadata.annotations", "pod template annotations"],
    run,
    legacy_results: false,
    pure: true,
};

fn parameters() -> Vec<Parameter> {
    let mut annotations = param(
        "annotations",
        ParameterType::Map,
        true,
        "Annotations to set (ConfigMap: all of `data`).",
    );
    annotations.example = Some("{owner: team-a}".into());
    vec![
        annotations,
        param(
            "additionalAnnotationFields",
            ParameterType::List,
            false,
            "More fields to annotate: [{group, version, kind, path, create}].",
        ),
    ]
}

/// kustomize's default `commonAnnotations` field specs.
pub fn default_specs() -> Vec<FieldSpec> {
    let t = "spec/template/metadata/annotations";
    vec![
        FieldSpec::new("", "", "", "metadata/annotations", true),
        FieldSpec::new("", "v1", "ReplicationController", t, true),
        FieldSpec::new("", "", "Deployment", t, true),
        FieldSpec::new("", "", "ReplicaSet", t, true),
        FieldSpec::new("", "", "DaemonSet", t, true),
        FieldSpec::new("apps", "", "StatefulSet", t, true),
        FieldSpec::new("batch", "", "Job", t, true),
        FieldSpec::new(
            "batch",
            "",
            "CronJob",
            "spec/jobTemplate/metadata/annotations",
            true,
        ),
        FieldSpec::new(
            "batch",
            "",
            "CronJob",
            "spec/jobTemplate/spec/template/metadata/annotations",
            true,
        ),
    ]
}

fn run(ctx: &mut Ctx) -> Exit {
    const NOT_CONFIGURED: &str =
        "failed to configure function: `functionConfig` must be a `ConfigMap` or `SetAnnotations`";
    let config = ctx.config_json();
    let (annotations, extra) = match ctx.config_gvk() {
        Some(("v1", "ConfigMap")) => (
            config.get("data").cloned().unwrap_or(json!({})),
            Value::Null,
        ),
        Some(("fn.kpt.dev/v1alpha1", "SetAnnotations" | "SetAnnotationConfig")) => {
            let fields = config
                .get("additionalAnnotationFields")
                .filter(|v| !v.is_null());
            let legacy = config.get("fieldSpecs").filter(|v| !v.is_null());
            if fields.is_some() && legacy.is_some() {
                return ctx.fail(
                    "failed to configure function: cannot specify both `fieldSpecs` and `additionalAnnotationFields`",
                );
            }
            (
                config.get("annotations").cloned().unwrap_or(json!({})),
                fields.or(legacy).cloned().unwrap_or(Value::Null),
            )
        }
        _ => return ctx.fail(NOT_CONFIGURED),
    };
    let annotations = if annotations.is_null() {
        json!({})
    } else {
        annotations
    };
    if annotations.as_object().is_some_and(|m| m.is_empty()) {
        return ctx.fail("input annotation list cannot be empty");
    }
    let params = json!({"annotations": annotations, "additionalAnnotationFields": extra});
    if let Err(exit) = check(ctx, &parameters(), &params) {
        return exit;
    }
    let mut specs = default_specs();
    match serde_json::from_value::<Vec<FieldSpec>>(if extra.is_null() { json!([]) } else { extra })
    {
        Ok(more) => specs.extend(more),
        Err(e) => {
            return ctx.fail(format!(
                "invalid functionConfig: parameter `additionalAnnotationFields`: {e}"
            ));
        }
    }
    let mut entries: Vec<(String, String)> = annotations
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str().map_or_else(|| v.to_string(), str::to_owned),
            )
        })
        .collect();
    entries.sort();
    let summary = format!(
        "set annotations: {}",
        serde_json::to_string(
            &entries
                .iter()
                .cloned()
                .collect::<std::collections::BTreeMap<_, _>>()
        )
        .unwrap_or_default()
    );
    let mut results = Vec::new();
    for o in ctx.rl.items.clone() {
        if let Some(exit) = ctx.interrupted() {
            return exit;
        }
        let obj = ctx.rl.obj(o);
        let doc = ctx.doc();
        for spec in specs.iter().filter(|s| s.selects(&obj)) {
            let segments = spec.segments();
            let mut hits = Vec::new();
            walk(doc, o, &segments, String::new(), &mut |hit| hits.push(hit));
            for Hit::Field {
                map,
                key,
                value,
                dotted,
            } in hits
            {
                let applied = match value {
                    Some(v) if doc.is_map(v) => ctx.ed.ensure_map(doc, v, &[], &entries, true) > 0,
                    Some(v) if !doc.is_null(v) => false,
                    _ if spec.create => {
                        // Create the rest of the path below the deepest existing map.
                        let depth = dotted.matches('.').count();
                        match segments.get(depth..) {
                            Some(rest)
                                if !rest.is_empty() && !rest.iter().any(|s| s.ends_with("[]")) =>
                            {
                                ctx.ed.ensure_map(doc, map, rest, &entries, true) > 0
                            }
                            _ => false,
                        }
                    }
                    _ => false,
                };
                let _ = key;
                if applied {
                    // A created path is reported in full, not up to the first missing map.
                    let dotted = if value.is_some_and(|v| doc.is_map(v)) {
                        dotted
                    } else {
                        spec.path.trim_matches('/').replace('/', ".")
                    };
                    let mut result = FnResult::new(summary.clone(), None).field_path(dotted);
                    result.file = obj.file_ref();
                    results.push(result);
                }
            }
        }
    }
    if results.is_empty() {
        ctx.results
            .push(FnResult::new("no annotations applied", None));
    } else {
        results.sort_by_key(|r| file_key(&r.file));
        ctx.add_results(results);
    }
    Exit::Ok
}

fn file_key(file: &Option<New>) -> (String, String) {
    match file {
        Some(New::Map(entries)) => {
            let get = |k: &str| {
                entries
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| match v {
                        New::Str(s) | New::Plain(s) => s.clone(),
                        _ => String::new(),
                    })
                    .unwrap_or_default()
            };
            (get("path"), format!("{:>10}", get("index")))
        }
        _ => Default::default(),
    }
}
