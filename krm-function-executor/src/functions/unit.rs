//! Functions over the unit as a whole: attributes across resources, namespaces, comments and
//! mutation records.

use std::collections::BTreeMap;

use crate::api::{
    AttributeDetails, AttributeValue, DataType, FunctionArgument, FunctionInvocation, FunctionType,
    OutputType, ResourceInfo, ResourceMutation,
};
use crate::args::ArgValue;
use crate::functions::definition::{
    ALL_TOOLCHAINS, Definition, FunctionKind, KUBERNETES, Options, PROPERTIES, no_parameters,
};
use crate::functions::path_visitor::{EntriesFor, arbitrary_entry, get, scalar, write};
use crate::functions::resources::identified;
use crate::functions::validation::{DEPRECATED_PLACEHOLDER, PLACEHOLDER_INT, PLACEHOLDER_STRING};
use crate::functions::{Call, FunctionError, Outcome, Output};
use crate::mutations;
use crate::path::{self, UnresolvedPath};
use crate::registry::{CLUSTER_SCOPED_TYPES, attribute};
use crate::signature::ParameterBuilder;
use crate::toolchain::Toolchain;
use crate::yaml::{Editor, Kind};

fn get_attributes(call: &Call) -> Result<Outcome, FunctionError> {
    let entries_for = |info: &ResourceInfo| {
        call.registry
            .paths_for(attribute::GENERAL, &info.resource_type)
    };
    let found = get(call, &entries_for, &[], None)?;
    Ok(Outcome::output(Output::Attributes(found)))
}

fn get_details(call: &Call) -> Result<Outcome, FunctionError> {
    let entries_for = |info: &ResourceInfo| {
        call.registry
            .paths_for(attribute::DETAIL, &info.resource_type)
    };
    let found = get(call, &entries_for, &[], None)?;
    Ok(Outcome::output(Output::Attributes(found)))
}

/// Whether a value still needs one (a string containing a placeholder, or the integer one),
/// as yamlkit's GetPathsAnyType decides for needed values.
fn is_placeholder(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => {
            s.contains(PLACEHOLDER_STRING) || s.contains(DEPRECATED_PLACEHOLDER)
        }
        other => other.as_i64() == Some(PLACEHOLDER_INT),
    }
}

/// The values of the attributes named that still hold a placeholder.
fn needed(call: &Call, attribute_names: &[&str]) -> Result<Outcome, FunctionError> {
    let entries_for = |info: &ResourceInfo| {
        attribute_names
            .iter()
            .flat_map(|name| call.registry.paths_for(name, &info.resource_type))
            .collect()
    };
    let mut found = get(call, &entries_for, &[], None)?;
    found.retain(|attribute| is_placeholder(&attribute.value));
    Ok(Outcome::output(Output::Attributes(found)))
}

/// The registered needed values that still hold a placeholder (ConfigHub's
/// genericFnGetNeeded: the needed-value registry alone).
fn get_needed(call: &Call) -> Result<Outcome, FunctionError> {
    needed(call, &[attribute::NEEDED])
}

fn get_needed_namespaces(call: &Call) -> Result<Outcome, FunctionError> {
    needed(call, &[attribute::NAMESPACE_REFERENCE])
}

fn get_provided(call: &Call) -> Result<Outcome, FunctionError> {
    let entries_for = |info: &ResourceInfo| {
        call.registry
            .paths_for(attribute::PROVIDED, &info.resource_type)
    };
    // Every provided value, placeholders too, as ConfigHub's genericFnGetProvided gives them.
    let mut found = get(call, &entries_for, &[], Some(DataType::String))?;
    found.extend(live_resource_names(call)?);
    Ok(Outcome::output(Output::Attributes(found)))
}

/// The name of each resource of the request's live state, provided as ConfigHub's
/// genericFnGetProvided provides it: read as Kubernetes resources whatever the toolchain, the
/// `metadata.name` marked InLiveState, its getter `get-resources-of-type` of `v1/ConfigMap`
/// (ConfigHub's own, whatever the resource's type: resolution matches on it).
fn live_resource_names(call: &Call) -> Result<Vec<AttributeValue>, FunctionError> {
    if call.live_state.is_empty() {
        return Ok(Vec::new());
    }
    let text = std::str::from_utf8(call.live_state)
        .map_err(|e| format!("LiveState is not UTF-8 text: {e}"))?;
    let live = Toolchain::KubernetesYaml
        .parse(text)
        .map_err(|e| format!("LiveState: {e}"))?;
    let getter = FunctionInvocation::new(
        "get-resources-of-type",
        vec![FunctionArgument::named("resource-type", "v1/ConfigMap")],
    );
    let mut values = Vec::new();
    for element in &live.elements {
        call.stop_if_cancelled()?;
        let info = element
            .checked_info()
            .map_err(|problem| format!("LiveState: {problem}"))?;
        values.push(AttributeValue {
            resource: info.clone(),
            path: "metadata.name".to_owned(),
            in_live_state: true,
            attribute_name: attribute::RESOURCE_NAME.to_owned(),
            data_type: DataType::String,
            info: Some(AttributeDetails {
                getter_invocation: Some(getter.clone()),
                ..AttributeDetails::default()
            }),
            value: info.resource_name_without_scope.clone().into(),
            comment: String::new(),
        });
    }
    Ok(values)
}

fn set_attributes(call: &Call) -> Result<Outcome, FunctionError> {
    let list = call.arguments.str("attribute-list").unwrap_or_default();
    let attributes: Vec<AttributeValue> = serde_json::from_str(list)
        .map_err(|e| format!("attribute-list is not an AttributeValueList: {e}"))?;
    // ConfigHub's genericSetAttributesFromList sets each through the arbitrary-path setter
    // without upsert.
    write_attributes(call, &attributes, false)
}

/// ConfigHub's normalized name: lower case, every run of other characters than letters and
/// digits one `-`, none at either end.
fn normalized(name: &str) -> String {
    let lower = name.to_lowercase();
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// Fills the placeholders of the identifying names and app labels with
/// `<unit>-<space>` (see [`crate::registry::DEFAULT_NAME_TEMPLATE`]); values that do not hold
/// a placeholder are kept. For AppConfig/Properties the name is `<unit><space>`, the names as
/// they are ([`crate::registry::PROPERTIES_DEFAULT_NAME_TEMPLATE`]): propkit's NormalizeName
/// keeps every character and its name separator is empty.
fn set_default_names(call: &Call) -> Result<Outcome, FunctionError> {
    let context = call.context;
    let unit = if context.unit_slug.is_empty() {
        &context.unit_display_name
    } else {
        &context.unit_slug
    };
    let (unit, space, separator) = match call.toolchain {
        Toolchain::KubernetesYaml => (normalized(unit), normalized(&context.space_slug), "-"),
        Toolchain::AppConfigProperties => (unit.clone(), context.space_slug.clone(), ""),
    };
    if unit.is_empty() || space.is_empty() {
        return Err(format!(
            "the default name is <unit>{separator}<space>, but the context has no usable {} \
             (UnitSlug or UnitDisplayName, SpaceSlug)",
            if unit.is_empty() {
                "unit name"
            } else {
                "space name"
            }
        )
        .into());
    }
    let name = format!("{unit}{separator}{space}");
    let entries_for = |info: &ResourceInfo| {
        call.registry
            .paths_for(attribute::DEFAULT_NAME, &info.resource_type)
    };
    let mut found = get(call, &entries_for, &[], None)?;
    found.retain_mut(|attribute| match &attribute.value {
        serde_json::Value::String(value) if value.contains(PLACEHOLDER_STRING) => {
            attribute.value = value.replace(PLACEHOLDER_STRING, &name).into();
            true
        }
        _ => false,
    });
    write_attributes(call, &found, true)
}

/// Puts the placeholder back into every string or integer at a path whose recorded mutation
/// has its predicate set: the values last set by the mutations chosen are unset again. Other
/// values (booleans, maps, lists, missing paths) are left alone.
fn reset(call: &Call) -> Result<Outcome, FunctionError> {
    let list = call
        .arguments
        .str("mutation-predicates")
        .unwrap_or_default();
    let predicates: Vec<ResourceMutation> = serde_json::from_str(list)
        .map_err(|e| format!("mutation-predicates is not a ResourceMutationList: {e}"))?;
    // Resources are matched by type and name without scope, as ConfigHub does.
    let mut chosen: BTreeMap<(&str, &str), Vec<UnresolvedPath>> = BTreeMap::new();
    for (i, mutation) in predicates.iter().enumerate() {
        let resource = &mutation.resource;
        let name = if resource.resource_name_without_scope.is_empty() {
            resource
                .resource_name
                .rsplit('/')
                .next()
                .unwrap_or_default()
        } else {
            &resource.resource_name_without_scope
        };
        for (path, info) in &mutation.path_mutation_map {
            if !info.predicate {
                continue;
            }
            let path = UnresolvedPath::parse(path)
                .map_err(|e| format!("mutation-predicates {i} ({name}): {e}"))?;
            chosen
                .entry((&resource.resource_type, name))
                .or_default()
                .push(path);
        }
    }
    let doc = &call.unit.doc;
    let mut attributes = Vec::new();
    for element in &call.unit.elements {
        call.stop_if_cancelled()?;
        let Ok(info) = element.checked_info() else {
            continue;
        };
        let key = (
            info.resource_type.as_str(),
            info.resource_name_without_scope.as_str(),
        );
        for path in chosen.get(&key).into_iter().flatten() {
            for found in path::resolve(doc, element.root, path, false) {
                let Some(node) = found.node else { continue };
                let (value, data_type) = match scalar(doc, node) {
                    Ok((serde_json::Value::String(_), _)) => {
                        (PLACEHOLDER_STRING.into(), DataType::String)
                    }
                    Ok((serde_json::Value::Number(n), _)) if n.is_i64() => {
                        (PLACEHOLDER_INT.into(), DataType::Int)
                    }
                    _ => continue,
                };
                attributes.push(AttributeValue {
                    resource: info.clone(),
                    path: found.path,
                    in_live_state: false,
                    attribute_name: attribute::GENERAL.to_owned(),
                    data_type,
                    info: None,
                    value,
                    comment: String::new(),
                });
            }
        }
    }
    write_attributes(call, &attributes, true)
}

/// Sets every field that refers to a resource of the given type by name (container env and
/// volumes, service account names, role binding subjects, Ingress backends and TLS
/// secrets, ...; namespaces: every namespace field and reference) to the given name. Fields
/// are only changed, never added.
fn set_references_of_type(call: &Call) -> Result<Outcome, FunctionError> {
    let referenced = call.arguments.str("resource-type").unwrap_or_default();
    let name = call.arguments.str("resource-name").unwrap_or_default();
    let attribute_name = if referenced == "v1/Namespace" {
        attribute::NAMESPACE_REFERENCE.to_owned()
    } else {
        attribute::references_to(referenced)
    };
    if call.registry.attribute(&attribute_name).is_none() {
        let mut known: Vec<String> = call
            .registry
            .attributes()
            .filter_map(|(attribute, _)| attribute.strip_prefix("resource-name/"))
            .map(str::to_owned)
            .collect();
        known.push("v1/Namespace".to_owned());
        known.sort();
        return Err(format!(
            "no references to resources of type {referenced} are known (known: {})",
            known.join(", ")
        )
        .into());
    }
    let entries_for = |info: &ResourceInfo| {
        call.registry
            .paths_for(&attribute_name, &info.resource_type)
    };
    let mut editor = Editor::default();
    let edits = write(
        call,
        &mut editor,
        &entries_for,
        &[],
        &ArgValue::String(name.to_owned()),
        false,
    )?;
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(&call.unit.doc)),
        output: None,
    })
}

/// Writes each attribute's value at its resource and path, creating missing keys when
/// `upsert`. A path is what the arbitrary-path setters take: a registered one keeps its
/// accessor (`...image#uri`).
/// The value an attribute sets, by its DataType as ConfigHub's genericSetAttributesFromList
/// takes it: a string, a JSON number rounded to an int (half away from zero, math.Round), a
/// boolean; a value of another kind than its type, or another type, is refused.
fn attribute_value(attribute: &AttributeValue) -> Result<ArgValue, String> {
    use serde_json::Value;
    let wrong = || {
        format!(
            "value of attribute {} is not {}: {}",
            attribute.attribute_name,
            attribute.data_type.as_str(),
            attribute.value
        )
    };
    match (&attribute.data_type, &attribute.value) {
        (DataType::String, Value::String(s)) => Ok(ArgValue::String(s.clone())),
        (DataType::Bool, Value::Bool(b)) => Ok(ArgValue::Bool(*b)),
        (DataType::Int, Value::Number(n)) => match n.as_i64() {
            Some(i) => Ok(ArgValue::Int(i)),
            None => n
                .as_f64()
                .map(f64::round)
                .filter(|r| (-(2f64.powi(63))..2f64.powi(63)).contains(r))
                // In range, checked just above.
                .map(|r| ArgValue::Int(r as i64))
                .ok_or_else(|| format!("{}: out of the range of an int", wrong())),
        },
        (DataType::String | DataType::Bool | DataType::Int, _) => Err(wrong()),
        (other, _) => Err(format!("unsupported data type {}", other.as_str())),
    }
}

fn write_attributes(
    call: &Call,
    attributes: &[AttributeValue],
    upsert: bool,
) -> Result<Outcome, FunctionError> {
    let mut editor = Editor::default();
    let mut edits = 0;
    let mut problems = Vec::new();
    for (i, attribute) in attributes.iter().enumerate() {
        let value = match attribute_value(attribute) {
            Ok(value) => value,
            Err(problem) => {
                problems.push(format!("attribute {i} ({}): {problem}", attribute.path));
                continue;
            }
        };
        let entry = match arbitrary_entry(
            call.registry,
            &attribute.resource.resource_type,
            &attribute.path,
            DataType::None,
        ) {
            Ok(entry) => entry,
            Err(problem) => {
                problems.push(format!("attribute {i}: {problem}"));
                continue;
            }
        };
        let target = &attribute.resource;
        let entries_for = |info: &ResourceInfo| {
            if info.resource_type == target.resource_type
                && info.resource_name == target.resource_name
            {
                vec![&entry]
            } else {
                Vec::new()
            }
        };
        let entries: EntriesFor = &entries_for;
        match write(call, &mut editor, entries, &[], &value, upsert) {
            Ok(0)
                if !call.unit.elements.iter().any(|e| {
                    e.info.resource_type == target.resource_type
                        && e.info.resource_name == target.resource_name
                }) =>
            {
                problems.push(format!(
                    "attribute {i}: no resource {} {}",
                    target.resource_type, target.resource_name
                ))
            }
            Ok(count) => edits += count,
            Err(problem) => problems.push(format!("attribute {i}: {problem}")),
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(&call.unit.doc)),
        output: None,
    })
}

fn ensure_namespaces(call: &Call) -> Result<Outcome, FunctionError> {
    let doc = &call.unit.doc;
    let mut editor = Editor::default();
    let mut edits = 0;
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        if CLUSTER_SCOPED_TYPES.contains(&info.resource_type.as_str()) {
            continue;
        }
        let namespace = vec![("namespace".to_owned(), PLACEHOLDER_STRING.to_owned())];
        edits += editor.ensure_map(doc, element.root, &["metadata"], &namespace, false);
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

/// The span of a block-mapping entry's lines, when the entry starts its own line.
pub(crate) fn entry_lines(
    doc: &crate::yaml::Doc,
    key: crate::yaml::NodeId,
    value: crate::yaml::NodeId,
) -> Option<(usize, usize)> {
    let start = doc.line_start(doc.node(key).start());
    let own_line = doc.src[start..doc.node(key).start()]
        .chars()
        .all(|c| c == ' ');
    let in_flow = doc
        .node(key)
        .parent()
        .is_some_and(|map| doc.node(map).flow());
    (own_line && !in_flow).then(|| {
        (
            start,
            doc.line_end(doc.node(value).end().max(doc.node(key).end())),
        )
    })
}

/// Records the unit's slug and the space's ID in every resource, where the toolchain keeps
/// them ([`Toolchain::context_keys`]), or removes them (and any revision number).
fn ensure_context(call: &Call) -> Result<Outcome, FunctionError> {
    let add = call
        .arguments
        .get("add-context")
        .and_then(ArgValue::as_bool)
        .unwrap_or(true);
    let doc = &call.unit.doc;
    let keys = call.toolchain.context_keys();
    let context = [
        (keys.unit_slug, call.context.unit_slug.clone()),
        (keys.space_id, call.context.space_id.clone()),
    ];
    let mut editor = Editor::default();
    let mut edits = 0;
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        if add {
            let entries: Vec<(String, String)> = context
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect();
            edits += editor.ensure_map(doc, element.root, keys.mapping, &entries, true);
            continue;
        }
        let Some(mapping) = doc.get_path(element.root, keys.mapping) else {
            continue;
        };
        let removed = [keys.unit_slug, keys.space_id, keys.revision_num];
        let ours: Vec<_> = doc
            .entries(mapping)
            .iter()
            .filter(|&&(k, _)| doc.str(k).is_some_and(|key| removed.contains(&key)))
            .copied()
            .collect();
        if ours.is_empty() {
            continue;
        }
        let unwritable = || {
            format!(
                "{} {}: {} is not written one entry per line; not edited",
                info.resource_type,
                info.resource_name,
                keys.mapping.join(".")
            )
        };
        if ours.len() == doc.entries(mapping).len() {
            // Nothing else is in the mapping: it stays, empty, as ConfigHub's DeleteP of each
            // key leaves it.
            let Some((last, parent_path)) = keys.mapping.split_last() else {
                return Err(unwritable().into());
            };
            let parent = doc
                .get_path(element.root, parent_path)
                .unwrap_or(element.root);
            let (key, _) = doc.entry(parent, last).ok_or_else(unwritable)?;
            let (start, end) = entry_lines(doc, key, mapping).ok_or_else(unwritable)?;
            let key_text = &doc.src[start..doc.node(key).end()];
            editor.replace(start, end, format!("{key_text}: {{}}\n"));
        } else {
            for (key, value) in ours {
                let (start, end) = entry_lines(doc, key, value).ok_or_else(unwritable)?;
                editor.replace(start, end, String::new());
            }
        }
        edits += 1;
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

fn set_path_comment(call: &Call) -> Result<Outcome, FunctionError> {
    let resource_type = call.arguments.str("resource-type").unwrap_or_default();
    let comment = call.arguments.str("comment").unwrap_or_default();
    if comment.contains(['\n', '\r']) {
        return Err("comment must be one line".into());
    }
    let path = UnresolvedPath::parse(call.arguments.str("path").unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let doc = &call.unit.doc;
    let mut editor = Editor::default();
    let mut edits = 0;
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        if resource_type != "*" && info.resource_type != resource_type {
            continue;
        }
        for found in path::resolve(doc, element.root, &path, false) {
            let Some(node) = found.node else { continue };
            if found.through_alias {
                return Err(format!(
                    "{} {}: path {} goes through an alias; not edited",
                    info.resource_type, info.resource_name, found.path
                )
                .into());
            }
            let written = doc.node(node);
            let on_one_line = matches!(written.kind, Kind::Scalar { .. })
                && !doc.src[written.start()..written.end()].contains('\n');
            if !on_one_line {
                return Err(format!(
                    "{} {}: path {}: only values written on one line take a comment",
                    info.resource_type, info.resource_name, found.path
                )
                .into());
            }
            let rest = doc.rest_of_line(written.end());
            let text = if comment.is_empty() {
                String::new()
            } else {
                format!(" # {comment}")
            };
            editor.replace(written.end(), written.end() + rest.len(), text);
            edits += 1;
        }
    }
    Ok(Outcome {
        text: (edits > 0).then(|| editor.finish(doc)),
        output: None,
    })
}

/// The mutations from the previous data, in the toolchain's own format unless
/// `alreadyConverted` says it is the model already, to the current data.
fn compute_mutations(call: &Call) -> Result<Outcome, FunctionError> {
    let previous = call.arguments.str("config-doc-list").unwrap_or_default();
    let index = call
        .arguments
        .get("functionIndex")
        .and_then(ArgValue::as_int)
        .unwrap_or_default();
    let already_converted = call
        .arguments
        .get("alreadyConverted")
        .and_then(ArgValue::as_bool)
        .unwrap_or(false);
    let model = if already_converted {
        previous.to_owned()
    } else {
        call.toolchain
            .model_of(previous)
            .map_err(|e| format!("config-doc-list is not {} data: {e}", call.toolchain))?
    };
    let before = call
        .parse_model(&model)
        .map_err(|e| format!("config-doc-list does not parse: {e}"))?;
    let index = usize::try_from(index).map_err(|_| format!("functionIndex {index} is negative"))?;
    let changes = mutations::diff(call.toolchain, &before, call.unit, index);
    let value = serde_json::to_value(&changes).map_err(|e| e.to_string())?;
    Ok(Outcome::output(Output::Other(
        OutputType::ResourceMutationList,
        value,
    )))
}

/// The functions over whole units; `toolchain` decides the format of compute-mutations'
/// previous data.
pub static GET_ATTRIBUTES: Definition = Definition {
    name: "get-attributes",
    description: "Get the attributes registered as general attributes (replicas, images, namespaces, host names) with their getters and setters",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "attribute",
        description: "Attributes",
        output: OutputType::AttributeValueList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_attributes,
    options: Options::DEFAULT,
};

pub static GET_DETAILS: Definition = Definition {
    name: "get-details",
    description: "Get the descriptive facts of the unit (replicas, image repositories and references, Service types and ports), each with its description",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "attribute",
        description: "Details",
        output: OutputType::AttributeValueList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_details,
    options: Options::DEFAULT,
};

pub static GET_NEEDED: Definition = Definition {
    name: "get-needed",
    description: "Get the general attributes (replicas, images, namespaces, host names) that still hold a placeholder, with their setters",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "attribute",
        description: "Attributes that need a value",
        output: OutputType::AttributeValueList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_needed,
    options: Options::DEFAULT,
};

pub static GET_NEEDED_NAMESPACES: Definition = Definition {
    name: "get-needed-namespaces",
    description: "Get the namespace fields and references that still hold a placeholder",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "namespace-name",
        description: "Namespace attributes that need a value",
        output: OutputType::AttributeValueList,
    },
    toolchains: KUBERNETES,
    run: get_needed_namespaces,
    options: Options {
        function_type: FunctionType::PathVisitor,
        attribute_name: attribute::NAMESPACE_REFERENCE,
        ..Options::DEFAULT
    },
};

pub static GET_PROVIDED: Definition = Definition {
    name: "get-provided",
    description: "Get the names this unit provides to others (namespaces, service accounts, config maps, secrets, services, ...)",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "attribute",
        description: "Provided values",
        output: OutputType::AttributeValueList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_provided,
    options: Options::DEFAULT,
};

pub static SET_ATTRIBUTES: Definition = Definition {
    name: "set-attributes",
    description: "Write each attribute of an AttributeValueList at its resource and path, creating missing keys",
    parameters: |_| {
        vec![ParameterBuilder::new(
            "attribute-list",
            DataType::AttributeValueList,
            "Attributes to write, as returned by a getter",
        )]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: set_attributes,
    options: Options::DEFAULT,
};

pub static SET_DEFAULT_NAMES: Definition = Definition {
    name: "set-default-names",
    description: "Fill the resource names and app labels still holding the placeholder confighubplaceholder with <unit>-<space> (the unit's and the space's normalized names)",
    parameters: no_parameters,
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: set_default_names,
    options: Options {
        attribute_name: attribute::DEFAULT_NAME,
        ..Options::DEFAULT
    },
};

pub static RESET: Definition = Definition {
    name: "reset",
    description: "Set the strings and integers last set by the mutations whose predicate is true back to their placeholders (confighubplaceholder, 999999999)",
    parameters: |_| {
        vec![ParameterBuilder::new(
            "mutation-predicates",
            DataType::ResourceMutationList,
            "Mutations, with Predicate true on the paths to reset",
        )]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: reset,
    options: Options::DEFAULT,
};

pub static SET_REFERENCES_OF_TYPE: Definition = Definition {
    name: "set-references-of-type",
    description: "Set every field that refers by name to a resource of the given type (e.g. v1/ConfigMap, v1/Secret, v1/ServiceAccount, v1/Service, v1/PersistentVolumeClaim, v1/Namespace) to the given name",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "resource-type",
                DataType::String,
                "Type (apiVersion/kind) of the resources referred to",
            )
            .example("v1/ConfigMap"),
            ParameterBuilder::new(
                "resource-name",
                DataType::String,
                "Name to set in the references",
            )
            .example("settings"),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: set_references_of_type,
    options: Options::DEFAULT,
};

pub static ENSURE_NAMESPACES: Definition = Definition {
    name: "ensure-namespaces",
    description: "Add metadata.namespace: confighubplaceholder to namespaced resources without a namespace",
    parameters: no_parameters,
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: ensure_namespaces,
    options: Options::DEFAULT,
};

pub static ENSURE_CONTEXT_KUBERNETES: Definition = Definition {
    name: "ensure-context",
    description: "Add (or, with false, remove) the annotations confighub.com/UnitSlug and confighub.com/SpaceID on every resource",
    parameters: ensure_context_parameters,
    kind: FunctionKind::Mutating,
    toolchains: KUBERNETES,
    run: ensure_context,
    options: Options::DEFAULT,
};

pub static ENSURE_CONTEXT_PROPERTIES: Definition = Definition {
    name: "ensure-context",
    description: "Add (or, with false, remove) the properties configHub.unitSlug and configHub.spaceID",
    parameters: ensure_context_parameters,
    kind: FunctionKind::Mutating,
    toolchains: PROPERTIES,
    run: ensure_context,
    options: Options::DEFAULT,
};

fn ensure_context_parameters(_: Toolchain) -> Vec<ParameterBuilder> {
    vec![
        ParameterBuilder::new(
            "add-context",
            DataType::Bool,
            "Add the context (true) or remove it (false)",
        )
        .example("true"),
    ]
}

pub static SET_PATH_COMMENT: Definition = Definition {
    name: "set-path-comment",
    description: "Put a line comment on the values at a path (an empty comment removes it)",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "resource-type",
                DataType::String,
                "Resource type (apiVersion/kind), * for any",
            )
            .example("apps/v1/Deployment"),
            ParameterBuilder::new("path", DataType::String, "Path of the values")
                .example("spec.replicas"),
            ParameterBuilder::new("comment", DataType::String, "Comment text, without #"),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: set_path_comment,
    options: Options::DEFAULT,
};

pub static COMPUTE_MUTATIONS: Definition = Definition {
    name: "compute-mutations",
    description: "Compute the mutations from the given previous data to the current data",
    parameters: |toolchain| {
        vec![
            ParameterBuilder::new(
                "config-doc-list",
                toolchain.data_type(),
                "Previous data, in the toolchain's own format",
            ),
            ParameterBuilder::new(
                "functionIndex",
                DataType::Int,
                "Index recorded with the mutations",
            ),
            ParameterBuilder::new(
                "alreadyConverted",
                DataType::Bool,
                "The previous data is already the YAML model",
            )
            .optional(),
        ]
    },
    kind: FunctionKind::Readonly {
        result: "mutations",
        description: "Mutations",
        output: OutputType::ResourceMutationList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: compute_mutations,
    options: Options::DEFAULT,
};
