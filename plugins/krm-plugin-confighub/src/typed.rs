//! ConfigHub's typed functions (`krm-function-executor`) served as KRM functions, so that kpt
//! and Porch users get them: `set-replicas` over a ResourceList whose functionConfig is a
//! ConfigMap of named arguments (`data: {replicas: "5"}`, strings cast to the parameters'
//! types, as `fctl` sends them).
//!
//! Each answers to `confighub/NAME`, and to the bare `NAME` unless a catalog function of the
//! builtin plugin has that name ([`CATALOG_NAMESAKES`]): there the catalog function keeps the
//! bare name, which Kptfiles and Porch packages already use with the catalog's meaning.
//!
//! The items (local-config ones left out, as the catalog functions leave them) become the
//! unit's documents; an item the function changed is rewritten in place, every other byte of
//! the ResourceList is kept. The output goes to `results`: one per attribute or resource
//! (with its `resourceRef` and field path), or the output's JSON; a failed validation fails
//! the call with its details as error results, as a kpt validator does.

use krm_catalog_function::Limits;
use krm_function_executor::Executor;
use krm_function_executor::Toolchain;
use krm_function_executor::api::{
    AttributeValue, FunctionArgument, FunctionInvocation, FunctionInvocationRequest, OutputType,
    ResourceInfo, ValidationResult,
};
use krm_plugin_api::{CallContext, EvalError, EvalResponse, FunctionSignature, quoted};
use serde_json::Value;

use crate::rl::{FnResult, ResourceList};
use crate::yaml::{Doc, Editor, New, NodeId};

/// The prefix every typed function answers to.
pub const PREFIX: &str = "confighub/";

/// The typed functions whose names the builtin plugin's catalog functions have too (the
/// runner's docs/functions.md lists those; its tests check this list against both plugins' listings).
const CATALOG_NAMESAKES: &[&str] = &["search-replace", "set-image", "set-namespace"];

pub struct Typed {
    executor: Executor,
}

impl Typed {
    pub fn new() -> Self {
        Self {
            executor: Executor::kubernetes(),
        }
    }

    /// Whether a catalog function takes the bare `name`.
    fn clashes(name: &str) -> bool {
        CATALOG_NAMESAKES.contains(&name)
    }

    /// The typed function `image` (or a FunctionConfig's goExecutor id) names, if any.
    pub fn find(&self, image: &str) -> Option<&str> {
        let name = match image.strip_prefix(PREFIX) {
            Some(name) => name,
            None if !Self::clashes(image) => image,
            None => return None,
        };
        self.executor
            .function(name)
            .map(|function| function.signature().name())
    }

    /// Whether the typed function `name` (as [`Typed::find`] gives it) is pure: its signature
    /// says Hermetic and Idempotent.
    pub fn is_pure(&self, name: &str) -> bool {
        self.executor.function(name).is_some_and(|function| {
            let typed = &function.signature().typed;
            typed.hermetic && typed.idempotent
        })
    }

    pub fn signatures(&self) -> Vec<FunctionSignature> {
        self.executor
            .functions()
            .map(|function| {
                let signature = function.signature();
                let mut base = signature.base.clone();
                base.pure = signature.typed.hermetic && signature.typed.idempotent;
                let prefixed = format!("{PREFIX}{}", base.name);
                // A clashing function is listed under the only name it answers to.
                base.images = if Self::clashes(&base.name) {
                    base.name = prefixed.clone();
                    vec![prefixed]
                } else {
                    vec![base.name.clone(), prefixed]
                };
                base
            })
            .collect()
    }

    /// Runs the typed function `name` over a serialized ResourceList.
    pub fn run(
        &self,
        name: &str,
        input: &[u8],
        limits: &Limits,
        context: &CallContext<'_>,
    ) -> Result<EvalResponse, EvalError> {
        let list = ResourceList::parse(input, &limits.stop)
            .map_err(|e| EvalError::invalid_input(format!("{name}: {e}")))?;
        let doc = &list.doc;
        let items: Vec<NodeId> = list
            .items
            .iter()
            .copied()
            .filter(|&item| !list.obj(item).is_local_config())
            .collect();
        let documents: Vec<String> = items.iter().map(|&item| item_text(doc, item)).collect();
        let request = FunctionInvocationRequest {
            config_data: documents.join("---\n").into_bytes(),
            cast_string_args_to_scalars: true,
            combine_validation_results: true,
            function_invocations: vec![FunctionInvocation::new(name, arguments(&list, name)?)],
            ..FunctionInvocationRequest::default()
        };
        let response = self
            .executor
            .invoke_within(&request, context)
            .map_err(|e| EvalError::invalid_input(format!("{name}: {e}")))?;

        let mut ed = Editor::default();
        let changed = response.config_data != request.config_data;
        if changed {
            let text = String::from_utf8_lossy(&response.config_data);
            let unit = Toolchain::KubernetesYaml.parse(&text).map_err(|e| {
                EvalError::failed(format!("{name}: produced data that does not parse: {e}"))
            })?;
            let after: Vec<&str> = unit.elements.iter().map(|e| unit.element_text(e)).collect();
            rewrite_items(&list, &mut ed, &items, &documents, &after)
                .map_err(|e| EvalError::failed(format!("{name}: {e}")))?;
        }
        let mut results: Vec<FnResult> = response
            .error_messages
            .iter()
            .map(|message| FnResult::error(message.clone()))
            .collect();
        let verdict = output_results(&response.output, response.output_type, &mut results);
        if verdict == Some(false) && name == "no-placeholders" {
            // ConfigHub's Kubernetes no-placeholders answers the verdict alone; a kpt user
            // is told where the placeholders are, as get-placeholders lists them.
            let listing = FunctionInvocationRequest {
                function_invocations: vec![FunctionInvocation::new("get-placeholders", Vec::new())],
                ..request.clone()
            };
            let found = self
                .executor
                .invoke_within(&listing, context)
                .map_err(|e| EvalError::invalid_input(format!("{name}: {e}")))?;
            let mut placeholders = Vec::new();
            output_results(&found.output, found.output_type, &mut placeholders);
            results.extend(placeholders.into_iter().map(|mut result| {
                result.severity = Some("error");
                result
            }));
        }
        crate::rl::write_results(&list, &mut ed, results, None);
        let output = ed.finish(doc).into_bytes();
        if let Some(reason) = limits.interruption(output.len()) {
            return Err(EvalError::new(
                krm_plugin_api::ErrorKind::ResourceExhausted,
                format!("{name}: {reason}"),
            ));
        }
        // The executor's messages name the function already.
        let failure = if !response.success {
            Some(response.error_messages.join("; "))
        } else if verdict == Some(false) {
            Some(format!("{name}: validation failed"))
        } else {
            None
        };
        match failure {
            None => Ok(EvalResponse::new(output, Vec::new())),
            Some(message) => {
                let log = format!("{message}\n").into_bytes();
                Err(EvalError::failed(message).with_output(output, log))
            }
        }
    }
}

impl Default for Typed {
    fn default() -> Self {
        Self::new()
    }
}

/// The functionConfig as named arguments: a ConfigMap's `data`.
fn arguments(list: &ResourceList, name: &str) -> Result<Vec<FunctionArgument>, EvalError> {
    let Some(config) = list.function_config else {
        return Ok(Vec::new());
    };
    let doc = &list.doc;
    if doc.get_str(config, &["kind"]) != Some("ConfigMap") {
        return Err(EvalError::invalid_input(format!(
            "{name}: functionConfig must be a ConfigMap whose data holds the arguments by \
             parameter name, not kind {}",
            quoted(doc.get_str(config, &["kind"]).unwrap_or_default())
        )));
    }
    let Some(data) = doc.get(config, "data").filter(|&data| !doc.is_null(data)) else {
        return Ok(Vec::new());
    };
    doc.entries(data)
        .iter()
        .map(|&(key, value)| {
            let key = doc.str(key).unwrap_or_default();
            match doc.str(value) {
                Some(value) => Ok(FunctionArgument::named(key, value)),
                None => Err(EvalError::invalid_input(format!(
                    "{name}: functionConfig data {} is not a string",
                    quoted(key)
                ))),
            }
        })
        .collect()
}

/// An item's text as a document of its own: its lines, out-dented from the item's column.
/// Items written in flow style become their JSON (which is YAML).
fn item_text(doc: &Doc, item: NodeId) -> String {
    let node = doc.node(item);
    if node.flow() {
        return format!("{}\n", doc.to_json(item));
    }
    let text = &doc.src[node.start()..doc.line_end(node.end())];
    let mut out = String::with_capacity(text.len() + 1);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if i == 0 {
            out.push_str(line);
            continue;
        }
        let spaces = line
            .bytes()
            .take(node.col())
            .take_while(|&b| b == b' ')
            .count();
        out.push_str(&line[spaces..]);
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// `document` as the text of an item at column `col` whose first line is already in place.
fn indented(document: &str, col: usize) -> String {
    let pad = " ".repeat(col);
    let mut out = String::with_capacity(document.len() + document.len() / 8);
    for (i, line) in document.split_inclusive('\n').enumerate() {
        if i > 0 && line != "\n" {
            out.push_str(&pad);
        }
        out.push_str(line);
    }
    out
}

/// Writes the changed documents back: item by item when the function kept the number of
/// resources, else the whole `items` list (local-config items first, then the unit's).
fn rewrite_items(
    list: &ResourceList,
    ed: &mut Editor,
    items: &[NodeId],
    before: &[String],
    after: &[&str],
) -> Result<(), String> {
    let doc = &list.doc;
    if items.len() == after.len() {
        for ((&item, old), new) in items.iter().zip(before).zip(after) {
            if old != new {
                let node = doc.node(item);
                if node.flow() {
                    return Err("cannot rewrite an item written in flow style".into());
                }
                ed.replace(
                    node.start(),
                    doc.line_end(node.end()),
                    indented(new, node.col()),
                );
            }
        }
        return Ok(());
    }
    let Some((key, value)) = doc.entry(list.root, "items") else {
        return Err("the ResourceList has no items list to add resources to".into());
    };
    let col = doc.node(key).col();
    let mut text = String::from("items:\n");
    let local = list.items.iter().filter(|item| !items.contains(item));
    for document in local
        .map(|&item| item_text(doc, item))
        .chain(after.iter().map(|&d| d.to_owned()))
    {
        text.push_str(&" ".repeat(col));
        text.push_str("- ");
        text.push_str(&indented(&document, col + 2));
    }
    let end = doc.line_end(doc.node(value).end().max(doc.node(key).end()));
    ed.replace(doc.node(key).start(), end, text);
    Ok(())
}

/// Results for the output; `Some(passed)` when it is a validation verdict.
fn output_results(
    output: &[u8],
    output_type: Option<OutputType>,
    results: &mut Vec<FnResult>,
) -> Option<bool> {
    let output_type = output_type?;
    match output_type {
        OutputType::AttributeValueList => {
            let attributes: Vec<AttributeValue> = serde_json::from_slice(output).ok()?;
            results.extend(attributes.iter().map(attribute_result));
            None
        }
        OutputType::ValidationResult | OutputType::ValidationResultList => {
            let verdicts: Vec<ValidationResult> = match output_type {
                OutputType::ValidationResult => vec![serde_json::from_slice(output).ok()?],
                _ => serde_json::from_slice(output).ok()?,
            };
            let passed = verdicts.iter().all(|v| v.passed);
            for verdict in &verdicts {
                let severity = if verdict.passed { "info" } else { "error" };
                if verdict.passed && verdict.details.is_empty() {
                    results.push(FnResult::info("passed"));
                }
                for detail in &verdict.details {
                    results.push(FnResult::new(detail.clone(), Some(severity)));
                }
                for attribute in &verdict.failed_attributes {
                    let mut result = attribute_result(attribute);
                    result.severity = Some("error");
                    results.push(result);
                }
            }
            Some(passed)
        }
        OutputType::ResourceInfoList => {
            let resources: Vec<ResourceInfo> = serde_json::from_slice(output).ok()?;
            results.extend(resources.iter().map(|resource| FnResult {
                resource_ref: Some(resource_ref(resource)),
                ..FnResult::info(format!(
                    "{} {}",
                    resource.resource_type, resource.resource_name
                ))
            }));
            None
        }
        _ => {
            let value: Value = serde_json::from_slice(output).ok()?;
            if !value.is_null() {
                results.push(FnResult::info(value.to_string()));
            }
            None
        }
    }
}

fn attribute_result(attribute: &AttributeValue) -> FnResult {
    let message = match &attribute.value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    FnResult {
        resource_ref: Some(resource_ref(&attribute.resource)),
        ..FnResult::info(message).field_path(attribute.path.clone())
    }
}

/// A KRM `resourceRef` from ConfigHub's identity (`group/version/Kind`, `namespace/name`).
fn resource_ref(resource: &ResourceInfo) -> New {
    let (api_version, kind) = resource
        .resource_type
        .rsplit_once('/')
        .unwrap_or(("", resource.resource_type.as_str()));
    let (namespace, name) = resource
        .resource_name
        .split_once('/')
        .unwrap_or(("", resource.resource_name.as_str()));
    let mut entries = vec![
        ("apiVersion".to_owned(), New::str(api_version)),
        ("kind".to_owned(), New::str(kind)),
        ("name".to_owned(), New::str(name)),
    ];
    if !namespace.is_empty() {
        entries.push(("namespace".to_owned(), New::str(namespace)));
    }
    New::Map(entries)
}
