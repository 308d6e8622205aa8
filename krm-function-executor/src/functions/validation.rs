//! Validating functions (ValidationResult): where-filter, validate, no-placeholders,
//! is-approved; and get-placeholders, which lists what no-placeholders fails on.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use krm_plugin_api::quoted;
use regex::{Regex, RegexBuilder};
use serde_json::Value;

use crate::api::{
    AttributeValue, DataType, OutputType, ResourceInfo, ValidationResult, hash_config_data,
};
use crate::functions::definition::{
    ALL_TOOLCHAINS, Definition, FunctionKind, KUBERNETES, Options, PROPERTIES, no_parameters,
};
use crate::functions::path_visitor::get;
use crate::functions::resources::identified;
use crate::functions::{Call, FunctionError, Outcome, Output};
use crate::path::{self, UnresolvedPath};
use crate::quantity::Quantity;
use crate::registry::{PathVisitorInfo, attribute};
use crate::resource::scalars;
use crate::signature::ParameterBuilder;
use crate::toolchain::Toolchain;

/// The string ConfigHub uses for a value still to be filled in.
pub const PLACEHOLDER_STRING: &str = "confighubplaceholder";
/// The integer ConfigHub uses for a value still to be filled in.
pub const PLACEHOLDER_INT: i64 = 999_999_999;

/// Where-expressions longer than this are refused.
const MAX_WHERE_BYTES: usize = 16 * 1024;
/// LIKE patterns and regular expressions longer than this are refused.
pub const MAX_PATTERN_BYTES: usize = 4 * 1024;
/// The most memory one compiled pattern may take (the `regex` crate's `size_limit`): a
/// pattern of [`MAX_PATTERN_BYTES`] `_` (any character, each a UTF-8 decoder) fits.
const MAX_PATTERN_PROGRAM_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    String(String),
    Int(i64),
    Bool(bool),
}

impl Literal {
    fn data_type(&self) -> DataType {
        match self {
            Literal::String(_) => DataType::String,
            Literal::Int(_) => DataType::Int,
            Literal::Bool(_) => DataType::Bool,
        }
    }

    fn matches_value(&self, value: &Value) -> Option<std::cmp::Ordering> {
        match (self, value) {
            (Literal::String(l), Value::String(v)) => Some(v.as_str().cmp(l.as_str())),
            (Literal::Int(l), Value::Number(v)) => v.as_i64().map(|v| v.cmp(l)),
            (Literal::Bool(l), Value::Bool(v)) => Some(v.cmp(l)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
    Like,
    ILike,
    NotLike,
    Regex,
    IRegex,
    NotRegex,
    NotIRegex,
    In,
    NotIn,
}

#[derive(Debug, Clone)]
struct Relation {
    path: String,
    operator: Operator,
    literals: Vec<Literal>,
    /// The pattern of LIKE and regular-expression operators, compiled once for every value.
    pattern: Option<Regex>,
    /// Strings here are resource quantities (Kubernetes, [`RESOURCE_QUANTITY_PATH`]).
    quantities: bool,
}

/// Where ConfigHub's Kubernetes where-filter compares strings as resource quantities
/// (standard_functions.go resourcesPathRegexpString).
static RESOURCE_QUANTITY_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\.resources\.(requests|limits)\.[a-z]+$").expect("the pattern compiles")
});

/// ConfigHub's evaluateResourceQuantityComparison: `value` and the literal compared as
/// quantities; a literal that is not one, or an operator other than =, !=, <, <=, > and >=,
/// never holds; a value that is not one is an error.
fn compare_quantities(relation: &Relation, value: &str, literal: &str) -> Result<bool, String> {
    use Operator::*;
    let left = Quantity::parse(value)
        .map_err(|e| format!("invalid resource quantity {}: {e}", quoted(value).bounded()))?;
    let Ok(right) = Quantity::parse(literal) else {
        return Ok(false);
    };
    Ok(match relation.operator {
        Eq => left == right,
        Ne => left != right,
        Lt => left < right,
        Le => left <= right,
        Gt => left > right,
        Ge => left >= right,
        _ => false,
    })
}

/// Parses `path op literal [AND ...]`; tokens are separated by spaces.
fn parse_where(expression: &str) -> Result<Vec<Relation>, String> {
    if expression.len() > MAX_WHERE_BYTES {
        return Err(format!(
            "where-expression longer than {MAX_WHERE_BYTES} bytes"
        ));
    }
    let mut tokens = Tokens { rest: expression };
    let mut relations = Vec::new();
    loop {
        let path = tokens
            .word()
            .ok_or("where-expression: expected a path")?
            .to_owned();
        let shown = quoted(&path);
        let operator_word = tokens
            .word()
            .ok_or_else(|| format!("where-expression: expected an operator after {shown}"))?;
        let operator = match operator_word.to_ascii_uppercase().as_str() {
            "=" | "==" => Operator::Eq,
            "!=" | "<>" => Operator::Ne,
            "<" => Operator::Lt,
            ">" => Operator::Gt,
            "<=" => Operator::Le,
            ">=" => Operator::Ge,
            "LIKE" | "~~" => Operator::Like,
            "ILIKE" | "~~*" => Operator::ILike,
            "!~~" => Operator::NotLike,
            "~" => Operator::Regex,
            "~*" => Operator::IRegex,
            "!~" => Operator::NotRegex,
            "!~*" => Operator::NotIRegex,
            "IN" => Operator::In,
            "NOT" => match tokens.word().map(str::to_ascii_uppercase).as_deref() {
                Some("IN") => Operator::NotIn,
                Some("LIKE") => Operator::NotLike,
                _ => {
                    return Err(format!(
                        "where-expression: expected IN or LIKE after NOT in the relation on {shown}"
                    ));
                }
            },
            other => {
                return Err(format!(
                    "where-expression: unknown operator {} after {shown}",
                    quoted(other)
                ));
            }
        };
        let literals = if matches!(operator, Operator::In | Operator::NotIn) {
            tokens.list()?
        } else {
            vec![tokens.literal()?]
        };
        let data_type = literals[0].data_type();
        if literals.iter().any(|l| l.data_type() != data_type) {
            return Err(format!(
                "where-expression: the list for {shown} mixes types"
            ));
        }
        let string_only = matches!(
            operator,
            Operator::Like
                | Operator::ILike
                | Operator::NotLike
                | Operator::Regex
                | Operator::IRegex
                | Operator::NotRegex
                | Operator::NotIRegex
        );
        if string_only && data_type != DataType::String {
            return Err(format!(
                "where-expression: {} needs a string literal ({shown})",
                quoted(operator_word)
            ));
        }
        if data_type == DataType::Bool && !matches!(operator, Operator::Eq | Operator::Ne) {
            return Err(format!(
                "where-expression: booleans support only = and != ({shown})"
            ));
        }
        let pattern = match (&literals[0], string_only) {
            (Literal::String(text), true) => Some(compile_pattern(operator, text, &path)?),
            _ => None,
        };
        relations.push(Relation {
            path,
            operator,
            literals,
            pattern,
            quantities: false,
        });
        match tokens.word() {
            None => return Ok(relations),
            Some(word) if word.eq_ignore_ascii_case("AND") => {}
            Some(other) => {
                return Err(format!(
                    "where-expression: expected AND, found {}",
                    quoted(other)
                ));
            }
        }
    }
}

struct Tokens<'e> {
    rest: &'e str,
}

impl<'e> Tokens<'e> {
    fn word(&mut self) -> Option<&'e str> {
        let trimmed = self.rest.trim_start();
        if trimmed.is_empty() {
            return None;
        }
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        self.rest = &trimmed[end..];
        Some(&trimmed[..end])
    }

    fn literal(&mut self) -> Result<Literal, String> {
        self.rest = self.rest.trim_start();
        if let Some(quoted) = self.rest.strip_prefix('\'') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            while let Some((i, c)) = chars.next() {
                if c == '\'' {
                    if quoted[i + 1..].starts_with('\'') {
                        text.push('\'');
                        chars.next();
                        continue;
                    }
                    self.rest = &quoted[i + 1..];
                    return Ok(Literal::String(text));
                }
                text.push(c);
            }
            return Err("where-expression: unterminated string literal".into());
        }
        let end = self
            .rest
            .find(|c: char| c.is_whitespace() || c == ',' || c == ')')
            .unwrap_or(self.rest.len());
        let word = &self.rest[..end];
        self.rest = &self.rest[end..];
        match word {
            "true" => Ok(Literal::Bool(true)),
            "false" => Ok(Literal::Bool(false)),
            _ => word.parse().map(Literal::Int).map_err(|_| {
                format!(
                    "where-expression: {} is not a literal ('string', integer, true or false)",
                    quoted(word)
                )
            }),
        }
    }

    fn list(&mut self) -> Result<Vec<Literal>, String> {
        self.rest = self.rest.trim_start();
        self.rest = self
            .rest
            .strip_prefix('(')
            .ok_or("where-expression: IN needs a list in parentheses")?;
        let mut literals = Vec::new();
        loop {
            literals.push(self.literal()?);
            self.rest = self.rest.trim_start();
            if let Some(rest) = self.rest.strip_prefix(',') {
                self.rest = rest;
            } else if let Some(rest) = self.rest.strip_prefix(')') {
                self.rest = rest;
                return Ok(literals);
            } else {
                return Err("where-expression: expected , or ) in the IN list".into());
            }
        }
    }
}

/// The regular expression of a LIKE or regular-expression operator's `pattern`.
fn compile_pattern(operator: Operator, pattern: &str, path: &str) -> Result<Regex, String> {
    use Operator::*;
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!(
            "where-expression: the pattern for {} is {} bytes, more than the limit of {MAX_PATTERN_BYTES}",
            quoted(path),
            pattern.len()
        ));
    }
    let like = matches!(operator, Like | ILike | NotLike);
    let regex = if like {
        let mut regex = String::from("^");
        for c in pattern.chars() {
            match c {
                '%' => regex.push_str(".*"),
                '_' => regex.push('.'),
                c => regex.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
            }
        }
        regex.push('$');
        regex
    } else {
        pattern.to_owned()
    };
    RegexBuilder::new(&regex)
        .case_insensitive(matches!(operator, ILike | IRegex | NotIRegex))
        .size_limit(MAX_PATTERN_PROGRAM_BYTES)
        .build()
        .map_err(|e| {
            let what = if like {
                "pattern"
            } else {
                "regular expression"
            };
            format!(
                "where-expression: {}: {what} {}: {e}",
                quoted(path),
                quoted(pattern)
            )
        })
}

fn evaluate(relation: &Relation, value: &Value) -> Result<bool, String> {
    use Operator::*;
    let first = &relation.literals[0];
    if let (true, Literal::String(literal), Some(text)) =
        (relation.quantities, first, value.as_str())
        && !matches!(relation.operator, In | NotIn)
    {
        return compare_quantities(relation, text, literal);
    }
    let ordering = || {
        first.matches_value(value).ok_or_else(|| {
            format!(
                "{}: value {} is not of the literal's type {}",
                quoted(&relation.path),
                quoted(&value.to_string()),
                first.data_type().as_str()
            )
        })
    };
    let text = || value.as_str().unwrap_or_default();
    let matches = || {
        relation
            .pattern
            .as_ref()
            .is_some_and(|pattern| pattern.is_match(text()))
    };
    Ok(match relation.operator {
        Eq => ordering()?.is_eq(),
        Ne => ordering()?.is_ne(),
        Lt => ordering()?.is_lt(),
        Gt => ordering()?.is_gt(),
        Le => ordering()?.is_le(),
        Ge => ordering()?.is_ge(),
        Like | ILike | Regex | IRegex => matches(),
        NotLike | NotRegex | NotIRegex => !matches(),
        In | NotIn => {
            let found = relation
                .literals
                .iter()
                .any(|l| l.matches_value(value).is_some_and(|o| o.is_eq()));
            found == (relation.operator == In)
        }
    })
}

type Key = (String, String);

fn key(info: &ResourceInfo) -> Key {
    (info.resource_type.clone(), info.resource_name.clone())
}

/// The resources (type, name) that satisfy one relation.
fn matching(
    call: &Call,
    resource_type: &str,
    relation: &Relation,
) -> Result<BTreeSet<Key>, FunctionError> {
    let of_type = |t: &str| resource_type == "*" || t == resource_type;
    let mut matched = BTreeSet::new();
    if let Some((visited, sub_path)) = relation.path.split_once(".|") {
        let visited = UnresolvedPath::parse(visited).map_err(|e| e.to_string())?;
        let keys: Vec<String> = sub_path.split('.').map(path::unescape).collect();
        let doc = &call.unit.doc;
        for (element, info) in identified(call)? {
            call.stop_if_cancelled()?;
            if !of_type(&info.resource_type) {
                continue;
            }
            for found in path::resolve(doc, element.root, &visited, false) {
                let Some(mut node) = found.node else { continue };
                let mut present = true;
                for key in &keys {
                    match doc.get(node, key) {
                        Some(child) => node = child,
                        None => {
                            present = false;
                            break;
                        }
                    }
                }
                let holds = if present {
                    evaluate(relation, &doc.to_json(node))?
                } else {
                    // A missing property differs from anything.
                    relation.operator == Operator::Ne
                };
                if holds {
                    matched.insert(key(info));
                }
            }
        }
        return Ok(matched);
    }
    let entry = PathVisitorInfo::new(
        attribute::GENERAL,
        &relation.path,
        relation.literals[0].data_type(),
    );
    let entries_for = |info: &ResourceInfo| {
        if of_type(&info.resource_type) {
            vec![&entry]
        } else {
            Vec::new()
        }
    };
    for value in get(
        call,
        &entries_for,
        &[],
        Some(relation.literals[0].data_type()),
    )? {
        if evaluate(relation, &value.value)? {
            matched.insert(key(&value.resource));
        }
    }
    Ok(matched)
}

fn where_filter(call: &Call) -> Result<Outcome, FunctionError> {
    let resource_type = match call.arguments.str("resource-type").unwrap_or_default() {
        "" => "*",
        other => other,
    };
    let expression = call.arguments.str("where-expression").unwrap_or_default();
    let matched = if expression.trim().is_empty() {
        // ConfigHub's blank filter compares the type as given: `*` is no resource's type.
        identified(call)?
            .into_iter()
            .filter(|(_, info)| info.resource_type == resource_type)
            .map(|(_, info)| key(info))
            .collect()
    } else {
        let mut matched: Option<BTreeSet<Key>> = None;
        for mut relation in parse_where(expression)? {
            relation.quantities = call.toolchain == Toolchain::KubernetesYaml
                && RESOURCE_QUANTITY_PATH.is_match(&relation.path);
            let these = matching(call, resource_type, &relation)?;
            matched = Some(match matched {
                None => these,
                Some(before) => before.intersection(&these).cloned().collect(),
            });
        }
        matched.unwrap_or_default()
    };
    let result = if matched.is_empty() {
        ValidationResult::failed(Vec::new())
    } else {
        ValidationResult::passed()
    };
    Ok(Outcome::output(Output::Validation(result)))
}

/// Structural checks every Kubernetes resource must pass.
fn validate(call: &Call) -> Result<Outcome, FunctionError> {
    let doc = &call.unit.doc;
    let mut details = Vec::new();
    for element in &call.unit.elements {
        call.stop_if_cancelled()?;
        if let Err(problem) = element.checked_info() {
            details.push(problem);
            continue;
        }
        let info = &element.info;
        let root = element.root;
        let at = |what: &str| format!("{} {}: {what}", info.resource_type, info.resource_name);
        for field in ["apiVersion", "kind"] {
            if !matches!(
                doc.get(root, field).map(|n| doc.to_json(n)),
                Some(Value::String(_))
            ) {
                details.push(at(&format!("{field} is not a string")));
            }
        }
        match doc.get(root, "metadata") {
            Some(metadata) if doc.is_map(metadata) => {
                match doc.get(metadata, "name").map(|n| doc.to_json(n)) {
                    Some(Value::String(name)) if !name.is_empty() => {}
                    _ => details.push(at("metadata.name is missing or not a string")),
                }
                for map in ["labels", "annotations"] {
                    let Some(node) = doc.get(metadata, map) else {
                        continue;
                    };
                    if doc.is_null(node) {
                        continue;
                    }
                    if !doc.is_map(node) {
                        details.push(at(&format!("metadata.{map} is not a map")));
                        continue;
                    }
                    for &(k, v) in doc.entries(node) {
                        if !matches!(doc.to_json(v), Value::String(_)) {
                            details.push(at(&format!(
                                "metadata.{map}.{} is not a string",
                                doc.str(k).unwrap_or_default()
                            )));
                        }
                    }
                }
            }
            _ => details.push(at("metadata is missing or not a map")),
        }
        // Then against the type's schema, as ConfigHub's k8sFnValidate has kubeconform do it
        // (strict; a type the schema lacks is skipped).
        let schema = krm_kube_schema::schema()
            .map_err(|e| FunctionError::Failed(format!("validate: {e}")))?;
        if let Some(violations) = schema.validate(&info.resource_type, &doc.to_json(root)) {
            details.extend(violations.iter().map(|v| at(&v.to_string())));
        }
    }
    let result = if details.is_empty() {
        ValidationResult::passed()
    } else {
        ValidationResult::failed(details)
    };
    Ok(Outcome::output(Output::Validation(result)))
}

/// The placeholder ConfigHub still honours (yamlkit's DeprecatedPlaceHolderBlockApplyString):
/// in needed values, and in the placeholders its generic handlers look for.
pub const DEPRECATED_PLACEHOLDER: &str = "replaceme";

/// The annotation where ConfigHub keeps an original name, placeholder or not: its Kubernetes
/// handlers skip it.
const ORIGINAL_NAME_PATH: &str = "metadata.annotations.confighub~1com/OriginalName";

/// The placeholders of the unit as ConfigHub lists them (yamlkit's FindYAMLPathsByValue, once
/// per placeholder, each search sorted by type, name and path, the searches one after the
/// other): strings containing `confighubplaceholder`, then, for the generic handlers
/// (properties), strings containing `replaceme`, then the integer placeholder. The
/// Kubernetes handlers (k8sFnGetPlaceholders) skip the OriginalName annotation.
fn placeholders(call: &Call) -> Result<Vec<AttributeValue>, FunctionError> {
    let kubernetes = call.toolchain == Toolchain::KubernetesYaml;
    let doc = &call.unit.doc;
    let mut strings = Vec::new();
    let mut deprecated = Vec::new();
    let mut ints = Vec::new();
    for (element, info) in identified(call)? {
        call.stop_if_cancelled()?;
        for (path, node) in scalars(doc, element.root) {
            let value = doc.to_json(node);
            let found = |data_type| AttributeValue {
                resource: info.clone(),
                path: path.clone(),
                in_live_state: false,
                attribute_name: attribute::GENERAL.to_owned(),
                data_type,
                info: None,
                value: value.clone(),
                comment: String::new(),
            };
            match &value {
                Value::String(s) => {
                    if s.contains(PLACEHOLDER_STRING) && !(kubernetes && path == ORIGINAL_NAME_PATH)
                    {
                        strings.push(found(DataType::String));
                    }
                    if !kubernetes && s.contains(DEPRECATED_PLACEHOLDER) {
                        deprecated.push(found(DataType::String));
                    }
                }
                Value::Number(n) if n.as_i64() == Some(PLACEHOLDER_INT) => {
                    ints.push(found(DataType::Int));
                }
                _ => {}
            }
        }
    }
    let mut all = Vec::new();
    for mut search in [strings, deprecated, ints] {
        search.sort_by(|a, b| {
            (
                &a.resource.resource_type,
                &a.resource.resource_name,
                &a.path,
            )
                .cmp(&(
                    &b.resource.resource_type,
                    &b.resource.resource_name,
                    &b.path,
                ))
        });
        all.extend(search);
    }
    Ok(all)
}

fn get_placeholders(call: &Call) -> Result<Outcome, FunctionError> {
    Ok(Outcome::output(Output::Attributes(placeholders(call)?)))
}

/// Passes when there are none. ConfigHub's Kubernetes handler (k8sFnNoPlaceholders) answers
/// the verdict alone; its generic one (genericFnNoPlaceholders) lists them as failed
/// attributes. Neither adds details.
fn no_placeholders(call: &Call) -> Result<Outcome, FunctionError> {
    let found = placeholders(call)?;
    let mut result = if found.is_empty() {
        ValidationResult::passed()
    } else {
        ValidationResult::failed(Vec::new())
    };
    if call.toolchain != Toolchain::KubernetesYaml {
        result.failed_attributes = found;
    }
    Ok(Outcome::output(Output::Validation(result)))
}

/// Passes when the data is still what `PreviousContentHash` hashes and has as many approvers
/// as asked, as ConfigHub's genericFnIsApproved (approvals count for the data they were given
/// to). Like it, no details. ConfigHub hashes its YAML model, which for AppConfig/Properties
/// never is the properties text the hash was taken of; krm-runner hashes the data in the
/// toolchain's own format, so that a properties unit can pass.
fn is_approved(call: &Call) -> Result<Outcome, FunctionError> {
    let wanted = call
        .arguments
        .get("num-approvers")
        .and_then(|v| v.as_int())
        .unwrap_or(1);
    let data = call
        .native
        .write(call.unit)
        .map_err(|e| format!("the data cannot be written as {}: {e}", call.toolchain))?;
    let unchanged = hash_config_data(data.as_bytes()) == call.context.previous_content_hash;
    let approvers = call.context.approved_by.as_ref().map_or(0, Vec::len);
    let result = if unchanged && i64::try_from(approvers).unwrap_or(i64::MAX) >= wanted {
        ValidationResult::passed()
    } else {
        ValidationResult::failed(Vec::new())
    };
    Ok(Outcome::output(Output::Validation(result)))
}

/// AppConfig/Properties' `validate`: a file that was read as properties is valid, as
/// ConfigHub has no schema to hold it against (its own passes every file).
pub static PROPERTIES_VALIDATE: Definition = Definition {
    name: "validate",
    description: "Returns true: the data was read as a properties file, and there is no schema to check it against",
    parameters: no_parameters,
    kind: FunctionKind::Validating {
        result: "passed",
        description: "True if the data is a properties file",
    },
    toolchains: PROPERTIES,
    run: |_| {
        Ok(Outcome::output(Output::Validation(
            ValidationResult::passed(),
        )))
    },
    options: Options::DEFAULT,
};

pub static WHERE_FILTER: Definition = Definition {
    name: "where-filter",
    description: "Returns true if all terms of the conjunction of relational expressions evaluate to true for at least one matching path of a resource of the specified type. Intended to be used for filtering rather than validating, though it returns the same output type.",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                "resource-type",
                DataType::String,
                "Resource type (apiVersion/kind) to match, * for any",
            )
            .example("apps/v1/Deployment"),
            ParameterBuilder::new(
                "where-expression",
                DataType::String,
                "Conjunction (AND) of relations `path operator literal`; strings in single quotes",
            )
            .example("spec.replicas > 1 AND metadata.name LIKE 'web%'"),
        ]
    },
    kind: FunctionKind::Validating {
        result: "matched",
        description: "True if the filter passed for at least one resource",
    },
    toolchains: ALL_TOOLCHAINS,
    run: where_filter,
    options: Options::DEFAULT,
};

pub static VALIDATE: Definition = Definition {
    name: "validate",
    description: "Check that every resource is well formed (a mapping with string apiVersion and kind, a named metadata map, string labels and annotations) and, when its type is in the Kubernetes schema, holds to it: field types, required fields, no unknown fields",
    parameters: no_parameters,
    kind: FunctionKind::Validating {
        result: "passed",
        description: "True if every resource is well formed and holds to its schema",
    },
    toolchains: KUBERNETES,
    run: validate,
    options: Options::DEFAULT,
};

pub static GET_PLACEHOLDERS: Definition = Definition {
    name: "get-placeholders",
    description: "Get the attributes that still hold a placeholder (confighubplaceholder or 999999999)",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "path",
        description: "Attributes holding placeholders",
        output: OutputType::AttributeValueList,
    },
    toolchains: ALL_TOOLCHAINS,
    run: get_placeholders,
    options: Options::DEFAULT,
};

pub static NO_PLACEHOLDERS: Definition = Definition {
    name: "no-placeholders",
    description: "Check that no attribute holds a placeholder",
    parameters: no_parameters,
    kind: FunctionKind::Validating {
        result: "passed",
        description: "True if no placeholder remains",
    },
    toolchains: ALL_TOOLCHAINS,
    run: no_placeholders,
    options: Options::DEFAULT,
};

pub static IS_APPROVED: Definition = Definition {
    name: "is-approved",
    description: "Check that the revision has at least the given number of approvals",
    parameters: |_| {
        vec![
            ParameterBuilder::new("num-approvers", DataType::Int, "Approvals required")
                .example("1"),
        ]
    },
    kind: FunctionKind::Validating {
        result: "passed",
        description: "True if approved by enough users",
    },
    toolchains: ALL_TOOLCHAINS,
    run: is_approved,
    options: Options::DEFAULT,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_expressions_parse_and_name_their_problems() {
        let relations = parse_where(
            "spec.replicas >= 2 AND metadata.name ILIKE 'We_%' and x.|y != 'it''s' AND a NOT IN (1, 2)",
        )
        .unwrap();
        assert_eq!(relations.len(), 4);
        assert_eq!(relations[1].operator, Operator::ILike);
        assert_eq!(relations[2].literals, [Literal::String("it's".into())]);
        assert_eq!(relations[3].literals, [Literal::Int(1), Literal::Int(2)]);
        for (bad, problem) in [
            ("spec.replicas", "expected an operator"),
            ("a =", "is not a literal"),
            ("a = 'x", "unterminated"),
            ("a ?? 1", "unknown operator"),
            ("a = 1 OR b = 2", "expected AND"),
            ("a LIKE 1", "needs a string literal"),
            ("a > true", "only = and !="),
            ("a IN (1, 'x')", "mixes types"),
        ] {
            let err = parse_where(bad).unwrap_err();
            assert!(err.contains(problem), "{bad}: {err}");
        }
    }

    #[test]
    fn operators_compare_like_sql() {
        let relation = |text: &str| parse_where(text).unwrap().remove(0);
        let holds = |text: &str, value: Value| evaluate(&relation(text), &value).unwrap();
        assert!(holds("a LIKE 'ng%x'", Value::from("nginx")));
        assert!(!holds("a LIKE 'ng_x'", Value::from("nginx")));
        assert!(holds("a ILIKE 'NG%'", Value::from("nginx")));
        assert!(holds("a ~ 'gin'", Value::from("nginx")));
        assert!(holds("a !~* 'GIX'", Value::from("nginx")));
        assert!(holds("a < 'b'", Value::from("a")));
        assert!(holds("a IN (3, 4)", Value::from(4)));
        assert!(holds("a NOT IN ('x')", Value::from("y")));
        assert!(holds("a != false", Value::from(true)));
        assert!(evaluate(&relation("a > 3"), &Value::from("x")).is_err());
    }
}
