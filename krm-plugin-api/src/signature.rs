//! Typed signatures of the functions an evaluator implements itself (e.g. the builtins), so
//! that callers can discover them and the evaluator can validate functionConfig against them.

use serde::{Deserialize, Serialize};

/// One function's contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct FunctionSignature {
    /// Short name, e.g. `set-namespace`.
    pub name: String,
    /// One line for listings.
    pub description: String,
    /// Every image reference the evaluator answers to for this function.
    #[serde(default)]
    pub images: Vec<String>,
    /// Its functionConfig parameters.
    #[serde(default)]
    pub parameters: Vec<Parameter>,
    /// What it changes, e.g. `metadata.namespace`; empty for pure validators.
    #[serde(default)]
    pub changes: Vec<String>,
    /// Whether it reports problems as results rather than (only) transforming.
    #[serde(default)]
    pub validates: bool,
    /// Input -> output pairs: documentation that doubles as tests
    /// (`krm_plugin_api::testing::TestEvaluator::check_examples`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<Example>,
    /// Whether it is pure: the same code given the same ResourceList (functionConfig
    /// included) answers the same bytes, and touches nothing outside it (no clock, network,
    /// files or randomness). The runner caches the answers of pure functions
    /// ([`CacheIdentity`]); a plugin from before this field declares none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pure: bool,
}

/// What ran for a call, as the runner's result cache keys it ([`crate::Evaluator::cache_identity`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CacheIdentity {
    /// Whether the function that runs is pure (see [`FunctionSignature::pure`]): its answers
    /// may be cached without an operator saying so.
    pub pure: bool,
    /// What identifies the code that runs beyond the plugin's name and version (which the
    /// runner adds): e.g. the function's name, an executable's content hash, an image digest.
    /// A change of the code must change it, so that a cached answer is never served for code
    /// that did not produce it.
    pub code: String,
    /// The evaluator serves the image but cannot tell before the call what code runs (an
    /// untagged image, whose tag constraint only the call resolves): its calls are never
    /// cached, whatever the operator marks. A runner from before it ignores it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unnamed: bool,
}

impl FunctionSignature {
    /// Whether `name` is this function's short name (the better match) or one of its images.
    pub fn matched_by(&self, name: &str) -> Option<NameMatch> {
        if self.name == name {
            Some(NameMatch::ShortName)
        } else if self.images.iter().any(|image| image == name) {
            Some(NameMatch::Image)
        } else {
            None
        }
    }
}

/// How a name picks a function: a short name beats an image, wherever the two are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameMatch {
    /// The function's short name, e.g. `set-namespace`.
    ShortName,
    /// One of the images it answers to.
    Image,
}

/// The item `name` picks among `items` (in order; `signature` gives each one's signature):
/// the first whose short name it is, else the first with it among its images. How the
/// runner's function catalog and `krm-runner fn NAME` choose.
pub fn pick_function<T>(
    items: impl IntoIterator<Item = T>,
    name: &str,
    signature: impl Fn(&T) -> &FunctionSignature,
) -> Option<T> {
    let mut by_image = None;
    for item in items {
        match signature(&item).matched_by(name) {
            Some(NameMatch::ShortName) => return Some(item),
            Some(NameMatch::Image) if by_image.is_none() => by_image = Some(item),
            _ => {}
        }
    }
    by_image
}

/// A ResourceList a function is given and the one it answers with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Example {
    /// What the example shows.
    pub description: String,
    /// The ResourceList sent (YAML), functionConfig included.
    pub input: String,
    /// The ResourceList expected back (YAML; compared as values, not text).
    pub output: String,
}

/// One functionConfig parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Parameter {
    /// The key in the functionConfig (a ConfigMap's `data` key, or a field).
    pub name: String,
    /// The value's type.
    #[serde(rename = "type")]
    pub parameter_type: ParameterType,
    /// Whether a call without it is refused.
    #[serde(default)]
    pub required: bool,
    /// One line for listings.
    #[serde(default)]
    pub description: String,
    /// A value to show in usage text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
    /// A regular expression a string value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// The allowed values, when the set is closed.
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<String>,
    /// The least allowed integer value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<i64>,
    /// The greatest allowed integer value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<i64>,
}

/// The JSON-schema-like type of a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ParameterType {
    /// Text.
    #[default]
    String,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A map of strings to strings.
    Map,
    /// A list of values.
    List,
    /// A map of any values.
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
