//! Whole-resource functions: listing and deleting resources.

use krm_plugin_api::quoted;

use crate::api::{DataType, OutputType, Resource, ResourceInfo};
use crate::functions::definition::{ALL_TOOLCHAINS, Definition, FunctionKind, Options};
use crate::functions::{Call, FunctionError, Outcome, Output};
use crate::resource::Element;
use crate::signature::ParameterBuilder;

/// The identities of every element, or the problems of those without one.
pub fn identified<'u>(
    call: &'u Call,
) -> Result<Vec<(&'u Element, &'u ResourceInfo)>, FunctionError> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for element in &call.unit.elements {
        match element.checked_info() {
            Ok(info) => found.push((element, info)),
            Err(problem) => problems.push(problem),
        }
    }
    if problems.is_empty() {
        Ok(found)
    } else {
        Err(FunctionError::Failed(problems.join("; ")))
    }
}

fn get_resources(call: &Call) -> Result<Outcome, FunctionError> {
    let body = call.arguments.str("body").unwrap_or("yaml");
    let mut resources = Vec::new();
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        let resource_body = match body {
            "none" => String::new(),
            // kyaml's MarshalJSON, which ConfigHub's body is, goes through json.Marshal.
            "json" => crate::go_json::to_vec(&call.unit.doc.to_json(element.root))
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .map_err(|e| format!("{}: cannot render as JSON: {e}", info.resource_name))?,
            "native" => call
                .toolchain
                .native_text(call.unit, element)
                .map_err(|e| {
                    format!(
                        "{}: cannot render as {}: {e}",
                        info.resource_name, call.toolchain
                    )
                })?,
            _ => call.unit.element_text(element).to_owned(),
        };
        resources.push(Resource {
            info: info.clone(),
            resource_body,
        });
    }
    Ok(Outcome::output(Output::Resources(resources)))
}

fn get_resources_of_type(call: &Call) -> Result<Outcome, FunctionError> {
    let wanted = call.arguments.str("resource-type").unwrap_or_default();
    let infos = identified(call)?
        .into_iter()
        .filter(|(_, info)| info.resource_type == wanted)
        .map(|(_, info)| info.clone())
        .collect();
    Ok(Outcome::output(Output::ResourceInfos(infos)))
}

/// Whether `name` names the resource: `namespace/name`, or `name` alone.
fn names(info: &ResourceInfo, name: &str) -> bool {
    info.resource_name == name || (!name.contains('/') && info.resource_name_without_scope == name)
}

fn delete_resource(call: &Call) -> Result<Outcome, FunctionError> {
    let resource_type = call.arguments.str("resource-type").unwrap_or_default();
    let resource_name = call.arguments.str("resource-name").unwrap_or_default();
    let (element, _) = identified(call)?
        .into_iter()
        .find(|(_, info)| info.resource_type == resource_type && names(info, resource_name))
        .ok_or_else(|| {
            format!(
                "resource with type {} and name {} not found",
                quoted(resource_type).bounded(),
                quoted(resource_name).bounded()
            )
        })?;
    let (start, end) = call.unit.removal_span(element);
    let src = call.unit.doc.src;
    Ok(Outcome::text(format!("{}{}", &src[..start], &src[end..])))
}

fn upsert_resource(call: &Call) -> Result<Outcome, FunctionError> {
    let list = call.arguments.str("resource-list").unwrap_or_default();
    let resource_type = call.arguments.str("resource-type").unwrap_or_default();
    let resource_name = call.arguments.str("resource-name").unwrap_or_default();
    let resources: Vec<Resource> = serde_json::from_str(list)
        .map_err(|e| format!("resource-list is not a ResourceList: {e}"))?;
    let wanted =
        |info: &ResourceInfo| info.resource_type == resource_type && names(info, resource_name);
    let resource = resources.iter().find(|r| wanted(&r.info)).ok_or_else(|| {
        format!(
            "resource-list has no {} {}",
            quoted(resource_type).bounded(),
            quoted(resource_name).bounded()
        )
    })?;
    // The body is the YAML model, as get-resources gives it by default (ConfigHub parses it
    // as YAML whatever the toolchain).
    let body = call.parse_model(&resource.resource_body).map_err(|e| {
        format!(
            "the body of {} {} does not parse: {e}",
            quoted(resource_type).bounded(),
            quoted(resource_name).bounded()
        )
    })?;
    match body.elements.as_slice() {
        [element] if element.checked_info().is_ok_and(&wanted) => {}
        _ => {
            return Err(format!(
                "the body of {} {} must be that one resource",
                quoted(resource_type).bounded(),
                quoted(resource_name).bounded()
            )
            .into());
        }
    }
    let mut text = body.element_text(&body.elements[0]).to_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let src = call.unit.doc.src;
    call.check_output_size(
        src.len().saturating_add(text.len()),
        "the unit after upsert-resource",
    )?;
    let existing = identified(call)?
        .into_iter()
        .find(|(_, info)| wanted(info))
        .map(|(element, _)| element);
    let updated = match existing {
        Some(element) => {
            let node = call.unit.doc.node(element.root);
            let start = call.unit.doc.line_start(node.start());
            let end = call.unit.doc.line_end(node.end());
            format!("{}{text}{}", &src[..start], &src[end..])
        }
        None if call.unit.elements.is_empty() => text,
        None => {
            let separator = if src.ends_with('\n') { "" } else { "\n" };
            format!("{src}{separator}---\n{text}")
        }
    };
    Ok(Outcome::text(updated))
}

/// Replaces the resource with `replicas` copies named `<name>0`, `<name>1`, ... (as
/// ConfigHub does; 0 removes it). Resources are matched by name without namespace.
fn replicate(call: &Call) -> Result<Outcome, FunctionError> {
    let resource_type = call.arguments.str("resource-type").unwrap_or_default();
    let resource_name = call.arguments.str("resource-name").unwrap_or_default();
    let category = call
        .arguments
        .str("resource-category")
        .unwrap_or(call.toolchain.default_category());
    let replicas = call
        .arguments
        .get("replicas")
        .and_then(crate::args::ArgValue::as_int)
        .unwrap_or_default();
    let replicas =
        usize::try_from(replicas).map_err(|_| format!("replicas {replicas} is negative"))?;
    let Some((element, info)) = identified(call)?.into_iter().find(|(_, info)| {
        info.resource_category == category
            && info.resource_type == resource_type
            && info.resource_name_without_scope == resource_name
    }) else {
        return Ok(Outcome::default());
    };
    if replicas == 0 {
        let (start, end) = call.unit.removal_span(element);
        let src = call.unit.doc.src;
        return Ok(Outcome::text(format!("{}{}", &src[..start], &src[end..])));
    }
    let text = call.unit.element_text(element);
    let copy = call
        .parse_model(text)
        .map_err(|e| format!("{}: {e}", info.resource_name))?;
    let name_path = call.toolchain.name_path();
    let name_node = copy
        .elements
        .first()
        .and_then(|e| copy.doc.get_path(e.root, name_path));
    let Some(name_node) = name_node else {
        return Err(format!(
            "{} {}: no {} to make unique",
            info.resource_type,
            info.resource_name,
            name_path.join(".")
        )
        .into());
    };
    // Each copy is the resource with a longer name and a separator; all of them are counted
    // before the first is built.
    let name_growth = replicas.to_string().len() + 1;
    let copy_bytes = text.len() + name_growth + "\n---\n".len();
    call.check_output_size(
        (call.unit.doc.src.len() - text.len()).saturating_add(replicas.saturating_mul(copy_bytes)),
        &format!(
            "the unit with {replicas} copies of {}",
            quoted(resource_name).bounded()
        ),
    )?;
    let mut copies = Vec::with_capacity(replicas);
    for index in 0..replicas {
        call.stop_if_cancelled()?;
        let mut editor = crate::yaml::Editor::default();
        editor.set_scalar(
            &copy.doc,
            name_node,
            &format!("{resource_name}{index}"),
            true,
        );
        let mut renamed = editor.finish(&copy.doc);
        if !renamed.ends_with('\n') {
            renamed.push('\n');
        }
        copies.push(renamed);
    }
    let doc = &call.unit.doc;
    let node = doc.node(element.root);
    let start = doc.line_start(node.start());
    let end = doc.line_end(node.end());
    let replacement = copies.join("---\n");
    Ok(Outcome::text(format!(
        "{}{replacement}{}",
        &doc.src[..start],
        &doc.src[end..]
    )))
}

fn resource_type() -> ParameterBuilder {
    ParameterBuilder::new(
        "resource-type",
        DataType::String,
        "Resource type (apiVersion/kind)",
    )
    .example("apps/v1/Deployment")
}

fn resource_name() -> ParameterBuilder {
    ParameterBuilder::new(
        "resource-name",
        DataType::String,
        "Name (namespace/name, or name)",
    )
    .example("prod/web")
}

pub static GET_RESOURCES: Definition = Definition {
    name: "get-resources",
    description: "Get the names, types and bodies of the resources",
    parameters: |_| {
        vec![
            ParameterBuilder::new("body", DataType::Enum, "Form of the resource bodies")
                .allowed(&["yaml", "none", "json", "native"])
                .optional(),
        ]
    },
    kind: FunctionKind::Readonly {
        result: "resource",
        description: "Resources",
        output: OutputType::ResourceList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_resources,
    options: Options::DEFAULT,
};

pub static GET_RESOURCES_OF_TYPE: Definition = Definition {
    name: "get-resources-of-type",
    description: "Get the names and types of the resources of one type",
    parameters: |_| vec![resource_type()],
    kind: FunctionKind::Readonly {
        result: "resource-name",
        description: "Resources of the type",
        output: OutputType::ResourceInfoList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_resources_of_type,
    options: Options::DEFAULT,
};

pub static UPSERT_RESOURCE: Definition = Definition {
    name: "upsert-resource",
    description: "Add the resource of the given type and name from a ResourceList, or replace it",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "resource-list",
                DataType::ResourceList,
                "ResourceList holding the resource, as get-resources returns",
            ),
            resource_type(),
            resource_name(),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: upsert_resource,
    options: Options::DEFAULT,
};

pub static REPLICATE: Definition = Definition {
    name: "replicate",
    description: "Replicate the specified resource replicas minus one times; the copies are named <name>0, <name>1, ...",
    parameters: |_| {
        vec![
                    resource_type(),
                    ParameterBuilder::new(
                        "resource-name",
                        DataType::String,
                        "Name of the resource, without namespace",
                    )
                    .example("web"),
                    ParameterBuilder::new(
                        "replicas",
                        DataType::Int,
                        "Desired number of copies of the resource",
                    )
                    .example("3"),
                    ParameterBuilder::new(
                        "resource-category",
                        DataType::String,
                        "Category of the resource (default: Resource for Kubernetes, AppConfig for properties)",
                    )
                    .optional(),
                ]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: replicate,
    options: Options::DEFAULT,
};

pub static DELETE_RESOURCE: Definition = Definition {
    name: "delete-resource",
    description: "Delete the resource of the given type and name",
    parameters: |_| vec![resource_type(), resource_name()],
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: delete_resource,
    options: Options {
        // Deleting twice fails the second time.
        idempotent: false,
        ..Options::DEFAULT
    },
};
