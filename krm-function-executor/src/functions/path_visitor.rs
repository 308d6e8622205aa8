//! Path-visitor functions: every registered attribute yields `get-X` (an AttributeValueList
//! of what its paths hold, each value carrying the getter and setter invocations that read and
//! write it again) and, when it has one, `set-X` (writes the value at every path, creating
//! missing keys when the attribute upserts). The arbitrary-path functions (`get-string-path`,
//! `set-int-path`, ...) use the same visitor over one ad-hoc path.

use std::collections::HashMap;
use std::sync::Arc;

use krm_plugin_api::quoted;
use regex::Regex;
use serde_json::Value;

use crate::api::{
    AttributeValue, DataType, FunctionArgument, FunctionOutput, FunctionType, OutputType,
    ResourceInfo,
};
use crate::args::ArgValue;
use crate::functions::{Call, FunctionError, Outcome, Output, TypedFunction};
use crate::path::{self, UnresolvedPath};
use crate::registry::{
    ANY_RESOURCE_TYPE, IMAGE_ACCESSOR, PathRegistry, PathVisitorInfo, attribute,
};
use crate::signature::{ParameterBuilder, TypedFacet, TypedSignature};
use crate::yaml::{Doc, Editor, Kind, New, NodeId};

/// Fills the `%s` placeholders of `path` with `arguments` in order, dots in them escaped.
pub fn substitute(path: &str, arguments: &[String]) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    let mut arguments = arguments.iter();
    while let Some(at) = rest.find("%s") {
        out.push_str(&rest[..at]);
        match arguments.next() {
            Some(argument) => out.push_str(&path::escape(argument)),
            None => out.push_str("%s"),
        }
        rest = &rest[at + 2..];
    }
    out.push_str(rest);
    out
}

/// A registered path with its placeholders filled, split from its `#part`.
struct Target<'r> {
    entry: &'r PathVisitorInfo,
    path: UnresolvedPath,
    part: Option<(String, Regex)>,
    /// The one resolution of `path` to visit, when the entry names it.
    only: Option<&'r str>,
}

impl Target<'_> {
    fn visits(&self, resolved: &str) -> bool {
        self.only.is_none_or(|only| only == resolved)
    }
}

/// The targets of each resource type, worked out once per call: a unit holds many resources
/// of few types.
struct TargetsByType<'f, 'r, 'a> {
    entries_for: EntriesFor<'f, 'r>,
    arguments: &'a [String],
    by_type: HashMap<String, Vec<Target<'r>>>,
}

impl<'f, 'r, 'a> TargetsByType<'f, 'r, 'a> {
    fn new(entries_for: EntriesFor<'f, 'r>, arguments: &'a [String]) -> Self {
        Self {
            entries_for,
            arguments,
            by_type: HashMap::new(),
        }
    }

    fn of(&mut self, info: &ResourceInfo) -> Result<&[Target<'r>], String> {
        if !self.by_type.contains_key(&info.resource_type) {
            let targets = targets((self.entries_for)(info), self.arguments)?;
            self.by_type.insert(info.resource_type.clone(), targets);
        }
        Ok(&self.by_type[&info.resource_type])
    }
}

fn targets<'r>(
    entries: Vec<&'r PathVisitorInfo>,
    arguments: &[String],
) -> Result<Vec<Target<'r>>, String> {
    entries
        .into_iter()
        .map(|entry| {
            let filled = substitute(&entry.path, arguments);
            let (path_text, part) = match filled.split_once('#') {
                Some((p, part)) => (p.to_owned(), Some(part.to_owned())),
                None => (filled, None),
            };
            let path = UnresolvedPath::parse(&path_text).map_err(|e| e.to_string())?;
            let part = match part {
                None => None,
                Some(part) => {
                    let regexp = Regex::new(&entry.embedded_accessor_config).map_err(|e| {
                        format!("path {:?}: embedded accessor is invalid: {e}", entry.path)
                    })?;
                    if !regexp.capture_names().any(|n| n == Some(part.as_str())) {
                        return Err(format!(
                            "path {:?}: the embedded accessor has no part {part:?}",
                            entry.path
                        ));
                    }
                    Some((part, regexp))
                }
            };
            let only = (!entry.resolved_path.is_empty())
                .then(|| entry.resolved_path.split('#').next().unwrap_or_default());
            Ok(Target {
                entry,
                path,
                part,
                only,
            })
        })
        .collect()
}

/// The JSON value of a scalar node, or why it is not a scalar of a supported type.
pub(crate) fn scalar(doc: &Doc, node: NodeId) -> Result<(Value, DataType), String> {
    let value = doc.to_json(node);
    let data_type = match &value {
        Value::String(_) => DataType::String,
        Value::Bool(_) => DataType::Bool,
        Value::Number(n) if n.is_i64() => DataType::Int,
        Value::Null => return Err("null".into()),
        Value::Number(_) => return Err("a float".into()),
        Value::Array(_) => return Err("a list".into()),
        Value::Object(_) => return Err("a map".into()),
    };
    Ok((value, data_type))
}

/// The `#part` of a string: empty when the accessor does not match it or the part takes no
/// part in the match, as yamlkit's RegexpAccessor.Extract answers.
fn extract(regexp: &Regex, part: &str, text: &str) -> String {
    regexp
        .captures(text)
        .and_then(|captures| captures.name(part))
        .map_or_else(String::new, |m| m.as_str().to_owned())
}

/// `text` with its `#part` replaced by `value`; `None` where the part is empty or missing,
/// which yamlkit's UpdateStringPaths refuses ("embedded field ... not found").
fn replace_part(regexp: &Regex, part: &str, text: &str, value: &str) -> Option<String> {
    let captures = regexp.captures(text)?;
    let span = captures.name(part).filter(|m| !m.is_empty())?;
    Some(format!(
        "{}{value}{}",
        &text[..span.start()],
        &text[span.end()..]
    ))
}

/// The registered paths to visit in one resource.
/// The registry entries for a resource, which depend on its type alone.
pub type EntriesFor<'f, 'r> = &'f dyn Fn(&ResourceInfo) -> Vec<&'r PathVisitorInfo>;

/// Reads every path `entries_for` gives for each resource (sorted by type, name and path).
pub fn get<'r>(
    call: &Call,
    entries_for: EntriesFor<'_, 'r>,
    arguments: &[String],
    wanted: Option<DataType>,
) -> Result<Vec<AttributeValue>, FunctionError> {
    let doc = &call.unit.doc;
    let mut values = Vec::new();
    let mut problems = Vec::new();
    let mut targets = TargetsByType::new(entries_for, arguments);
    for element in &call.unit.elements {
        call.stop_if_cancelled()?;
        let info = match element.checked_info() {
            Ok(info) => info,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        for target in targets.of(info)? {
            for found in path::resolve(doc, element.root, &target.path, false) {
                let Some(node) = found.node else { continue };
                if !target.visits(&found.path) {
                    continue;
                }
                let (mut value, mut data_type) = match scalar(doc, node) {
                    Ok(scalar) => scalar,
                    Err(what) => {
                        problems.push(format!(
                            "{} {}: value at path {} is {what}",
                            info.resource_type, info.resource_name, found.path
                        ));
                        continue;
                    }
                };
                let mut resolved_path = found.path.clone();
                if let Some((part, regexp)) = &target.part {
                    let Some(text) = value.as_str() else { continue };
                    let extracted = extract(regexp, part, text);
                    value = Value::String(extracted);
                    data_type = DataType::String;
                    resolved_path = format!("{resolved_path}#{part}");
                }
                if let Some(wanted) = wanted
                    && wanted != data_type
                {
                    problems.push(format!(
                        "{} {}: value {value} at path {} is of type {} but expected {}",
                        info.resource_type,
                        info.resource_name,
                        found.path,
                        data_type.as_str(),
                        wanted.as_str()
                    ));
                    continue;
                }
                let mut details = target.entry.info.clone();
                if let Some(details) = &mut details
                    && !found.arguments.is_empty()
                {
                    let bound: Vec<FunctionArgument> = found
                        .arguments
                        .iter()
                        .map(|(name, value)| FunctionArgument::named(name.clone(), value.clone()))
                        .collect();
                    if let Some(getter) = &mut details.getter_invocation {
                        getter.arguments.extend(bound.iter().cloned());
                    }
                    for setter in &mut details.setter_invocations {
                        setter.arguments.extend(bound.iter().cloned());
                    }
                }
                values.push(AttributeValue {
                    resource: info.clone(),
                    path: resolved_path,
                    in_live_state: false,
                    attribute_name: target.entry.attribute_name.clone(),
                    data_type,
                    info: details,
                    value,
                    comment: line_comment(doc, node),
                });
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    // Sorted through their positions: the values themselves are large to move.
    fn sort_key(v: &AttributeValue) -> (&str, &str, &str) {
        (
            &v.resource.resource_type,
            &v.resource.resource_name,
            &v.path,
        )
    }
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| sort_key(&values[a]).cmp(&sort_key(&values[b])));
    let mut slots: Vec<Option<AttributeValue>> = values.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

fn line_comment(doc: &Doc, node: NodeId) -> String {
    let rest = doc.rest_of_line(doc.node(node).end()).trim();
    if rest.starts_with('#') {
        rest.to_owned()
    } else {
        String::new()
    }
}

fn new_value(value: &ArgValue) -> New {
    match value {
        ArgValue::String(s) => New::Str(s.clone()),
        ArgValue::Int(i) => New::Plain(i.to_string()),
        ArgValue::Bool(b) => New::Plain(b.to_string()),
    }
}

fn is_alias(doc: &Doc, node: NodeId) -> bool {
    matches!(doc.node(node).kind, Kind::Alias(_))
}

/// Writes `value` at every path `entries_for` gives, creating missing keys when `upsert`.
/// Returns the new text, or `None` when nothing changed.
pub fn set<'r>(
    call: &Call,
    entries_for: EntriesFor<'_, 'r>,
    arguments: &[String],
    value: &ArgValue,
    upsert: bool,
) -> Result<Option<String>, FunctionError> {
    let mut editor = Editor::default();
    let edits = write(call, &mut editor, entries_for, arguments, value, upsert)?;
    Ok((edits > 0).then(|| editor.finish(&call.unit.doc)))
}

/// Queues the edits of [`set`] in `editor`; returns how many.
pub fn write<'r>(
    call: &Call,
    editor: &mut Editor,
    entries_for: EntriesFor<'_, 'r>,
    arguments: &[String],
    value: &ArgValue,
    upsert: bool,
) -> Result<usize, FunctionError> {
    let doc = &call.unit.doc;
    let mut edits = 0;
    let mut problems = Vec::new();
    let new_json = value.to_json();
    // Every path the value goes to adds it: a long value over many paths multiplies, so the
    // unit's size is counted before each edit is queued.
    let value_bytes = match value {
        ArgValue::String(s) => s.len(),
        ArgValue::Int(_) | ArgValue::Bool(_) => 20,
    };
    let mut size = doc.src.len();
    let mut grow = |missing: &[String]| {
        let keys: usize = missing
            .iter()
            .map(|key| key.len() + 2 * missing.len() + 3)
            .sum();
        size = size.saturating_add(value_bytes).saturating_add(keys);
        call.check_output_size(size, "the unit after the edits")
    };
    let mut targets = TargetsByType::new(entries_for, arguments);
    for element in &call.unit.elements {
        call.stop_if_cancelled()?;
        let info = match element.checked_info() {
            Ok(info) => info,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        let at = |path: &str| format!("{} {}: path {path}", info.resource_type, info.resource_name);
        for target in targets.of(info)? {
            // Parts of scalars are only ever replaced, never created.
            let create = upsert && target.part.is_none();
            for found in path::resolve(doc, element.root, &target.path, create) {
                if !target.visits(&found.path) {
                    continue;
                }
                if found.through_alias {
                    problems.push(format!(
                        "{}: goes through an alias; not edited (it would change the anchor too)",
                        at(&found.path)
                    ));
                    continue;
                }
                let Some(node) = found.node else {
                    grow(&found.missing)?;
                    match create_missing(
                        editor,
                        doc,
                        found.existing,
                        &found.missing,
                        &new_value(value),
                    ) {
                        Ok(()) => edits += 1,
                        Err(problem) => problems.push(format!("{}: {problem}", at(&found.path))),
                    }
                    continue;
                };
                if is_alias(doc, node) {
                    problems.push(format!("{}: is an alias; not edited", at(&found.path)));
                    continue;
                }
                let current = if doc.is_null(node) {
                    None
                } else {
                    match scalar(doc, node) {
                        Ok((current, data_type)) => {
                            let expected = match value {
                                ArgValue::String(_) => DataType::String,
                                ArgValue::Int(_) => DataType::Int,
                                ArgValue::Bool(_) => DataType::Bool,
                            };
                            if data_type != expected {
                                problems.push(format!(
                                    "{}: value {current} cannot be converted to {}",
                                    at(&found.path),
                                    expected.as_str()
                                ));
                                continue;
                            }
                            Some(current)
                        }
                        Err(what) => {
                            problems.push(format!("{}: is {what}, not a scalar", at(&found.path)));
                            continue;
                        }
                    }
                };
                match &target.part {
                    Some((part, regexp)) => {
                        let (Some(text), Some(new_part)) =
                            (current.as_ref().and_then(Value::as_str), value.as_str())
                        else {
                            continue;
                        };
                        let Some(replaced) = replace_part(regexp, part, text, new_part) else {
                            problems.push(format!(
                                "{}: embedded field {part} not found",
                                at(&found.path)
                            ));
                            continue;
                        };
                        if replaced != text {
                            grow(&[])?;
                            editor.set_scalar(doc, node, &replaced, true);
                            edits += 1;
                        }
                    }
                    None => {
                        if current.as_ref() != Some(&new_json) {
                            grow(&[])?;
                            match value {
                                ArgValue::String(s) => editor.set_scalar(doc, node, s, true),
                                other => {
                                    let New::Plain(text) = new_value(other) else {
                                        unreachable!("ints and bools are plain")
                                    };
                                    editor.set_scalar(doc, node, &text, false);
                                }
                            }
                            edits += 1;
                        }
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    Ok(edits)
}

/// Creates each path `entries_for` gives, with `value`, where it is missing; values already
/// there are kept. Paths through aliases are left alone.
pub fn fill_missing<'r>(
    call: &Call,
    editor: &mut Editor,
    entries_for: EntriesFor<'_, 'r>,
    value: &New,
) -> Result<usize, FunctionError> {
    let doc = &call.unit.doc;
    let mut edits = 0;
    let mut problems = Vec::new();
    let mut targets = TargetsByType::new(entries_for, &[]);
    for element in &call.unit.elements {
        call.stop_if_cancelled()?;
        let Ok(info) = element.checked_info() else {
            continue;
        };
        for target in targets.of(info)? {
            for found in path::resolve(doc, element.root, &target.path, true) {
                if found.node.is_some() || found.through_alias {
                    continue;
                }
                match create_missing(editor, doc, found.existing, &found.missing, value) {
                    Ok(()) => edits += 1,
                    Err(problem) => problems.push(format!(
                        "{} {}: path {}: {problem}",
                        info.resource_type, info.resource_name, found.path
                    )),
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(edits)
    } else {
        Err(problems.join("; ").into())
    }
}

fn create_missing(
    editor: &mut Editor,
    doc: &Doc,
    existing: NodeId,
    missing: &[String],
    value: &New,
) -> Result<(), String> {
    let Some((first, rest)) = missing.split_first() else {
        return Err("nothing to create".into());
    };
    let nested = rest.iter().rev().fold(value.clone(), |inner, key| {
        New::Map(vec![(key.clone(), inner)])
    });
    if is_alias(doc, existing) {
        return Err("its parent is an alias; not edited".into());
    }
    if doc.is_map(existing) {
        editor.insert(doc, existing, first, nested);
        Ok(())
    } else if doc.is_null(existing) {
        editor.replace_node(doc, existing, &New::Map(vec![(first.clone(), nested)]));
        Ok(())
    } else {
        Err(format!(
            "cannot create {}: its parent is not a mapping",
            quoted(first)
        ))
    }
}

/// Which half of a generated pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Get,
    Set { upsert: bool },
}

/// A generated `get-X` or `set-X` over a registered attribute.
pub struct AttributeFunction {
    signature: TypedSignature,
    attribute: String,
    mode: Mode,
}

/// The description of one attribute's function pair.
pub struct AttributeFunctions<'s> {
    /// `replicas` gives `get-replicas` and `set-replicas`.
    pub stem: &'s str,
    pub attribute: &'s str,
    /// Path parameters, then the value parameter (whose type picks the visitor).
    pub parameters: Vec<ParameterBuilder>,
    /// Follows "Get"/"Set", e.g. " the replicas for workload controllers".
    pub description: &'s str,
    pub setter: bool,
    pub upsert: bool,
}

impl AttributeFunctions<'_> {
    pub fn build(self, registry: &PathRegistry) -> Vec<Arc<dyn TypedFunction>> {
        let affected = registry.resource_types(self.attribute);
        let built: Vec<_> = self
            .parameters
            .into_iter()
            .map(ParameterBuilder::build)
            .collect();
        let value_index = built.len() - 1;
        let signature = |prefix: &str, verb: &str, count: usize, output, mutating| {
            let mut parameter_data_types = std::collections::BTreeMap::new();
            let parameters = built[..count]
                .iter()
                .enumerate()
                .map(|(i, (parameter, data_type))| {
                    let mut parameter = parameter.clone();
                    if i < value_index {
                        parameter.description.push_str(verb);
                    }
                    if let Some(data_type) = data_type {
                        parameter_data_types.insert(parameter.name.clone(), *data_type);
                    }
                    parameter
                })
                .collect();
            TypedSignature {
                base: krm_plugin_api::FunctionSignature {
                    name: format!("{prefix}-{}", self.stem),
                    description: format!(
                        "{}{}{}",
                        prefix[..1].to_uppercase(),
                        &prefix[1..],
                        self.description
                    ),
                    parameters,
                    ..Default::default()
                },
                typed: TypedFacet {
                    output,
                    mutating,
                    hermetic: true,
                    idempotent: true,
                    function_type: FunctionType::PathVisitor,
                    attribute_name: self.attribute.to_owned(),
                    affected_resource_types: affected.clone(),
                    parameter_data_types,
                    ..TypedFacet::default()
                },
            }
        };
        let (value_parameter, _) = &built[value_index];
        let output = FunctionOutput {
            result_name: value_parameter.name.clone(),
            description: value_parameter.description.clone(),
            output_type: OutputType::AttributeValueList,
        };
        let mut functions: Vec<Arc<dyn TypedFunction>> = vec![Arc::new(AttributeFunction {
            signature: signature("get", "get", value_index, Some(output), false),
            attribute: self.attribute.to_owned(),
            mode: Mode::Get,
        })];
        if self.setter {
            functions.push(Arc::new(AttributeFunction {
                signature: signature("set", "set", built.len(), None, true),
                attribute: self.attribute.to_owned(),
                mode: Mode::Set {
                    upsert: self.upsert,
                },
            }));
        }
        functions
    }
}

fn path_arguments<'v>(values: impl Iterator<Item = &'v ArgValue>) -> Vec<String> {
    values
        .map(|v| match v {
            ArgValue::String(s) => s.clone(),
            ArgValue::Int(i) => i.to_string(),
            ArgValue::Bool(b) => b.to_string(),
        })
        .collect()
}

impl TypedFunction for AttributeFunction {
    fn signature(&self) -> &TypedSignature {
        &self.signature
    }

    fn run(&self, call: &Call) -> Result<Outcome, FunctionError> {
        let entries_for = |info: &ResourceInfo| {
            call.registry
                .paths_for(&self.attribute, &info.resource_type)
        };
        let values: Vec<&ArgValue> = call.arguments.values().collect();
        match self.mode {
            Mode::Get => {
                let arguments = path_arguments(values.into_iter());
                let found = get(call, &entries_for, &arguments, None)?;
                Ok(Outcome::output(Output::Attributes(found)))
            }
            Mode::Set { upsert } => {
                let Some((value, path_values)) = values.split_last() else {
                    return Err(format!("{}: no value to set", self.signature.name()).into());
                };
                let arguments = path_arguments(path_values.iter().copied());
                let text = set(call, &entries_for, &arguments, value, upsert)?;
                Ok(Outcome { text, output: None })
            }
        }
    }
}

/// What an arbitrary `path` of `resource_type` visits, as ConfigHub's GetVisitorMapForPath
/// (function/internal/handlers/generic/standard_functions.go) works it out: a path the
/// general registry knows in any form is that attribute (its name, getter, setters and
/// accessor); a resolved one then visits only itself among the registered path's
/// resolutions, so that the registered path binds its parameters (`container-name`) for the
/// getter and setters. Any other path is a plain `attribute-value`, where a `#part` is
/// refused (there is no accessor to cut it).
pub fn arbitrary_entry(
    registry: &PathRegistry,
    resource_type: &str,
    path_text: &str,
    data_type: DataType,
) -> Result<PathVisitorInfo, String> {
    match registry.general_entry(resource_type, path_text) {
        Some(registered) => {
            let mut entry = registered.clone();
            let resolved = !path_text.contains(['?', '*', '@', '|']);
            if resolved {
                entry.resolved_path = path_text.to_owned();
            } else {
                entry.path = path_text.to_owned();
            }
            Ok(entry)
        }
        None if path_text.contains('#') => Err(format!(
            "path {}: embedded accessors (#) are only available on registered paths",
            quoted(path_text)
        )),
        None => {
            UnresolvedPath::parse(path_text).map_err(|e| e.to_string())?;
            Ok(PathVisitorInfo::new(
                attribute::GENERAL,
                path_text,
                data_type,
            ))
        }
    }
}

/// `get-T-path` / `set-T-path`: one path of one resource type, given as arguments.
pub struct ArbitraryPath {
    signature: TypedSignature,
    data_type: DataType,
    set: bool,
}

impl ArbitraryPath {
    fn new(data_type: DataType, set: bool) -> Self {
        let word = match data_type {
            DataType::Int => "int",
            DataType::Bool => "bool",
            _ => "string",
        };
        let mut parameters = vec![
            ParameterBuilder::new("resource-type", DataType::String, "Resource type to match")
                .example("apps/v1/Deployment")
                .build()
                .0,
            ParameterBuilder::new("path", DataType::String, "Path of the attribute")
                .example("spec.replicas")
                .build()
                .0,
        ];
        if set {
            parameters.push(
                ParameterBuilder::new("attribute-value", data_type, "Value to set")
                    .build()
                    .0,
            );
        }
        let output = (!set).then(|| FunctionOutput {
            // ConfigHub names the result of its get-T-path functions "path".
            result_name: "path".into(),
            description: format!("Values of {word} attributes at the path"),
            output_type: OutputType::AttributeValueList,
        });
        let verb = if set { "set" } else { "get" };
        Self {
            signature: TypedSignature {
                base: krm_plugin_api::FunctionSignature {
                    name: format!("{verb}-{word}-path"),
                    description: if set {
                        format!(
                            "Set the {word} value at a path of resources of a type, creating it if missing"
                        )
                    } else {
                        format!("Get the {word} values at a path of resources of a type")
                    },
                    parameters,
                    ..Default::default()
                },
                typed: TypedFacet {
                    output,
                    mutating: set,
                    hermetic: true,
                    idempotent: true,
                    function_type: FunctionType::Custom,
                    affected_resource_types: vec!["*".into()],
                    ..TypedFacet::default()
                },
            },
            data_type,
            set,
        }
    }
}

impl TypedFunction for ArbitraryPath {
    fn signature(&self) -> &TypedSignature {
        &self.signature
    }

    fn run(&self, call: &Call) -> Result<Outcome, FunctionError> {
        let resource_type = call.arguments.str("resource-type").unwrap_or_default();
        let path_text = call.arguments.str("path").unwrap_or_default();
        let entry = arbitrary_entry(call.registry, resource_type, path_text, self.data_type)?;
        if self.set {
            let (before_part, _) = path_text.split_once('#').unwrap_or((path_text, ""));
            let path = UnresolvedPath::parse(before_part).map_err(|e| e.to_string())?;
            call.toolchain.check_new_path(&path)?;
        }
        let entries_for = |info: &ResourceInfo| {
            let matches = if resource_type == ANY_RESOURCE_TYPE {
                !entry.type_exceptions.contains(&info.resource_type)
            } else {
                info.resource_type == resource_type
            };
            if matches { vec![&entry] } else { Vec::new() }
        };
        if self.set {
            let value = call
                .arguments
                .get("attribute-value")
                .ok_or("no attribute-value")?;
            let text = set(call, &entries_for, &[], value, true)?;
            Ok(Outcome { text, output: None })
        } else {
            let found = get(call, &entries_for, &[], Some(self.data_type))?;
            Ok(Outcome::output(Output::Attributes(found)))
        }
    }
}

// ConfigHub's patterns, character for character, so that an argument is refused exactly where
// ConfigHub's handler refuses it (its check is an unanchored match, as `Regex::is_match`). The
// container name's alternation is not grouped in ConfigHub's: it takes what starts with `*` or
// ends with a name character.
pub const CONTAINER_NAME_PATTERN: &str = r"^\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$";
pub const REPOSITORY_URI_PATTERN: &str = r"^(?P<uri>(?:(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*(?:\:[0-9]+)?)/)?(?:[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*))$";
pub const IMAGE_REFERENCE_PATTERN: &str = r"^(?P<reference>\:(?:[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127})|@(?:[a-z0-9]+(?:[+._-][a-z0-9]+)*\:[a-zA-Z0-9=_-]+))$";
const ENV_VAR_PATTERN: &str = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$";
const HOSTNAME_PATTERN: &str = r"^^(?P<subdomain>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)\.(?P<domain>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?){0,9})$$";
const SUBDOMAIN_PATTERN: &str = r"^(?P<subdomain>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)$";
const DOMAIN_PATTERN: &str = r"^(?P<domain>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?){0,9})$";

fn container_name() -> ParameterBuilder {
    ParameterBuilder::new(
        "container-name",
        DataType::String,
        "Name of the container to ",
    )
    .example("main")
    .pattern(CONTAINER_NAME_PATTERN)
}

/// The path-visitor functions of Kubernetes/YAML, and the arbitrary-path ones.
pub fn kubernetes(registry: &PathRegistry) -> Vec<Arc<dyn TypedFunction>> {
    use attribute::*;
    let string = DataType::String;
    let pairs = vec![
        AttributeFunctions {
            stem: "replicas",
            attribute: REPLICAS,
            parameters: vec![
                ParameterBuilder::new(
                    "replicas",
                    DataType::Int,
                    "Number of replicas of workload controllers",
                )
                .example("3")
                .range(Some(0), None),
            ],
            description: " the replicas for workload controllers",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "container-name",
            attribute: CONTAINER_NAME,
            parameters: vec![container_name()],
            description: " the container name",
            setter: false,
            upsert: false,
        },
        AttributeFunctions {
            stem: "image",
            attribute: CONTAINER_IMAGE,
            parameters: vec![
                container_name(),
                ParameterBuilder::new("container-image", string, "Container image")
                    .example("nginx:1.27")
                    .pattern(IMAGE_ACCESSOR),
            ],
            description: " the container image",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "image-uri",
            attribute: CONTAINER_REPOSITORY_URI,
            parameters: vec![
                container_name(),
                ParameterBuilder::new(
                    "repository-uri",
                    string,
                    "Image repository, without tag or digest",
                )
                .example("ghcr.io/example/app")
                .pattern(REPOSITORY_URI_PATTERN),
            ],
            description: " the repository of the container image",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "image-reference",
            attribute: CONTAINER_IMAGE_REFERENCE,
            parameters: vec![
                container_name(),
                ParameterBuilder::new(
                    "image-reference",
                    string,
                    "Tag (:tag) and/or digest (@sha256:...)",
                )
                .example(":v1.2.3")
                .pattern(IMAGE_REFERENCE_PATTERN),
            ],
            description: " the tag or digest of the container image",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "env-var",
            attribute: ENV_VALUE,
            parameters: vec![
                container_name(),
                ParameterBuilder::new("env-var", string, "Name of the environment variable to ")
                    .pattern(ENV_VAR_PATTERN),
                ParameterBuilder::new("env-value", string, "Value of the environment variable"),
            ],
            description: " an environment variable of a container",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "label",
            attribute: LABEL_VALUE,
            parameters: vec![
                ParameterBuilder::new("label-key", string, "Key of label to "),
                ParameterBuilder::new("label-value", string, "Value of the specified label"),
            ],
            description: " a label",
            setter: true,
            upsert: true,
        },
        AttributeFunctions {
            stem: "annotation",
            attribute: ANNOTATION_VALUE,
            parameters: vec![
                ParameterBuilder::new("annotation-key", string, "Key of annotation to "),
                ParameterBuilder::new(
                    "annotation-value",
                    string,
                    "Value of the specified annotation",
                ),
            ],
            description: " an annotation",
            setter: true,
            upsert: true,
        },
        AttributeFunctions {
            stem: "namespace",
            attribute: NAMESPACE_REFERENCE,
            parameters: vec![ParameterBuilder::new(
                "namespace-name",
                string,
                "Value of namespace fields in the resources",
            )],
            description: " the namespace attributes in resource",
            setter: true,
            upsert: false,
        },
    ];
    let pairs = pairs.into_iter().chain([
        AttributeFunctions {
            stem: "hostname",
            attribute: HOSTNAME,
            parameters: vec![
                ParameterBuilder::new("hostname", string, "Fully qualified host name")
                    .pattern(HOSTNAME_PATTERN)
                    .example("shop.example.com"),
            ],
            description: " the host names of Ingresses and Services",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "hostname-subdomain",
            attribute: SUBDOMAIN,
            parameters: vec![
                ParameterBuilder::new("subdomain", string, "First label of the host names")
                    .pattern(SUBDOMAIN_PATTERN)
                    .example("shop"),
            ],
            description: " the first label of the host names",
            setter: true,
            upsert: false,
        },
        AttributeFunctions {
            stem: "hostname-domain",
            attribute: DOMAIN,
            parameters: vec![
                ParameterBuilder::new("domain", string, "Host names without their first label")
                    .pattern(DOMAIN_PATTERN)
                    .example("example.com"),
            ],
            description: " the domain of the host names",
            setter: true,
            upsert: false,
        },
    ]);
    let mut functions: Vec<Arc<dyn TypedFunction>> = pairs
        .into_iter()
        .flat_map(|pair| pair.build(registry))
        .collect();
    functions.extend(arbitrary_paths());
    functions
}

/// `get-T-path` and `set-T-path` for strings, integers and booleans: every toolchain has them.
pub fn arbitrary_paths() -> Vec<Arc<dyn TypedFunction>> {
    let mut functions: Vec<Arc<dyn TypedFunction>> = Vec::new();
    for data_type in [DataType::String, DataType::Int, DataType::Bool] {
        for set in [false, true] {
            functions.push(Arc::new(ArbitraryPath::new(data_type, set)));
        }
    }
    functions
}
