//! set-image (catalog `functions/go/set-image`, kpt Go SDK 2022).

use krm_plugin_api::{Parameter, ParameterType};
use serde_json::{Value, json};

use super::fieldspec::{FieldSpec, Hit, walk};
use super::set_namespace::is_gvk;
use super::{Ctx, Exit, Function, check, param};
use crate::rl::FnResult;

pub static FUNCTION: Function = Function {
    name: "set-image",
    description: "Replace container images of a given name (newName, newTag or digest).",
    tags: &[
        (
            "v0.1",
            "SDK transformer of the catalog snapshot (6 kinds, containers only)",
        ),
        ("v0.1.1", "same transformer as v0.1"),
    ],
    parameters,
    changes: &[
        "spec.containers[].image",
        "spec.template.spec.containers[].image",
    ],
    run,
    legacy_results: false,
    pure: true,
};

fn parameters() -> Vec<Parameter> {
    let mut name = param(
        "name",
        ParameterType::String,
        true,
        "Image name to match (tag and digest ignored).",
    );
    name.example = Some("nginx".into());
    let mut new_name = param(
        "newName",
        ParameterType::String,
        false,
        "Replacement image name.",
    );
    new_name.example = Some("bitnami/nginx".into());
    let mut new_tag = param("newTag", ParameterType::String, false, "Replacement tag.");
    new_tag.example = Some("1.21.4".into());
    let mut digest = param(
        "digest",
        ParameterType::String,
        false,
        "Replacement digest; wins over newTag.",
    );
    digest.pattern = Some("^sha256:[0-9a-f]{64}$|^$".into());
    vec![
        name,
        new_name,
        new_tag,
        digest,
        param(
            "additionalImageFields",
            ParameterType::List,
            false,
            "More image fields: [{group, version, kind, path, create}].",
        ),
    ]
}

#[derive(Default)]
struct Image {
    name: String,
    new_name: String,
    new_tag: String,
    digest: String,
}

fn run(ctx: &mut Ctx) -> Exit {
    let config = ctx.config_json();
    let (image, extra) = match ctx.config_gvk() {
        Some((api_version, kind)) if is_gvk(api_version, kind, "", "v1", "ConfigMap") => {
            let data = config.get("data").cloned().unwrap_or(json!({}));
            for key in data.as_object().into_iter().flatten().map(|(k, _)| k) {
                if !matches!(key.as_str(), "name" | "newName" | "newTag" | "digest") {
                    return ctx.fail(format!("ConfigMap has wrong field name {key}"));
                }
            }
            (data, Value::Null)
        }
        Some(("fn.kpt.dev/v1alpha1", "SetImage")) => (
            config.get("image").cloned().unwrap_or(json!({})),
            config
                .get("additionalImageFields")
                .cloned()
                .unwrap_or(Value::Null),
        ),
        Some((api_version, kind)) => {
            return ctx.fail(format!(
                "`functionConfig` must be a `ConfigMap` or `SetImage`, got {kind} {api_version}"
            ));
        }
        None => (json!({}), Value::Null),
    };
    let get = |k: &str| {
        image
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let image_cfg = Image {
        name: get("name"),
        new_name: get("newName"),
        new_tag: get("newTag"),
        digest: get("digest"),
    };
    if image_cfg.name.is_empty() {
        return ctx.fail("must specify `name`");
    }
    if image_cfg.new_name.is_empty() && image_cfg.new_tag.is_empty() && image_cfg.digest.is_empty()
    {
        return ctx.fail("must specify one of `newName`, `newTag`, or `digest`");
    }
    let mut params = image.clone();
    if let Some(map) = params.as_object_mut() {
        map.insert("additionalImageFields".into(), extra.clone());
    }
    if let Err(exit) = check(ctx, &parameters(), &params) {
        return exit;
    }
    let extra: Vec<FieldSpec> =
        match serde_json::from_value(if extra.is_null() { json!([]) } else { extra }) {
            Ok(specs) => specs,
            Err(e) => {
                return ctx.fail(format!(
                    "invalid functionConfig: parameter `additionalImageFields`: {e}"
                ));
            }
        };
    let matcher = regex::Regex::new(&format!(
        "^{}(@sha256)?(:[a-zA-Z0-9_.{{}}-]*)?$",
        regex::escape(&image_cfg.name)
    ))
    .ok();
    let mut count = 0;
    let doc = ctx.doc();
    for o in ctx.rl.items.clone() {
        if let Some(exit) = ctx.interrupted() {
            return exit;
        }
        let obj = ctx.rl.obj(o);
        let mut targets = Vec::new();
        let containers = match obj.kind() {
            "Pod" => doc.get_path(o, &["spec", "containers"]),
            "Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet" | "PodTemplate" => {
                doc.get_path(o, &["spec", "template", "spec", "containers"])
            }
            _ => None,
        };
        for &c in containers.map_or(&[][..], |l| doc.items(l)) {
            targets.extend(doc.get(c, "image"));
        }
        for spec in extra.iter().filter(|s| s.selects(&obj)) {
            walk(
                doc,
                o,
                &spec.segments(),
                String::new(),
                &mut |Hit::Field { value, .. }| targets.extend(value),
            );
        }
        for node in targets {
            let Some(current) = doc.str(node) else {
                continue;
            };
            if !matcher.as_ref().is_some_and(|m| m.is_match(current)) {
                continue;
            }
            let updated = update(current, &image_cfg);
            if updated != current {
                ctx.ed.set_scalar(doc, node, &updated, true);
                count += 1;
            }
        }
    }
    ctx.results.push(FnResult::info(format!(
        "summary: updated a total of {count} image(s)"
    )));
    Exit::Ok
}

/// Splits an image into name and the rest (`:tag`, `@digest` or both).
fn split(image: &str) -> (&str, &str) {
    let (without_digest, digest_at) = match image.find('@') {
        Some(at) => (&image[..at], at),
        None => (image, image.len()),
    };
    let slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    match without_digest[slash..].rfind(':') {
        Some(colon) => image.split_at(slash + colon),
        None => image.split_at(digest_at),
    }
}

fn update(current: &str, image: &Image) -> String {
    let (name, rest) = split(current);
    let name = if image.new_name.is_empty() {
        name
    } else {
        &image.new_name
    };
    let rest = if !image.digest.is_empty() {
        format!("@{}", image.digest)
    } else if !image.new_tag.is_empty() {
        format!(":{}", image.new_tag)
    } else {
        rest.to_owned()
    };
    format!("{name}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_registry_ports_tags_and_digests() {
        assert_eq!(split("nginx"), ("nginx", ""));
        assert_eq!(split("nginx:1.2"), ("nginx", ":1.2"));
        assert_eq!(split("localhost:5000/nginx"), ("localhost:5000/nginx", ""));
        assert_eq!(
            split("localhost:5000/nginx:1"),
            ("localhost:5000/nginx", ":1")
        );
        assert_eq!(split("nginx@sha256:ab"), ("nginx", "@sha256:ab"));
        assert_eq!(split("nginx:1@sha256:ab"), ("nginx", ":1@sha256:ab"));
    }
}
