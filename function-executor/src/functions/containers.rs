//! Functions over the containers of pod-owning resources that need more than one path.

use std::sync::Arc;

use regex::Regex;

use crate::api::{DataType, ResourceInfo};
use crate::args::ArgValue;
use crate::functions::path_visitor::{CONTAINER_NAME_PATTERN, IMAGE_REFERENCE_PATTERN, get, write};
use crate::functions::resources::{Custom, custom, identified};
use crate::functions::{Call, Outcome, TypedFunction};
use crate::path::{self, UnresolvedPath};
use crate::registry::{IMAGE_ACCESSOR, PathVisitorInfo, attribute, pod_spec_prefixes};
use crate::signature::ParameterBuilder;
use crate::yaml::{Editor, New};

fn set_image_reference_by_uri(call: &Call) -> Result<Outcome, String> {
    let uri = call.arguments.str("repository-uri").unwrap_or_default();
    let reference = call.arguments.str("image-reference").unwrap_or_default();
    let accessor = Regex::new(IMAGE_ACCESSOR).map_err(|e| e.to_string())?;
    let images_for = |info: &ResourceInfo| {
        call.registry
            .paths_for(attribute::CONTAINER_IMAGE, &info.resource_type)
    };
    let images = get(call, &images_for, &["*".to_owned()], Some(DataType::String))?;
    let mut editor = Editor::default();
    let mut edits = 0;
    for image in images {
        let Some(text) = image.value.as_str() else {
            continue;
        };
        let Some(captures) = accessor.captures(text) else {
            continue;
        };
        if &captures["uri"] != uri {
            continue;
        }
        let replaced = format!("{uri}{reference}");
        if replaced == text {
            continue;
        }
        let entry = PathVisitorInfo::new(attribute::GENERAL, &image.path, DataType::String);
        let only_this = |info: &ResourceInfo| {
            if *info == image.resource {
                vec![&entry]
            } else {
                Vec::new()
            }
        };
        edits += write(
            call,
            &mut editor,
            &only_this,
            &[],
            &ArgValue::String(replaced),
            false,
        )?;
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(&call.unit.doc)),
        output: None,
    })
}

fn set_env(call: &Call) -> Result<Outcome, String> {
    let container = call.arguments.str("container-name").unwrap_or_default();
    // Later pairs for one variable win.
    let mut pairs: Vec<(String, String)> = Vec::new();
    for value in call.arguments.all("env-key-value") {
        let text = value.as_str().unwrap_or_default();
        let Some((key, value)) = text.split_once('=') else {
            return Err(format!("env-key-value {text:?} is not KEY=value"));
        };
        pairs.retain(|(k, _)| k != key);
        pairs.push((key.to_owned(), value.to_owned()));
    }
    let doc = &call.unit.doc;
    let mut editor = Editor::default();
    let mut edits = 0;
    for (element, info) in identified(call)? {
        for (resource_type, pod_spec) in pod_spec_prefixes() {
            if info.resource_type != resource_type {
                continue;
            }
            let lookup = format!(
                "{pod_spec}.containers.?name={}",
                if container == "*" {
                    "*".to_owned()
                } else {
                    path::escape(container)
                }
            );
            let lookup = UnresolvedPath::parse(&lookup).map_err(|e| e.to_string())?;
            for found in path::resolve(doc, element.root, &lookup, false) {
                let Some(node) = found.node else { continue };
                if !doc.is_map(node) {
                    continue;
                }
                let env = doc.get(node, "env");
                let mut missing = Vec::new();
                for (key, value) in &pairs {
                    let item = env.and_then(|env| {
                        doc.items(env)
                            .iter()
                            .copied()
                            .find(|&item| doc.get_str(item, &["name"]) == Some(key.as_str()))
                    });
                    match item {
                        Some(item) => match doc.get(item, "value") {
                            Some(current) if doc.str(current) == Some(value.as_str()) => {}
                            Some(current) if doc.str(current).is_some() => {
                                editor.set_scalar(doc, current, value, true);
                                edits += 1;
                            }
                            Some(_) => {
                                return Err(format!(
                                    "{} {}: env {key} of container {}: its value is not a scalar (valueFrom?)",
                                    info.resource_type, info.resource_name, found.path
                                ));
                            }
                            None => {
                                editor.insert(doc, item, "value", New::str(value.clone()));
                                edits += 1;
                            }
                        },
                        None => missing.push(New::Map(vec![
                            ("name".to_owned(), New::str(key.clone())),
                            ("value".to_owned(), New::str(value.clone())),
                        ])),
                    }
                }
                if missing.is_empty() {
                    continue;
                }
                edits += missing.len();
                match env {
                    Some(env) if doc.is_seq(env) => {
                        for item in missing {
                            editor.append_item(doc, env, item);
                        }
                    }
                    Some(env) if doc.is_null(env) => {
                        editor.replace_node(doc, env, &New::Seq(missing))
                    }
                    Some(_) => {
                        return Err(format!(
                            "{} {}: {}.env is not a list",
                            info.resource_type, info.resource_name, found.path
                        ));
                    }
                    None => editor.insert(doc, node, "env", New::Seq(missing)),
                }
            }
        }
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

pub fn functions() -> Vec<Arc<dyn TypedFunction>> {
    let string = DataType::String;
    let mut set_env_signature = custom(
        "set-env",
        "Set environment variables of a container (* for every container), adding those missing",
        vec![
            ParameterBuilder::new(
                "container-name",
                string,
                "Name of the container whose environment to set",
            )
            .example("main")
            .pattern(CONTAINER_NAME_PATTERN),
            ParameterBuilder::new("env-key-value", string, "KEY=value; repeat for more")
                .example("LOG_LEVEL=debug")
                .pattern(r"^[A-Za-z_][-._A-Za-z0-9]*="),
        ],
        None,
        true,
    );
    set_env_signature.typed.var_args = true;
    vec![
        Arc::new(Custom {
            signature: custom(
                "set-image-reference-by-uri",
                "Set the tag or digest of every container image from the given repository",
                vec![
                    ParameterBuilder::new(
                        "repository-uri",
                        string,
                        "Image repository, without tag or digest",
                    )
                    .example("ghcr.io/example/app"),
                    ParameterBuilder::new(
                        "image-reference",
                        string,
                        "Tag (:tag) and/or digest (@sha256:...)",
                    )
                    .example(":v1.2.3")
                    .pattern(IMAGE_REFERENCE_PATTERN),
                ],
                None,
                true,
            ),
            run: set_image_reference_by_uri,
        }),
        Arc::new(Custom {
            signature: set_env_signature,
            run: set_env,
        }),
    ]
}
