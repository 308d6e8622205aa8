//! The executor's wire types. JSON field names are those of ConfigHub's `function/api` (Go
//! field names, PascalCase), so ConfigHub's own clients can talk to krm-runner; byte fields
//! (`ConfigData`, `LiveState`, `Output`) travel as base64, as Go encodes `[]byte`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The all-zero UUID Go writes for an unset `uuid.UUID`.
pub const NIL_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// Go writes a nil slice or map as `null`: read it as empty.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// An empty list as Go's encoding/json writes a nil slice: `null`. The lists written so are
/// those ConfigHub leaves nil when empty (an invocation's arguments).
fn empty_as_null<S, T>(list: &[T], serializer: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    T: Serialize,
{
    if list.is_empty() {
        serializer.serialize_none()
    } else {
        list.serialize(serializer)
    }
}

/// No output type as Go writes an empty OutputType string: `""` (read back as none).
mod output_type_or_empty {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::OutputType;

    pub fn serialize<S: Serializer>(
        output_type: &Option<OutputType>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match output_type {
            Some(output_type) => output_type.serialize(serializer),
            None => serializer.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<OutputType>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Read {
            Type(OutputType),
            Other(Option<String>),
        }
        match Read::deserialize(deserializer)? {
            Read::Type(output_type) => Ok(Some(output_type)),
            Read::Other(None) => Ok(None),
            Read::Other(Some(text)) if text.is_empty() => Ok(None),
            Read::Other(Some(text)) => Err(serde::de::Error::custom(format!(
                "unknown OutputType {text:?}"
            ))),
        }
    }
}

fn nil_uuid() -> String {
    NIL_UUID.to_owned()
}

/// The data type of a parameter or an attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum DataType {
    #[serde(rename = "")]
    None,
    #[serde(rename = "string")]
    String,
    #[serde(rename = "int")]
    Int,
    #[serde(rename = "bool")]
    Bool,
    #[serde(rename = "enum")]
    Enum,
    AttributeValueList,
    PatchMap,
    ResourceMutationList,
    ResourceList,
    #[serde(rename = "JSON")]
    Json,
    #[serde(rename = "YAML")]
    Yaml,
    Properties,
    #[serde(rename = "TOML")]
    Toml,
    #[serde(rename = "INI")]
    Ini,
    Env,
    #[serde(rename = "HCL")]
    Hcl,
    #[serde(rename = "CEL")]
    Cel,
}

impl DataType {
    /// Whether values of this type travel as JSON strings (all but `int` and `bool`).
    pub fn is_serialized_as_string(self) -> bool {
        !matches!(self, DataType::Int | DataType::Bool | DataType::None)
    }

    /// The name on the wire, e.g. `int`, `AttributeValueList`.
    pub fn as_str(self) -> &'static str {
        match self {
            DataType::None => "",
            DataType::String => "string",
            DataType::Int => "int",
            DataType::Bool => "bool",
            DataType::Enum => "enum",
            DataType::AttributeValueList => "AttributeValueList",
            DataType::PatchMap => "PatchMap",
            DataType::ResourceMutationList => "ResourceMutationList",
            DataType::ResourceList => "ResourceList",
            DataType::Json => "JSON",
            DataType::Yaml => "YAML",
            DataType::Properties => "Properties",
            DataType::Toml => "TOML",
            DataType::Ini => "INI",
            DataType::Env => "Env",
            DataType::Hcl => "HCL",
            DataType::Cel => "CEL",
        }
    }
}

/// The type of a function's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OutputType {
    ValidationResult,
    ValidationResultList,
    AttributeValueList,
    ResourceInfoList,
    ResourceList,
    PatchMap,
    #[serde(rename = "JSON")]
    Json,
    #[serde(rename = "YAML")]
    Yaml,
    Opaque,
    ResourceMutationList,
}

/// Whether a function follows the path-visitor pattern (generated from the path registry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum FunctionType {
    PathVisitor,
    #[default]
    Custom,
}

/// ConfigHub's form of a signature (what `GET /function/kubernetes` lists).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionSignature {
    pub function_name: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub parameters: Vec<FunctionParameter>,
    #[serde(default)]
    pub required_parameters: usize,
    #[serde(default)]
    pub var_args: bool,
    #[serde(default)]
    pub output_info: Option<FunctionOutput>,
    #[serde(default)]
    pub mutating: bool,
    #[serde(default)]
    pub validating: bool,
    #[serde(default)]
    pub hermetic: bool,
    #[serde(default)]
    pub idempotent: bool,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub function_type: FunctionType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub attribute_name: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub affected_resource_types: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionParameter {
    pub parameter_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub required: bool,
    pub data_type: DataType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub example: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub regexp: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub enum_values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionOutput {
    pub result_name: String,
    #[serde(default)]
    pub description: String,
    pub output_type: OutputType,
}

/// Metadata about the unit a sequence runs on (flattened into the request).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionContext {
    #[serde(default)]
    pub toolchain_type: String,
    #[serde(default)]
    pub unit_display_name: String,
    #[serde(default)]
    pub unit_slug: String,
    #[serde(rename = "UnitID", default = "nil_uuid")]
    pub unit_id: String,
    #[serde(default)]
    pub unit_labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub unit_annotations: Option<BTreeMap<String, String>>,
    #[serde(rename = "SpaceID", default = "nil_uuid")]
    pub space_id: String,
    #[serde(default)]
    pub space_slug: String,
    #[serde(rename = "OrganizationID", default = "nil_uuid")]
    pub organization_id: String,
    #[serde(rename = "TargetID", default = "nil_uuid")]
    pub target_id: String,
    #[serde(rename = "BridgeWorkerID", default = "nil_uuid")]
    pub bridge_worker_id: String,
    #[serde(rename = "RevisionID", default = "nil_uuid")]
    pub revision_id: String,
    #[serde(default)]
    pub revision_num: i64,
    #[serde(default)]
    pub new: bool,
    #[serde(default)]
    pub previous_content_hash: i32,
    #[serde(default)]
    pub approved_by: Option<Vec<String>>,
}

impl Default for FunctionContext {
    fn default() -> Self {
        Self {
            toolchain_type: KUBERNETES_YAML.to_owned(),
            unit_display_name: String::new(),
            unit_slug: String::new(),
            unit_id: nil_uuid(),
            unit_labels: None,
            unit_annotations: None,
            space_id: nil_uuid(),
            space_slug: String::new(),
            organization_id: nil_uuid(),
            target_id: nil_uuid(),
            bridge_worker_id: nil_uuid(),
            revision_id: nil_uuid(),
            revision_num: 0,
            new: false,
            previous_content_hash: 0,
            approved_by: None,
        }
    }
}

/// The toolchain of Kubernetes resources in YAML.
pub const KUBERNETES_YAML: &str = "Kubernetes/YAML";

/// ConfigHub's HashConfigData: the CRC-32 (IEEE) of the data, as its `RevisionHash`, an
/// int32 (`PreviousContentHash`). fctl fills an unset `PreviousContentHash` with it.
pub fn hash_config_data(data: &[u8]) -> i32 {
    i32::from_ne_bytes(crc32fast::hash(data).to_ne_bytes())
}
/// The toolchain of Java `.properties` files.
pub const APPCONFIG_PROPERTIES: &str = "AppConfig/Properties";

/// One argument: named, or positional when `ParameterName` is absent. The value is a string,
/// an integer or a boolean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionArgument {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parameter_name: String,
    pub value: Value,
}

impl FunctionArgument {
    pub fn named(name: impl Into<String>, value: impl Into<Value>) -> Self {
        Self {
            parameter_name: name.into(),
            value: value.into(),
        }
    }

    pub fn positional(value: impl Into<Value>) -> Self {
        Self {
            parameter_name: String::new(),
            value: value.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionInvocation {
    pub function_name: String,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        serialize_with = "empty_as_null"
    )]
    pub arguments: Vec<FunctionArgument>,
}

impl FunctionInvocation {
    pub fn new(function_name: impl Into<String>, arguments: Vec<FunctionArgument>) -> Self {
        Self {
            function_name: function_name.into(),
            arguments,
        }
    }
}

/// A unit's data, its context, and the invocations to run over it in order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionInvocationRequest {
    #[serde(flatten)]
    pub context: FunctionContext,
    #[serde(default, with = "base64_bytes")]
    pub config_data: Vec<u8>,
    #[serde(default, with = "base64_bytes")]
    pub live_state: Vec<u8>,
    /// Integer and boolean arguments arrive as strings and are converted.
    #[serde(default)]
    pub cast_string_args_to_scalars: bool,
    /// The first N validating invocations are filters: one that fails ends the sequence
    /// quietly (no error, no output of its own).
    #[serde(default)]
    pub num_filters: usize,
    #[serde(default)]
    pub stop_on_error: bool,
    /// One ValidationResult for all validating invocations instead of a list.
    #[serde(default)]
    pub combine_validation_results: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub function_invocations: Vec<FunctionInvocation>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FunctionInvocationResponse {
    #[serde(rename = "OrganizationID")]
    pub organization_id: String,
    #[serde(rename = "SpaceID")]
    pub space_id: String,
    #[serde(rename = "UnitID")]
    pub unit_id: String,
    #[serde(rename = "RevisionID")]
    pub revision_id: String,
    #[serde(with = "base64_bytes")]
    pub config_data: Vec<u8>,
    /// The combined output as JSON text (`null` when no invocation produced one).
    #[serde(with = "base64_bytes")]
    pub output: Vec<u8>,
    /// Absent when no invocation produced output (`""` in the JSON, as Go writes it).
    #[serde(default, with = "output_type_or_empty")]
    pub output_type: Option<OutputType>,
    /// Per resource, in the order of the resulting data (deleted resources last).
    #[serde(default, deserialize_with = "null_as_default")]
    pub mutations: Vec<ResourceMutation>,
    /// Indices of the invocations that changed the data.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mutators: Vec<usize>,
    /// Every invocation ran without error (not the validation verdict).
    pub success: bool,
    #[serde(default, deserialize_with = "null_as_default")]
    pub error_messages: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResourceInfo {
    /// Kubernetes: `namespace/name` (`/name` without a namespace).
    pub resource_name: String,
    /// Newer than the other fields in ConfigHub: lists written before it lack it.
    #[serde(default)]
    pub resource_name_without_scope: String,
    /// Kubernetes: `apiVersion/kind`, e.g. `apps/v1/Deployment`, `v1/Service`.
    pub resource_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_category: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Resource {
    #[serde(flatten)]
    pub info: ResourceInfo,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_body: String,
}

/// How to read or write an attribute again.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub getter_invocation: Option<FunctionInvocation>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub setter_invocations: Vec<FunctionInvocation>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub generation_template: String,
    #[serde(default, skip_serializing_if = "Description::is_empty")]
    pub description: Description,
}

impl AttributeDetails {
    /// Nothing to say: written as no Info at all, as ConfigHub leaves Info nil until a
    /// function or a description is added.
    pub fn is_empty(&self) -> bool {
        self.getter_invocation.is_none()
            && self.setter_invocations.is_empty()
            && self.generation_template.is_empty()
            && self.description.is_empty()
    }
}

/// Whether an Info is absent or empty (see [`AttributeDetails::is_empty`]).
pub fn no_details(info: &Option<AttributeDetails>) -> bool {
    info.as_ref().is_none_or(AttributeDetails::is_empty)
}

/// What an attribute is: the registrant's words, or a field's description in the Kubernetes
/// schema, looked up only when written out (the registry is built at every start-up; the
/// schema is read on the first description written).
#[derive(Debug, Clone, Default)]
pub enum Description {
    #[default]
    None,
    Text(String),
    /// The schema's description of `path` in `resource_type`; none when the schema has no
    /// such field (ConfigHub's addDescriptionToPathInfos leaves those without one too).
    Schema {
        resource_type: String,
        path: String,
    },
}

impl Description {
    pub fn text(&self) -> &str {
        match self {
            Self::None => "",
            Self::Text(text) => text,
            Self::Schema {
                resource_type,
                path,
            } => krm_kube_schema::schema()
                .ok()
                .and_then(|schema| schema.description(resource_type, path))
                .unwrap_or_default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.text().is_empty()
    }
}

/// Descriptions are equal when their texts are: one read back from JSON equals the schema
/// lookup it was written from.
impl PartialEq for Description {
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl Eq for Description {}

impl Serialize for Description {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.text())
    }
}

impl<'de> Deserialize<'de> for Description {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Option::<String>::deserialize(deserializer)?.unwrap_or_default();
        Ok(if text.is_empty() {
            Self::None
        } else {
            Self::Text(text)
        })
    }
}

/// One attribute found in a resource: where, what, its value and how to change it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeValue {
    #[serde(flatten)]
    pub resource: ResourceInfo,
    /// The resolved path (dots inside keys escaped as `~1`), with `#accessor` when the value
    /// is a part of the scalar.
    pub path: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_live_state: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub attribute_name: String,
    pub data_type: DataType,
    #[serde(default, skip_serializing_if = "no_details")]
    pub info: Option<AttributeDetails>,
    pub value: Value,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ValidationResult {
    pub passed: bool,
    /// The invocation's index (set when results are listed, not combined).
    #[serde(default)]
    pub index: usize,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub details: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub failed_attributes: Vec<AttributeValue>,
}

impl ValidationResult {
    pub fn passed() -> Self {
        Self {
            passed: true,
            index: 0,
            details: Vec::new(),
            failed_attributes: Vec::new(),
        }
    }

    pub fn failed(details: Vec<String>) -> Self {
        Self {
            passed: false,
            details,
            ..Self::passed()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MutationType {
    None,
    Add,
    Update,
    Replace,
    Delete,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MutationInfo {
    pub mutation_type: MutationType,
    /// The invocation that made the change.
    pub index: i64,
    #[serde(default)]
    pub predicate: bool,
    /// The new data, or the removed data for a Delete.
    #[serde(default)]
    pub value: String,
}

/// What happened to one resource, and to each of its paths.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ResourceMutation {
    pub resource: ResourceInfo,
    pub resource_mutation_info: MutationInfo,
    /// Resolved path -> mutation; deeper paths override shallower ones.
    #[serde(default, deserialize_with = "null_as_default")]
    pub path_mutation_map: BTreeMap<String, MutationInfo>,
    /// Names (with scopes) the resource had in the data compared and merged.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty", with = "name_set")]
    pub aliases: BTreeSet<String>,
    /// The same names without scopes.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty", with = "name_set")]
    pub aliases_without_scopes: BTreeSet<String>,
}

/// A set of names as Go writes a `map[ResourceName]struct{}`: `{"name": {}}`, keys sorted;
/// `null` reads as empty.
mod name_set {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::de::IgnoredAny;
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Go's `struct{}`.
    #[derive(serde::Serialize)]
    struct Present {}

    pub fn serialize<S: Serializer>(
        names: &BTreeSet<String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(names.len()))?;
        for name in names {
            map.serialize_entry(name, &Present {})?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeSet<String>, D::Error> {
        let names: Option<BTreeMap<String, IgnoredAny>> = Option::deserialize(deserializer)?;
        Ok(names.unwrap_or_default().into_keys().collect())
    }
}

/// `{"Payload": "..."}`, the output of YAML-typed functions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct YamlPayload {
    pub payload: String,
}

/// `output` (a response's `Output` of type `output_type`) as fctl prints it: a YAML output is
/// its payload; any other is JSON indented by two spaces, fields in the order of their type.
/// `None` when there is no output. An output that does not read as its declared type is an
/// error.
pub fn render_output(
    output_type: Option<OutputType>,
    output: &[u8],
) -> Result<Option<String>, serde_json::Error> {
    fn typed<T: serde::de::DeserializeOwned + Serialize>(
        output: &[u8],
    ) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(&serde_json::from_slice::<T>(output)?)
    }
    let Some(output_type) = output_type else {
        return Ok(None);
    };
    if output.is_empty() || output == b"null" {
        return Ok(None);
    }
    let rendered = match output_type {
        // The executor writes these from their types (`functions::Output::to_json`; a plugin's
        // are read into them first), so they are re-indented as they stream instead of read
        // back: the largest outputs (an attribute per resource) are these.
        OutputType::ValidationResult
        | OutputType::AttributeValueList
        | OutputType::ResourceInfoList
        | OutputType::ResourceList => indented(output)?,
        OutputType::ValidationResultList => typed::<Vec<ValidationResult>>(output)?,
        OutputType::ResourceMutationList => typed::<Vec<ResourceMutation>>(output)?,
        OutputType::Yaml => serde_json::from_slice::<YamlPayload>(output)?.payload,
        OutputType::PatchMap | OutputType::Json | OutputType::Opaque => typed::<Value>(output)?,
    };
    Ok(Some(rendered))
}

/// JSON text indented by two spaces, its fields in the order they come.
fn indented(json: &[u8]) -> Result<String, serde_json::Error> {
    let mut reader = serde_json::Deserializer::from_slice(json);
    let mut text = Vec::with_capacity(json.len() * 2);
    serde_transcode::transcode(&mut reader, &mut serde_json::Serializer::pretty(&mut text))?;
    reader.end()?;
    Ok(String::from_utf8(text).expect("serde_json writes UTF-8"))
}

mod base64_bytes {
    use base64::{Engine, engine::general_purpose::STANDARD};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text: Option<String> = Option::deserialize(deserializer)?;
        match text {
            None => Ok(Vec::new()),
            Some(text) => STANDARD
                .decode(text.as_bytes())
                .map_err(|e| serde::de::Error::custom(format!("not base64: {e}"))),
        }
    }
}
