//! Typed signatures of the functions an evaluator implements itself (e.g. the builtins), so
//! that callers can discover them and the evaluator can validate functionConfig against them.

use serde::{Deserialize, Serialize};

/// One function's contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct FunctionSignature {
    /// Short name, e.g. `set-namespace`.
    pub name: String,
    pub description: String,
    /// Every image reference the evaluator answers to for this function.
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    pub parameters: Vec<Parameter>,
    /// What it changes, e.g. `metadata.namespace`; empty for pure validators.
    #[serde(default)]
    pub changes: Vec<String>,
    /// Whether it reports problems as results rather than (only) transforming.
    #[serde(default)]
    pub validates: bool,
}

/// One functionConfig parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Parameter {
    pub name: String,
    #[serde(rename = "type")]
    pub parameter_type: ParameterType,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
    /// A regular expression a string value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The allowed values, when the set is closed.
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<i64>,
}

/// The JSON-schema-like type of a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ParameterType {
    #[default]
    String,
    Integer,
    Boolean,
    /// A map of strings to strings.
    Map,
    List,
    Object,
}

impl ParameterType {
    /// The name used in signatures: `string`, `integer`, `boolean`, `map`, `list`, `object`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Boolean => "boolean",
            Self::Map => "map",
            Self::List => "list",
            Self::Object => "object",
        }
    }
}
