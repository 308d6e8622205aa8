//! Functions over the containers of pod-owning resources that need more than one path.

use regex::Regex;

use crate::api::{DataType, ResourceInfo};
use crate::args::ArgValue;
use crate::functions::definition::{Definition, FunctionKind, KUBERNETES, Options};
use crate::functions::patch::item_lines;
use crate::functions::path_visitor::{
    CONTAINER_NAME_PATTERN, IMAGE_REFERENCE_PATTERN, REPOSITORY_URI_PATTERN, fill_missing, get,
    write,
};
use crate::functions::resources::identified;
use crate::functions::{Call, FunctionError, Outcome};
use crate::path::{self, UnresolvedPath};
use crate::registry::{IMAGE_ACCESSOR, PathVisitorInfo, attribute, pod_spec_prefixes};
use crate::signature::ParameterBuilder;
use crate::yaml::{Editor, New};

fn set_image_reference_by_uri(call: &Call) -> Result<Outcome, FunctionError> {
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

/// Each container named `container` (`*`: every one) of the pod-owning resources of the unit:
/// its resource, where it was found, and its node.
fn containers<'u>(
    call: &'u Call,
    container: &str,
) -> Result<Vec<(&'u ResourceInfo, path::Resolved, crate::yaml::NodeId)>, FunctionError> {
    let name = if container == "*" {
        "*".to_owned()
    } else {
        path::escape(container).into_owned()
    };
    let prefixes = pod_spec_prefixes();
    // Each lookup is parsed once per call (a unit holds many resources of few types), and
    // only for the types the unit holds.
    let mut lookups: Vec<Option<UnresolvedPath>> = vec![None; prefixes.len()];
    let mut containers = Vec::new();
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        for (&(resource_type, pod_spec), lookup) in prefixes.iter().zip(&mut lookups) {
            if info.resource_type != resource_type {
                continue;
            }
            let lookup = match lookup {
                Some(lookup) => lookup,
                None => lookup.insert(
                    UnresolvedPath::parse(&format!("{pod_spec}.containers.?name={name}"))
                        .map_err(|e| e.to_string())?,
                ),
            };
            for found in path::resolve(&call.unit.doc, element.root, lookup, false) {
                if let Some(node) = found.node {
                    containers.push((info, found, node));
                }
            }
        }
    }
    Ok(containers)
}

/// ConfigHub's k8sFnSetEnv: each existing variable named gets the value, an empty value
/// removes the variable, and the others are appended in the order first named. A variable
/// named twice takes its last value and is appended once (ConfigHub appends it once per
/// mention).
fn set_env(call: &Call) -> Result<Outcome, FunctionError> {
    let container = call.arguments.str("container-name").unwrap_or_default();
    let mut pairs: Vec<(String, String)> = Vec::new();
    for value in call.arguments.all("env-key-value") {
        let text = value.as_str().unwrap_or_default();
        let Some((key, value)) = text.split_once('=') else {
            return Err(format!("env-key-value {text:?} is not KEY=value").into());
        };
        match pairs.iter_mut().find(|(k, _)| k == key) {
            Some(pair) => value.clone_into(&mut pair.1),
            None => pairs.push((key.to_owned(), value.to_owned())),
        }
    }
    let doc = &call.unit.doc;
    let mut editor = Editor::default();
    let mut edits = 0;
    for (info, found, node) in containers(call, container)? {
        if !doc.is_map(node) {
            continue;
        }
        let at = || {
            format!(
                "{} {}: {}",
                info.resource_type, info.resource_name, found.path
            )
        };
        if found.through_alias {
            return Err(format!("{}: goes through an alias; not edited", at()).into());
        }
        let env = doc.get(node, "env");
        let items = env.map(|env| doc.items(env)).unwrap_or_default();
        let named = |key: &str| {
            items
                .iter()
                .copied()
                .find(|&item| doc.get_str(item, &["name"]) == Some(key))
        };
        let mut missing = Vec::new();
        let mut removed = Vec::new();
        for (key, value) in &pairs {
            match (named(key), value.is_empty()) {
                (Some(item), true) => removed.push(item),
                (None, true) => {}
                (Some(item), false) => match doc.get(item, "value") {
                    Some(current) if doc.str(current) == Some(value.as_str()) => {}
                    Some(current) if doc.str(current).is_some() => {
                        editor.set_scalar(doc, current, value, true);
                        edits += 1;
                    }
                    Some(_) => {
                        return Err(format!(
                            "{}: env {key}: its value is not a scalar (valueFrom?)",
                            at()
                        )
                        .into());
                    }
                    None => {
                        editor.insert(doc, item, "value", New::str(value.clone()));
                        edits += 1;
                    }
                },
                (None, false) => missing.push(New::Map(vec![
                    ("name".to_owned(), New::str(key.clone())),
                    ("value".to_owned(), New::str(value.clone())),
                ])),
            }
        }
        if let Some(env) = env.filter(|_| !removed.is_empty()) {
            edits += removed.len();
            if removed.len() == items.len() && missing.is_empty() {
                editor.replace_node(doc, env, &New::Seq(Vec::new()));
                continue;
            }
            for item in removed {
                let (start, end) = item_lines(doc, item)
                    .ok_or_else(|| format!("{}.env: not written one item per line", at()))?;
                editor.replace(start, end, String::new());
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
            Some(env) if doc.is_null(env) => editor.replace_node(doc, env, &New::Seq(missing)),
            Some(_) => return Err(format!("{}.env is not a list", at()).into()),
            None => editor.insert(doc, node, "env", New::Seq(missing)),
        }
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

/// A Kubernetes quantity: a decimal number and its suffix (`500m`, `1.5`, `256Mi`, `2G`).
#[derive(Debug, Clone, PartialEq)]
struct Quantity {
    number: f64,
    suffix: &'static str,
}

const SUFFIXES: &[(&str, f64)] = &[
    ("Ki", 1024.0),
    ("Mi", 1_048_576.0),
    ("Gi", 1_073_741_824.0),
    ("Ti", 1_099_511_627_776.0),
    ("Pi", 1_125_899_906_842_624.0),
    ("Ei", 1_152_921_504_606_846_976.0),
    ("m", 0.001),
    ("k", 1e3),
    ("M", 1e6),
    ("G", 1e9),
    ("T", 1e12),
    ("P", 1e15),
    ("E", 1e18),
    ("", 1.0),
];

impl Quantity {
    fn parse(text: &str) -> Option<Self> {
        let (suffix, _) = SUFFIXES.iter().find(|(suffix, _)| text.ends_with(suffix))?;
        let number: f64 = text[..text.len() - suffix.len()].parse().ok()?;
        (number.is_finite() && number >= 0.0).then_some(Self { number, suffix })
    }

    fn value(&self) -> f64 {
        let scale = SUFFIXES
            .iter()
            .find(|(s, _)| *s == self.suffix)
            .map_or(1.0, |(_, scale)| *scale);
        self.number * scale
    }

    fn times(&self, factor: i64) -> Self {
        Self {
            number: self.number * factor as f64,
            suffix: self.suffix,
        }
    }

    fn render(&self) -> String {
        let number = if self.number.fract() == 0.0 {
            format!("{}", self.number as u64)
        } else {
            format!("{}", self.number)
        };
        format!("{number}{}", self.suffix)
    }
}

fn set_container_resources(call: &Call) -> Result<Outcome, FunctionError> {
    let container = call.arguments.str("container-name").unwrap_or_default();
    let operation = call.arguments.str("operation").unwrap_or("all");
    let factor = call
        .arguments
        .get("limit-factor")
        .and_then(ArgValue::as_int)
        .unwrap_or_default();
    let mut wanted = Vec::new();
    for resource in ["cpu", "memory"] {
        let text = call.arguments.str(resource).unwrap_or_default();
        let quantity = Quantity::parse(text).ok_or_else(|| {
            format!("{resource} {text:?} is not a quantity (e.g. 500m, 1, 256Mi)")
        })?;
        wanted.push((resource, quantity));
    }
    let doc = &call.unit.doc;
    let mut editor = Editor::default();
    let mut edits = 0;
    for (info, found, node) in containers(call, container)? {
        for (resource, quantity) in &wanted {
            let current = doc
                .get_path(node, &["resources", "requests", resource])
                .and_then(|n| doc.str(n))
                .and_then(Quantity::parse);
            let request = match (operation, &current) {
                ("cap", Some(current)) if current.value() <= quantity.value() => current.clone(),
                ("floor", Some(current)) if current.value() >= quantity.value() => current.clone(),
                _ => quantity.clone(),
            };
            let mut values = vec![("requests", request.render())];
            let limit = doc
                .get_path(node, &["resources", "limits", resource])
                .and_then(|n| doc.str(n))
                .and_then(Quantity::parse);
            if factor > 0 {
                values.push(("limits", request.times(factor).render()));
            } else if limit.is_some_and(|limit| limit.value() < request.value()) {
                // A limit below the request would be refused by Kubernetes.
                values.push(("limits", request.render()));
            }
            for (kind, value) in values {
                let path = format!("{}.resources.{kind}.{resource}", found.path);
                let entry = PathVisitorInfo::new(attribute::GENERAL, &path, DataType::String);
                let only_this =
                    |i: &ResourceInfo| if i == info { vec![&entry] } else { Vec::new() };
                edits += write(
                    call,
                    &mut editor,
                    &only_this,
                    &[],
                    &ArgValue::String(value),
                    true,
                )?;
            }
        }
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

/// One default: a value for a path relative to the pod spec (or, for `at_root`, to the
/// resource), of the given types.
struct PodDefault {
    path: &'static str,
    value: ArgValue,
}

/// The defaults each `set-pod-defaults` switch adds where they are missing.
fn pod_defaults(switch: &str) -> Vec<PodDefault> {
    let default = |path, value| PodDefault { path, value };
    match switch {
        "automount-service-account-token" => vec![default(
            "automountServiceAccountToken",
            ArgValue::Bool(false),
        )],
        "security-context" => vec![
            default("securityContext.runAsNonRoot", ArgValue::Bool(true)),
            default(
                "securityContext.seccompProfile.type",
                ArgValue::String("RuntimeDefault".into()),
            ),
            default(
                "containers.*.securityContext.allowPrivilegeEscalation",
                ArgValue::Bool(false),
            ),
            default(
                "containers.*.securityContext.readOnlyRootFilesystem",
                ArgValue::Bool(true),
            ),
        ],
        "resources" => vec![
            default(
                "containers.*.resources.requests.cpu",
                ArgValue::String("100m".into()),
            ),
            default(
                "containers.*.resources.requests.memory",
                ArgValue::String("128Mi".into()),
            ),
        ],
        _ => Vec::new(),
    }
}

/// The label that makes a namespace's pods meet the restricted Pod Security Standard.
const POD_SECURITY_LABEL: &str = "metadata.labels.pod-security~1kubernetes~1io/enforce";

/// Opinionated hardening, added only where a value is missing (what is set is kept): the
/// restricted Pod Security label on namespaces, no service account token automounted,
/// non-root pods with the runtime's seccomp profile and containers that cannot escalate
/// privileges nor write their root filesystem, and minimum CPU and memory requests. Each
/// switch defaults to true, but probes: they cannot be added yet, as no port is known to probe.
fn set_pod_defaults(call: &Call) -> Result<Outcome, FunctionError> {
    let switched_on = |name: &str| {
        call.arguments
            .get(name)
            .and_then(ArgValue::as_bool)
            .unwrap_or(true)
    };
    if call.arguments.get("probes").is_some() && switched_on("probes") {
        return Err(
            "probes cannot be added yet (no port is known to probe); pass probes=false".into(),
        );
    }
    let mut edits: Vec<(Vec<(&str, String)>, ArgValue)> = Vec::new();
    if switched_on("pod-security") {
        edits.push((
            vec![("v1/Namespace", POD_SECURITY_LABEL.to_owned())],
            ArgValue::String("restricted".into()),
        ));
    }
    for switch in [
        "automount-service-account-token",
        "security-context",
        "resources",
    ] {
        if !switched_on(switch) {
            continue;
        }
        for default in pod_defaults(switch) {
            let paths = pod_spec_prefixes()
                .into_iter()
                .map(|(resource_type, pod_spec)| {
                    (resource_type, format!("{pod_spec}.{}", default.path))
                })
                .collect();
            edits.push((paths, default.value));
        }
    }
    // One pass per default over the text the previous one left, so that defaults sharing a
    // new parent (securityContext) create it once.
    let mut text: Option<String> = None;
    for (paths, value) in edits {
        let current = text.as_deref().unwrap_or(call.unit.doc.src);
        let unit = crate::Toolchain::KubernetesYaml.parse(current)?;
        let pass = Call {
            unit: &unit,
            ..*call
        };
        let entries: Vec<(&str, PathVisitorInfo)> = paths
            .iter()
            .map(|(resource_type, path)| {
                (
                    *resource_type,
                    PathVisitorInfo::new(attribute::GENERAL, path, DataType::None),
                )
            })
            .collect();
        let entries_for = |info: &ResourceInfo| {
            entries
                .iter()
                .filter(|(resource_type, _)| *resource_type == info.resource_type)
                .map(|(_, entry)| entry)
                .collect()
        };
        let mut editor = Editor::default();
        if fill_missing(&pass, &mut editor, &entries_for, &value)? > 0 {
            text = Some(editor.finish(&unit.doc));
        }
    }
    Ok(Outcome { text, output: None })
}

/// An optional boolean parameter of set-pod-defaults.
fn switch(name: &str, description: &str) -> ParameterBuilder {
    ParameterBuilder::new(name, DataType::Bool, description)
        .optional()
        .example("true")
}

pub static SET_POD_DEFAULTS: Definition = Definition {
    name: "set-pod-defaults",
    description: "Add hardening defaults where missing: the restricted Pod Security label on namespaces, no automounted service account token, non-root pods with the RuntimeDefault seccomp profile, containers without privilege escalation and with a read-only root filesystem, minimum CPU and memory requests",
    parameters: |_| {
        vec![
            switch(
                "pod-security",
                "Label namespaces pod-security.kubernetes.io/enforce: restricted",
            ),
            switch(
                "automount-service-account-token",
                "Set automountServiceAccountToken: false",
            ),
            switch(
                "security-context",
                "Add pod and container security contexts",
            ),
            switch("resources", "Add CPU (100m) and memory (128Mi) requests"),
            switch("probes", "Add probes (not supported yet: pass false)"),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: set_pod_defaults,
    options: Options::DEFAULT,
};

pub static SET_CONTAINER_RESOURCES: Definition = Definition {
    name: "set-container-resources",
    description: "Set the CPU and memory requests of a container (* for every container), and limits as a multiple of them",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "container-name",
                DataType::String,
                "Name of the container whose resources to set",
            )
            .example("main")
            .pattern(CONTAINER_NAME_PATTERN),
            ParameterBuilder::new(
                "operation",
                DataType::Enum,
                "all: set; cap: only lower; floor: only raise",
            )
            .allowed(&["all", "cap", "floor"]),
            ParameterBuilder::new("cpu", DataType::String, "CPU request").example("500m"),
            ParameterBuilder::new("memory", DataType::String, "Memory request").example("256Mi"),
            ParameterBuilder::new(
                "limit-factor",
                DataType::Int,
                "Limits = requests x factor; 0 leaves limits alone unless below the request",
            )
            .example("2")
            .range(Some(0), Some(10)),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: set_container_resources,
    options: Options {
        attribute_name: attribute::CONTAINER_RESOURCES,
        ..Options::DEFAULT
    },
};

pub static SET_IMAGE_REFERENCE_BY_URI: Definition = Definition {
    name: "set-image-reference-by-uri",
    description: "Set the tag or digest of every container image from the given repository",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "repository-uri",
                DataType::String,
                "Image repository, without tag or digest",
            )
            .example("ghcr.io/example/app")
            .pattern(REPOSITORY_URI_PATTERN),
            ParameterBuilder::new(
                "image-reference",
                DataType::String,
                "Tag (:tag) and/or digest (@sha256:...)",
            )
            .example(":v1.2.3")
            .pattern(IMAGE_REFERENCE_PATTERN),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: set_image_reference_by_uri,
    options: Options {
        attribute_name: attribute::CONTAINER_IMAGES,
        ..Options::DEFAULT
    },
};

pub static SET_ENV: Definition = Definition {
    name: "set-env",
    description: "Set environment variables of a container (* for every container), adding those missing",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "container-name",
                DataType::String,
                "Name of the container whose environment to set",
            )
            .example("main")
            .pattern(CONTAINER_NAME_PATTERN),
            ParameterBuilder::new(
                "env-key-value",
                DataType::String,
                "KEY=value; repeat for more",
            )
            .example("LOG_LEVEL=debug")
            .pattern(r"^[-._a-zA-Z][-._a-zA-Z0-9]*=.*$"),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: set_env,
    options: Options {
        var_args: true,
        ..Options::DEFAULT
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_compare_and_scale() {
        let q = |t: &str| Quantity::parse(t).unwrap();
        assert_eq!(q("500m").value(), 0.5);
        assert!(q("1Gi").value() > q("1G").value());
        assert_eq!(q("256Mi").times(2).render(), "512Mi");
        assert_eq!(q("0.5").times(3).render(), "1.5");
        assert_eq!(q("250m").times(4).render(), "1000m");
        for bad in ["", "abc", "-1", "1Q", "NaN"] {
            assert!(Quantity::parse(bad).is_none(), "{bad}");
        }
    }
}
