//! The typed functions and what they share.

use std::sync::Arc;

use serde_json::Value;

use crate::api::{
    AttributeValue, FunctionContext, OutputType, Resource, ResourceInfo, ValidationResult,
};
use crate::args::Arguments;
use crate::registry::PathRegistry;
use crate::resource::Unit;
use crate::signature::TypedSignature;

pub mod containers;
pub mod expressions;
pub mod patch;
pub mod path_visitor;
pub mod resources;
pub mod text;
pub mod unit;
pub mod validation;

/// What a function gets: the parsed unit, the checked arguments, the request's context and
/// the path registry.
pub struct Call<'c, 'a> {
    pub unit: &'c Unit<'a>,
    pub arguments: &'c Arguments,
    pub context: &'c FunctionContext,
    pub registry: &'c PathRegistry,
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

/// Every built-in function for Kubernetes/YAML, over `registry`.
pub fn kubernetes(registry: &PathRegistry) -> Vec<Arc<dyn TypedFunction>> {
    let mut functions = path_visitor::kubernetes(registry);
    functions.extend(resources::functions());
    functions.extend(text::functions());
    functions.extend(validation::functions());
    functions.extend(unit::functions());
    functions.extend(containers::functions());
    functions.extend(expressions::functions());
    functions.extend(patch::functions());
    functions
}
