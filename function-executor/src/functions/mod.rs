//! The typed functions and what they share.

use std::sync::Arc;

use krm_plugin_api::CallContext;
use serde_json::Value;

use crate::api::{
    AttributeValue, FunctionContext, OutputType, Resource, ResourceInfo, ValidationResult,
};
use crate::args::Arguments;
use crate::registry::PathRegistry;
use crate::resource::Unit;
use crate::signature::TypedSignature;
use crate::toolchain::Toolchain;

pub mod containers;
pub mod expressions;
pub mod patch;
pub mod path_visitor;
pub mod resources;
pub mod text;
pub mod unit;
pub mod validation;

/// What a function gets: the parsed unit, the checked arguments, the request's context, the
/// path registry, the toolchain (whose format native-data arguments are in, and which says
/// where a resource keeps its name and context), and the call's deadline and cancellation (a
/// long function may stop when the call is cancelled; the executor checks it between
/// invocations).
pub struct Call<'c, 'a, 'k> {
    pub unit: &'c Unit<'a>,
    pub arguments: &'c Arguments,
    pub context: &'c FunctionContext,
    pub registry: &'c PathRegistry,
    pub toolchain: Toolchain,
    pub cancellation: &'c CallContext<'k>,
}

impl Call<'_, '_, '_> {
    /// `text` parsed as a unit of the call's toolchain's model.
    pub fn parse_model<'t>(&self, text: &'t str) -> Result<Unit<'t>, String> {
        Unit::parse_as(text, self.toolchain)
    }
}

/// What a function returns.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The new text of the unit, when the function changed it.
    pub text: Option<String>,
    pub output: Option<Output>,
}

impl Outcome {
    pub fn output(output: Output) -> Self {
        Self {
            text: None,
            output: Some(output),
        }
    }

    pub fn text(text: String) -> Self {
        Self {
            text: Some(text),
            output: None,
        }
    }
}

/// A function's output, typed so that the executor can combine outputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Validation(ValidationResult),
    Attributes(Vec<AttributeValue>),
    ResourceInfos(Vec<ResourceInfo>),
    Resources(Vec<Resource>),
    /// Any other type, as JSON.
    Other(OutputType, Value),
}

impl Output {
    /// The output as JSON text, fields in the order of their types.
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        match self {
            Output::Attributes(a) => serde_json::to_vec(a),
            Output::ResourceInfos(r) => serde_json::to_vec(r),
            Output::Resources(r) => serde_json::to_vec(r),
            Output::Validation(v) => serde_json::to_vec(v),
            Output::Other(_, v) => serde_json::to_vec(v),
        }
    }

    /// The output of type `output_type` read back from its JSON text.
    pub fn from_json(output_type: OutputType, json: &[u8]) -> serde_json::Result<Self> {
        Ok(match output_type {
            OutputType::ValidationResult => Output::Validation(serde_json::from_slice(json)?),
            OutputType::AttributeValueList => Output::Attributes(serde_json::from_slice(json)?),
            OutputType::ResourceInfoList => Output::ResourceInfos(serde_json::from_slice(json)?),
            OutputType::ResourceList => Output::Resources(serde_json::from_slice(json)?),
            other => Output::Other(other, serde_json::from_slice(json)?),
        })
    }

    pub fn output_type(&self) -> OutputType {
        match self {
            Output::Validation(_) => OutputType::ValidationResult,
            Output::Attributes(_) => OutputType::AttributeValueList,
            Output::ResourceInfos(_) => OutputType::ResourceInfoList,
            Output::Resources(_) => OutputType::ResourceList,
            Output::Other(output_type, _) => *output_type,
        }
    }
}

/// A function the executor can run. Errors are messages for the response.
pub trait TypedFunction: Send + Sync {
    fn signature(&self) -> &TypedSignature;

    /// Problems with checked arguments that only the function can see (an expression that
    /// does not compile), each naming its parameter; asked before the function runs.
    fn check(&self, _arguments: &Arguments) -> Vec<String> {
        Vec::new()
    }

    fn run(&self, call: &Call) -> Result<Outcome, String>;
}

/// The generic functions ConfigHub's `generic.RegisterStandardFunctions` registers, which it
/// registers for AppConfig/Properties too; each works on the YAML model of any toolchain.
pub const GENERIC_FOR_PROPERTIES: &[&str] = &[
    "get-resources",
    "get-resources-of-type",
    "set-references-of-type",
    "get-placeholders",
    "no-placeholders",
    "search-replace",
    "set-path-comment",
    "set-default-names",
    "get-attributes",
    "set-attributes",
    "get-needed",
    "get-provided",
    "cel-validate",
    "where-filter",
    "yq",
    "is-approved",
    "ensure-context",
    "get-details",
    "upsert-resource",
    "delete-resource",
    "compute-mutations",
    "patch-mutations",
    "reset",
    "replicate",
];

/// Every built-in function for AppConfig/Properties: the arbitrary-path getters and setters,
/// the generic functions of [`GENERIC_FOR_PROPERTIES`] and its own `validate`.
pub fn properties() -> Vec<Arc<dyn TypedFunction>> {
    let toolchain = Toolchain::AppConfigProperties;
    let mut functions = path_visitor::arbitrary_paths();
    functions.extend(
        resources::functions()
            .into_iter()
            .chain(text::functions())
            .chain(validation::functions())
            .chain(expressions::functions())
            .chain(unit::functions(toolchain))
            .chain(patch::functions())
            .filter(|function| GENERIC_FOR_PROPERTIES.contains(&function.signature().name())),
    );
    functions.push(validation::properties_validate());
    functions
}

/// Every built-in function for Kubernetes/YAML, over `registry`.
pub fn kubernetes(registry: &PathRegistry) -> Vec<Arc<dyn TypedFunction>> {
    let mut functions = path_visitor::kubernetes(registry);
    functions.extend(resources::functions());
    functions.extend(text::functions());
    functions.extend(validation::functions());
    functions.extend(unit::functions(Toolchain::KubernetesYaml));
    functions.extend(containers::functions());
    functions.extend(expressions::functions());
    functions.extend(patch::functions());
    functions
}
