//! Functions over the containers of pod-owning resources that need more than one path.

use regex::Regex;

use krm_plugin_api::quoted;

use crate::api::{DataType, ResourceInfo};
use crate::args::ArgValue;
use crate::functions::definition::{Definition, FunctionKind, KUBERNETES, Options};
use crate::functions::patch::item_lines;
use crate::functions::path_visitor::{
    CONTAINER_NAME_PATTERN, IMAGE_REFERENCE_PATTERN, REPOSITORY_URI_PATTERN, fill_missing, get,
    scalar, write,
};
use crate::functions::resources::identified;
use crate::functions::unit::entry_lines;
use crate::functions::validation::PLACEHOLDER_STRING;
use crate::functions::{Call, FunctionError, Outcome};
use crate::path::{self, UnresolvedPath};
use crate::quantity::Quantity;
use crate::registry::{
    CONTAINER_LISTS, IMAGE_ACCESSOR, PathVisitorInfo, attribute, pod_spec_prefixes,
};
use crate::signature::ParameterBuilder;
use crate::yaml::{Doc, Editor, Kind, New, NodeId};

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
    let prefixes: Vec<(&str, String)> = pod_spec_prefixes()
        .into_iter()
        .flat_map(|(resource_type, pod_spec)| {
            let name = &name;
            CONTAINER_LISTS
                .iter()
                .map(move |list| (resource_type, format!("{pod_spec}.{list}.?name={name}")))
        })
        .collect();
    // Each lookup is parsed once per call (a unit holds many resources of few types), and
    // only for the types the unit holds.
    let mut lookups: Vec<Option<UnresolvedPath>> = vec![None; prefixes.len()];
    let mut containers = Vec::new();
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        for ((resource_type, path), lookup) in prefixes.iter().zip(&mut lookups) {
            if info.resource_type != *resource_type {
                continue;
            }
            let lookup = match lookup {
                Some(lookup) => lookup,
                None => lookup.insert(UnresolvedPath::parse(path).map_err(|e| e.to_string())?),
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

/// What `set-container-resources` asks of one resource (`cpu` or `memory`): the request as
/// given, and the limit (the request times the factor, in canonical form) unless the factor
/// is 0.
struct Wanted {
    resource: &'static str,
    request: (String, Quantity),
    limit: Option<(String, Quantity)>,
}

impl Wanted {
    fn new(resource: &'static str, text: &str, factor: i64) -> Result<Self, FunctionError> {
        let quantity = Quantity::parse(text)
            .map_err(|e| format!("invalid {resource} {}: {e}", quoted(text).bounded()))?;
        let limit = if factor == 0 {
            None
        } else {
            let limit = quantity
                .times(factor)
                .map_err(|e| format!("invalid {resource} {}: {e}", quoted(text).bounded()))?;
            Some((limit.to_string(), limit))
        };
        Ok(Self {
            resource,
            request: (text.to_owned(), quantity),
            limit,
        })
    }
}

/// ConfigHub's k8sSetResources over one container's `resources` (`None` when it has none):
/// the values to write, as `(requests|limits, resource, value)`, and whether `limits` goes
/// (a factor of 0). `cap` keeps a current value below the wanted one, `floor` one above;
/// a current value is compared only when it is a string that reads as a quantity.
fn resource_values(
    doc: &Doc,
    resources: Option<NodeId>,
    operation: &str,
    wanted: &[Wanted],
) -> Vec<(&'static str, &'static str, String)> {
    let kept = |kind: &str, resource: &str, (text, quantity): &(String, Quantity)| {
        let current = resources
            .and_then(|node| doc.get_path(node, &[kind, resource]))
            .filter(|&node| matches!(scalar(doc, node), Ok((_, DataType::String))))
            .and_then(|node| doc.str(node))
            .and_then(|text| Some((text, Quantity::parse(text).ok()?)));
        match (operation, current) {
            ("cap", Some((current, q))) if q < *quantity => current.to_owned(),
            ("floor", Some((current, q))) if q > *quantity => current.to_owned(),
            _ => text.clone(),
        }
    };
    let mut values = Vec::new();
    for want in wanted {
        values.push((
            "requests",
            want.resource,
            kept("requests", want.resource, &want.request),
        ));
    }
    for want in wanted {
        if let Some(limit) = &want.limit {
            values.push((
                "limits",
                want.resource,
                kept("limits", want.resource, limit),
            ));
        }
    }
    values
}

/// Edits a unit in passes, each over the text the previous one left, so that values sharing
/// a new parent (`securityContext`) create it once. `pass` gets the pass number and the unit
/// as it stands, and answers how many edits it queued.
fn in_passes(
    call: &Call,
    passes: usize,
    mut pass: impl FnMut(usize, &Call, &mut Editor) -> Result<usize, FunctionError>,
) -> Result<Option<String>, FunctionError> {
    let mut text: Option<String> = None;
    for number in 0..passes {
        let current = text.as_deref().unwrap_or(call.unit.doc.src);
        let unit = crate::Toolchain::KubernetesYaml.parse(current)?;
        let this = Call {
            unit: &unit,
            ..*call
        };
        let mut editor = Editor::default();
        if pass(number, &this, &mut editor)? > 0 {
            text = Some(editor.finish(&unit.doc));
        }
    }
    Ok(text)
}

/// Sets `value` at the concrete `path` of the resource `info` whatever is there, creating
/// missing keys, as gaby's Set does (a scalar keeps its quoting style where it can).
fn set_at(
    call: &Call,
    editor: &mut Editor,
    info: &ResourceInfo,
    path: &str,
    value: &New,
) -> Result<usize, FunctionError> {
    let doc = &call.unit.doc;
    let parsed = UnresolvedPath::parse(path).map_err(|e| e.to_string())?;
    let mut edits = 0;
    for element in &call.unit.elements {
        if element.checked_info().ok() != Some(info) {
            continue;
        }
        for found in path::resolve(doc, element.root, &parsed, false) {
            let Some(node) = found.node else { continue };
            if found.through_alias || matches!(doc.node(node).kind, Kind::Alias(_)) {
                return Err(format!(
                    "{} {}: path {}: goes through an alias; not edited",
                    info.resource_type, info.resource_name, found.path
                )
                .into());
            }
            let unchanged = match value {
                New::Str(text) => {
                    doc.str(node) == Some(text.as_str())
                        && scalar(doc, node)
                            .is_ok_and(|(_, data_type)| data_type == DataType::String)
                }
                New::Plain(text) => doc.to_new(node) == New::Plain(text.clone()),
                New::Map(_) | New::Seq(_) => false,
            };
            if unchanged {
                continue;
            }
            match value {
                New::Str(text) if !doc.is_map(node) && !doc.is_seq(node) => {
                    editor.set_scalar(doc, node, text, true)
                }
                New::Plain(text) if !doc.is_map(node) && !doc.is_seq(node) => {
                    editor.set_scalar(doc, node, text, false)
                }
                value => editor.replace_node(doc, node, value),
            }
            edits += 1;
        }
    }
    Ok(edits + fill_at(call, editor, info, path, value)?)
}

/// Creates `value` at the concrete `path` of the resource `info` where it is missing.
fn fill_at(
    call: &Call,
    editor: &mut Editor,
    info: &ResourceInfo,
    path: &str,
    value: &New,
) -> Result<usize, FunctionError> {
    let entry = PathVisitorInfo::new(attribute::GENERAL, path, DataType::None);
    let only_this = |i: &ResourceInfo| if i == info { vec![&entry] } else { Vec::new() };
    fill_missing(call, editor, &only_this, value)
}

/// Removes a container's `resources.limits`, when there is one.
fn remove_limits(
    doc: &Doc,
    editor: &mut Editor,
    resources: NodeId,
    at: &str,
) -> Result<usize, FunctionError> {
    let Some((key, value)) = doc.entry(resources, "limits") else {
        return Ok(0);
    };
    let (start, end) = entry_lines(doc, key, value)
        .ok_or_else(|| format!("{at}.resources.limits: not written one entry per line"))?;
    editor.replace(start, end, String::new());
    Ok(1)
}

/// ConfigHub's k8sFnSetContainerResources: over the `resources` of each container named
/// (every list of every pod-owning type) that has them, the requests given (an empty
/// argument is left out), and limits the requests times `limit-factor`; a factor of 0
/// removes the limits. Requests are written as given, limits in canonical form (`1` for
/// 2 x `500m`).
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
        if !text.is_empty() {
            wanted.push(Wanted::new(resource, text, factor)?);
        }
    }
    if wanted.is_empty() {
        return Err("must specify at least one of cpu and memory".into());
    }
    let text = in_passes(call, 2, |number, call, editor| {
        let doc = &call.unit.doc;
        let mut edits = 0;
        for (info, found, node) in containers(call, container)? {
            let Some(resources) = doc.get(node, "resources") else {
                continue;
            };
            if !doc.is_map(resources) {
                return Err(format!(
                    "{} {}: {}.resources is not a mapping",
                    info.resource_type, info.resource_name, found.path
                )
                .into());
            }
            if number == 0 {
                for (kind, resource, value) in
                    resource_values(doc, Some(resources), operation, &wanted)
                {
                    let path = format!("{}.resources.{kind}.{resource}", found.path);
                    edits += set_at(call, editor, info, &path, &New::Str(value))?;
                }
            } else if factor == 0 {
                edits += remove_limits(doc, editor, resources, &found.path)?;
            }
        }
        Ok(edits)
    })?;
    Ok(Outcome { text, output: None })
}

/// The pod-owning types and where their pod spec is (container_functions.go's
/// resourceTypeToPodSpecPaths).
fn pod_specs<'u>(call: &'u Call) -> Result<Vec<(&'u ResourceInfo, String)>, FunctionError> {
    let prefixes = pod_spec_prefixes();
    let mut found = Vec::new();
    for (element, info) in identified(call)? {
        for (_, pod_spec) in prefixes.iter().filter(|(t, _)| *t == info.resource_type) {
            let path = UnresolvedPath::parse(pod_spec).map_err(|e| e.to_string())?;
            if path::resolve(&call.unit.doc, element.root, &path, false)
                .iter()
                .any(|r| r.node.is_some_and(|n| call.unit.doc.is_map(n)))
            {
                found.push((info, (*pod_spec).to_owned()));
            }
        }
    }
    Ok(found)
}

/// The Namespace labels `pod-security=true` sets, in order.
const POD_SECURITY_LABELS: [(&str, &str); 4] = [
    ("pod-security.kubernetes.io/enforce", "baseline"),
    ("pod-security.kubernetes.io/enforce-version", "latest"),
    ("pod-security.kubernetes.io/warn", "restricted"),
    ("pod-security.kubernetes.io/warn-version", "latest"),
];

/// What one pass of set-pod-defaults does to a pod spec or to each of its containers.
enum PodDefault {
    /// Set at this path below the pod spec, whatever is there.
    PodSpec(&'static str, New),
    /// Created at this path below the pod spec where missing.
    PodSpecIfMissing(&'static str, New),
    /// Set at this path below each container, whatever is there.
    Container(&'static str, New),
    /// Created at this path below each container where missing.
    ContainerIfMissing(&'static str, New),
    /// Minimum requests of 128m CPU and 128Mi memory for each container, no limits.
    Resources,
    /// Probes for each container of `containers`.
    Probes,
}

/// ConfigHub's k8sFnSetPodDefaults, pass by pass in its order: `pod-security` labels
/// namespaces; every pod spec gets terminationGracePeriodSeconds 60 where it has none;
/// `automount-service-account-token` sets automountServiceAccountToken false;
/// `security-context` the RuntimeDefault seccomp profile and, in every container, a
/// read-only root filesystem, non-root, no privilege (escalation), all capabilities dropped
/// and imagePullPolicy Always (these two where missing); `resources` raises requests to
/// 128m and 128Mi and removes limits; `probes` adds readiness (and, where a container has
/// none, startup and liveness) probes. Every switch is off unless given.
fn set_pod_defaults(call: &Call) -> Result<Outcome, FunctionError> {
    let on = |name: &str| {
        call.arguments
            .get(name)
            .and_then(ArgValue::as_bool)
            .unwrap_or(false)
    };
    let mut defaults = Vec::new();
    if on("automount-service-account-token") {
        defaults.push(PodDefault::PodSpec(
            "automountServiceAccountToken",
            New::Plain("false".into()),
        ));
    }
    defaults.push(PodDefault::PodSpecIfMissing(
        "terminationGracePeriodSeconds",
        New::Plain("60".into()),
    ));
    if on("security-context") {
        defaults.push(PodDefault::PodSpec(
            "securityContext.seccompProfile.type",
            New::str("RuntimeDefault"),
        ));
        for (path, value) in [
            ("securityContext.readOnlyRootFilesystem", true),
            ("securityContext.runAsNonRoot", true),
            ("securityContext.allowPrivilegeEscalation", false),
            ("securityContext.privileged", false),
        ] {
            defaults.push(PodDefault::Container(path, New::Plain(value.to_string())));
        }
        defaults.push(PodDefault::ContainerIfMissing(
            "securityContext.capabilities.drop",
            New::Seq(vec![New::str("ALL")]),
        ));
        defaults.push(PodDefault::ContainerIfMissing(
            "imagePullPolicy",
            New::str("Always"),
        ));
    }
    if on("resources") {
        defaults.push(PodDefault::Resources);
    }
    if on("probes") {
        defaults.push(PodDefault::Probes);
    }
    let pod_security = on("pod-security");
    let floor = [
        Wanted::new("cpu", "128m", 0)?,
        Wanted::new("memory", "128Mi", 0)?,
    ];
    // The namespaces' labels, then each default; resources take two passes (values, then
    // the limits removed).
    let mut steps: Vec<(Option<&PodDefault>, usize)> = vec![(None, 0)];
    for default in &defaults {
        steps.push((Some(default), 0));
        if matches!(default, PodDefault::Resources) {
            steps.push((Some(default), 1));
        }
    }
    let text = in_passes(call, steps.len(), |number, call, editor| {
        let doc = &call.unit.doc;
        let mut edits = 0;
        let (default, step) = steps[number];
        let Some(default) = default else {
            if !pod_security {
                return Ok(0);
            }
            for (_, info) in identified(call)? {
                if info.resource_type != "v1/Namespace" {
                    continue;
                }
                for (label, value) in POD_SECURITY_LABELS {
                    let path = format!("metadata.labels.{}", path::escape(label));
                    edits += set_at(call, editor, info, &path, &New::str(value))?;
                }
            }
            return Ok(edits);
        };
        for (info, pod_spec) in pod_specs(call)? {
            match default {
                PodDefault::PodSpec(path, value) => {
                    edits += set_at(call, editor, info, &format!("{pod_spec}.{path}"), value)?;
                }
                PodDefault::PodSpecIfMissing(path, value) => {
                    edits += fill_at(call, editor, info, &format!("{pod_spec}.{path}"), value)?;
                }
                PodDefault::Container(path, value) => {
                    for list in CONTAINER_LISTS {
                        let path = format!("{pod_spec}.{list}.*.{path}");
                        edits += set_at(call, editor, info, &path, value)?;
                    }
                }
                PodDefault::ContainerIfMissing(path, value) => {
                    for list in CONTAINER_LISTS {
                        let path = format!("{pod_spec}.{list}.*.{path}");
                        edits += fill_at(call, editor, info, &path, value)?;
                    }
                }
                PodDefault::Resources => {
                    for (container, node) in pod_containers(call, info, &pod_spec, &CONTAINER_LISTS)
                    {
                        let resources = doc.get(node, "resources");
                        if resources.is_some_and(|r| !doc.is_map(r) && !doc.is_null(r)) {
                            return Err(format!(
                                "{} {}: {container}.resources is not a mapping",
                                info.resource_type, info.resource_name
                            )
                            .into());
                        }
                        if step == 0 {
                            for (kind, resource, value) in
                                resource_values(doc, resources, "floor", &floor)
                            {
                                let path = format!("{container}.resources.{kind}.{resource}");
                                edits += set_at(call, editor, info, &path, &New::Str(value))?;
                            }
                        } else if let Some(resources) = resources {
                            edits += remove_limits(doc, editor, resources, &container)?;
                        }
                    }
                }
                PodDefault::Probes => {
                    for (_, node) in pod_containers(call, info, &pod_spec, &["containers"]) {
                        if let Some(probe) = readiness_probe(doc, node) {
                            editor.insert(doc, node, "startupProbe", probe.startup);
                            editor.insert(doc, node, "livenessProbe", probe.liveness);
                            editor.insert(doc, node, "readinessProbe", probe.readiness);
                        } else if let Some(readiness) = copied_probe(doc, node) {
                            editor.insert(doc, node, "readinessProbe", readiness);
                        } else {
                            continue;
                        }
                        edits += 1;
                    }
                }
            }
        }
        Ok(edits)
    })?;
    Ok(Outcome { text, output: None })
}

/// The containers of the given lists in one resource's pod spec: each one's path and node.
fn pod_containers(
    call: &Call,
    info: &ResourceInfo,
    pod_spec: &str,
    lists: &[&str],
) -> Vec<(String, NodeId)> {
    let doc = &call.unit.doc;
    let Some(element) = call
        .unit
        .elements
        .iter()
        .find(|e| e.checked_info().is_ok_and(|i| i == info))
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for list in lists {
        let Ok(path) = UnresolvedPath::parse(&format!("{pod_spec}.{list}.*")) else {
            continue;
        };
        for resolved in path::resolve(doc, element.root, &path, false) {
            if let Some(node) = resolved.node.filter(|&n| doc.is_map(n)) {
                found.push((resolved.path, node));
            }
        }
    }
    found
}

/// The three probes ConfigHub adds to a container that has none.
struct NewProbes {
    startup: New,
    liveness: New,
    readiness: New,
}

/// The probes for a container without any: an HTTP GET of the placeholder path on the
/// container's first port (8080 without one), with ConfigHub's timings. `None` when the
/// container has a readiness, liveness or startup probe.
fn readiness_probe(doc: &Doc, container: NodeId) -> Option<NewProbes> {
    if ["readinessProbe", "livenessProbe", "startupProbe"]
        .iter()
        .any(|probe| doc.get(container, probe).is_some())
    {
        return None;
    }
    let port = doc
        .get(container, "ports")
        .and_then(|ports| doc.items(ports).first().copied())
        .and_then(|first| doc.get(first, "containerPort"))
        .and_then(|port| match scalar(doc, port) {
            Ok((value, DataType::Int)) => value.as_i64(),
            _ => None,
        })
        .unwrap_or(8080);
    let probe = |timings: [(&str, i64); 5]| {
        let mut entries = vec![(
            "httpGet".to_owned(),
            New::Map(vec![
                ("path".to_owned(), New::str(PLACEHOLDER_STRING)),
                ("port".to_owned(), New::Plain(port.to_string())),
            ]),
        )];
        entries.extend(
            timings
                .iter()
                .map(|(key, value)| ((*key).to_owned(), New::Plain(value.to_string()))),
        );
        New::Map(entries)
    };
    let timings = |initial: i64, failures: i64| {
        [
            ("initialDelaySeconds", initial),
            ("periodSeconds", 10),
            ("timeoutSeconds", 1),
            ("failureThreshold", failures),
            ("successThreshold", 1),
        ]
    };
    Some(NewProbes {
        startup: probe(timings(10, 30)),
        liveness: probe(timings(30, 3)),
        readiness: probe(timings(5, 3)),
    })
}

/// A readiness probe for a container without one that has a liveness (or else a startup)
/// probe: a copy of it with initialDelaySeconds 5 and periodSeconds 10.
fn copied_probe(doc: &Doc, container: NodeId) -> Option<New> {
    if doc.get(container, "readinessProbe").is_some() {
        return None;
    }
    let source = doc
        .get(container, "livenessProbe")
        .or_else(|| doc.get(container, "startupProbe"))?;
    let New::Map(mut entries) = doc.to_new(source) else {
        return None;
    };
    for (key, value) in [("initialDelaySeconds", 5), ("periodSeconds", 10)] {
        let value = New::Plain(value.to_string());
        match entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => entries.push((key.to_owned(), value)),
        }
    }
    Some(New::Map(entries))
}

/// An optional boolean parameter of set-pod-defaults.
fn switch(name: &str, description: &str) -> ParameterBuilder {
    ParameterBuilder::new(name, DataType::Bool, description)
        .optional()
        .example("true")
}

pub static SET_POD_DEFAULTS: Definition = Definition {
    name: "set-pod-defaults",
    description: "Apply pod defaults: a 60s termination grace period where none is set, and, each when switched on, Pod Security labels on namespaces, no automounted service account token, restrictive security contexts, minimum resource requests, probes",
    parameters: |_| {
        vec![
            switch(
                "pod-security",
                "Label namespaces to enforce the baseline and warn of the restricted Pod Security Standard (default false)",
            ),
            switch(
                "automount-service-account-token",
                "Set automountServiceAccountToken: false (default false)",
            ),
            switch(
                "security-context",
                "Set the RuntimeDefault seccomp profile and non-root, read-only, unprivileged containers without capabilities (default false)",
            ),
            switch(
                "resources",
                "Request at least 128m CPU and 128Mi memory per container, without limits (default false)",
            ),
            switch(
                "probes",
                "Add HTTP probes on each container's first port, or a readiness probe copied from its liveness or startup probe (default false)",
            ),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: set_pod_defaults,
    options: Options::DEFAULT,
};

pub static SET_CONTAINER_RESOURCES: Definition = Definition {
    name: "set-container-resources",
    description: "Set the CPU and memory requests of a container (* for every container) that has resources, and limits as a multiple of them",
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
                "all: set; cap: only lower what is set; floor: only raise it",
            )
            .allowed(&["all", "cap", "floor"]),
            ParameterBuilder::new("cpu", DataType::String, "CPU request; empty leaves it")
                .example("500m"),
            ParameterBuilder::new(
                "memory",
                DataType::String,
                "Memory request; empty leaves it",
            )
            .example("256Mi"),
            ParameterBuilder::new(
                "limit-factor",
                DataType::Int,
                "Limits = requests x factor; 0 removes the limits",
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
