//! The typed functions and what they share.

use std::sync::Arc;

use krm_plugin_api::{CallContext, CancelReason, ErrorKind, EvalError};
use serde_json::Value;

use crate::api::{
    AttributeValue, FunctionContext, OutputType, Resource, ResourceInfo, ValidationResult,
};
use crate::args::Arguments;
use crate::go_json;
use crate::registry::PathRegistry;
use crate::resource::Unit;
use crate::signature::TypedSignature;
use crate::toolchain::{NativeData, Toolchain};
use crate::yaml::ParseError;
pub use definition::Definition;
// What a function's work stopped by the call's end fails with ([`FunctionError::Stopped`]).
pub use crate::yaml::Stopped;

pub mod containers;
pub mod definition;
pub mod expressions;
pub mod patch;
pub mod path_visitor;
pub mod resources;
pub mod text;
pub mod unit;
pub mod validation;

/// What a function gets: the parsed unit, the checked arguments, the request's context, the
/// path registry, the toolchain (whose format native-data arguments are in, and which says
/// where a resource keeps its name and context), the call's deadline and cancellation (every
/// loop over resources, paths, matches or copies asks [`Call::stop_if_cancelled`]: the caller
/// stops waiting long before a large unit is done) and the largest unit text the answer may
/// carry (a function that multiplies its input checks the size it is about to build against
/// it with [`Call::check_output_size`] first).
pub struct Call<'c, 'a, 'k> {
    pub unit: &'c Unit<'a>,
    pub arguments: &'c Arguments,
    pub context: &'c FunctionContext,
    pub registry: &'c PathRegistry,
    pub toolchain: Toolchain,
    pub cancellation: &'c CallContext<'k>,
    /// The runner's `max_message_bytes`: no unit text larger than this can be answered.
    pub max_message_bytes: usize,
    /// The unit's live state as the request carries it (`LiveState`), empty without one.
    pub live_state: &'c [u8],
    /// The data in its toolchain's own format, which `unit` is the model of: what writes
    /// the model back as the data stands.
    pub native: &'c NativeData,
}

/// Why a typed function gave no outcome.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// The call ended (cancelled, or past its deadline) while the function worked; the
    /// executor answers why the call ended, not this.
    #[error(transparent)]
    Stopped(#[from] Stopped),
    /// The unit text the function would build is larger than a call may answer.
    #[error("{what} would be {size} bytes, more than max_message_bytes {max_message_bytes}")]
    OutputTooLarge {
        /// What the text is (`the unit after upsert-resource`).
        what: String,
        /// Its size in bytes.
        size: usize,
        /// The runner's `max_message_bytes`.
        max_message_bytes: usize,
    },
    /// The unit, an argument or a resource does not allow what the function does; the message
    /// names which.
    #[error("{0}")]
    Failed(String),
    /// A text the function reads or builds is not YAML it can work on.
    #[error(transparent)]
    Unparsable(#[from] ParseError),
    /// A function a plugin contributes failed in the plugin.
    #[error(transparent)]
    Plugin(#[from] EvalError),
}

impl FunctionError {
    /// Why the call ended, when this error says it did: a plugin's function stopped by the
    /// call's deadline or its caller.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        match self {
            FunctionError::Plugin(error) => match error.kind {
                ErrorKind::DeadlineExceeded => Some(CancelReason::DeadlineExceeded),
                ErrorKind::Cancelled => Some(CancelReason::CallerCancelled),
                _ => None,
            },
            _ => None,
        }
    }
}

impl From<String> for FunctionError {
    fn from(message: String) -> Self {
        FunctionError::Failed(message)
    }
}

impl From<&str> for FunctionError {
    fn from(message: &str) -> Self {
        FunctionError::Failed(message.to_owned())
    }
}

impl Call<'_, '_, '_> {
    /// `text` parsed as a unit of the call's toolchain's model.
    pub fn parse_model<'t>(&self, text: &'t str) -> Result<Unit<'t>, ParseError> {
        self.toolchain.parse(text)
    }

    /// An error once the call is cancelled or past its deadline.
    pub fn stop_if_cancelled(&self) -> Result<(), Stopped> {
        match self.cancellation.cancel_reason() {
            Some(_) => Err(Stopped),
            None => Ok(()),
        }
    }

    /// Refuses to build a unit text of `size` bytes (`what` it is) over `max_message_bytes`.
    pub fn check_output_size(&self, size: usize, what: &str) -> Result<(), FunctionError> {
        if size > self.max_message_bytes {
            return Err(FunctionError::OutputTooLarge {
                what: what.to_owned(),
                size,
                max_message_bytes: self.max_message_bytes,
            });
        }
        Ok(())
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
    /// The output as JSON text as Go writes it, fields in the order of their types.
    pub fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        match self {
            Output::Attributes(a) => go_json::to_vec(a),
            Output::ResourceInfos(r) => go_json::to_vec(r),
            Output::Resources(r) => go_json::to_vec(r),
            Output::Validation(v) => go_json::to_vec(v),
            Output::Other(_, v) => go_json::to_vec(v),
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

/// A function the executor can run. Its errors' messages are the response's.
pub trait TypedFunction: Send + Sync {
    fn signature(&self) -> &TypedSignature;

    /// Problems with checked arguments that only the function can see (an expression that
    /// does not compile), each naming its parameter; asked before the function runs.
    fn check(&self, _arguments: &Arguments) -> Vec<String> {
        Vec::new()
    }

    fn run(&self, call: &Call) -> Result<Outcome, FunctionError>;
}

/// Every built-in function that is not a path visitor, each for the toolchains it names.
/// ConfigHub's generic functions (`generic.RegisterStandardFunctions`) serve every toolchain.
pub static BUILT_IN: &[&Definition] = &[
    &resources::GET_RESOURCES,
    &resources::GET_RESOURCES_OF_TYPE,
    &resources::UPSERT_RESOURCE,
    &resources::REPLICATE,
    &resources::DELETE_RESOURCE,
    &text::SEARCH_REPLACE,
    &validation::WHERE_FILTER,
    &validation::VALIDATE,
    &validation::PROPERTIES_VALIDATE,
    &validation::GET_PLACEHOLDERS,
    &validation::NO_PLACEHOLDERS,
    &validation::IS_APPROVED,
    &expressions::CEL_VALIDATE,
    &expressions::YQ,
    &unit::GET_ATTRIBUTES,
    &unit::GET_DETAILS,
    &unit::GET_NEEDED,
    &unit::GET_NEEDED_NAMESPACES,
    &unit::GET_PROVIDED,
    &unit::SET_ATTRIBUTES,
    &unit::SET_DEFAULT_NAMES,
    &unit::RESET,
    &unit::SET_REFERENCES_OF_TYPE,
    &unit::ENSURE_NAMESPACES,
    &unit::ENSURE_CONTEXT_KUBERNETES,
    &unit::ENSURE_CONTEXT_PROPERTIES,
    &unit::SET_PATH_COMMENT,
    &unit::COMPUTE_MUTATIONS,
    &patch::PATCH_MUTATIONS,
    &containers::SET_POD_DEFAULTS,
    &containers::SET_CONTAINER_RESOURCES,
    &containers::SET_IMAGE_REFERENCE_BY_URI,
    &containers::SET_ENV,
];

/// Every built-in function of `toolchain`: its path visitors over `registry` and the
/// [`BUILT_IN`] functions that serve it.
pub fn built_in(toolchain: Toolchain, registry: &PathRegistry) -> Vec<Arc<dyn TypedFunction>> {
    let mut functions = match toolchain {
        Toolchain::KubernetesYaml => path_visitor::kubernetes(registry),
        Toolchain::AppConfigProperties => path_visitor::arbitrary_paths(),
    };
    functions.extend(
        BUILT_IN
            .iter()
            .filter(|definition| definition.toolchains.contains(&toolchain))
            .map(|definition| definition.function(toolchain)),
    );
    functions
}

#[cfg(test)]
mod tests {
    use krm_plugin_api::CancelReason;
    use krm_plugin_api::host::HostCallContext;
    use serde_json::json;

    use super::*;
    use crate::api::{FunctionArgument, FunctionInvocation};

    use crate::{Executor, args};

    /// Runs `function` with `arguments` over `text` within `call`, as the executor would.
    fn run(
        executor: &Executor,
        text: &str,
        function: &str,
        arguments: Vec<serde_json::Value>,
        call: &CallContext<'_>,
        max_message_bytes: usize,
    ) -> Result<Outcome, FunctionError> {
        let invocation = FunctionInvocation::new(
            function,
            arguments
                .into_iter()
                .map(FunctionArgument::positional)
                .collect(),
        );
        let typed = executor.function(function).expect("a built-in function");
        let arguments = args::check(typed.signature(), &invocation).expect("valid arguments");
        let unit = Toolchain::KubernetesYaml
            .parse_owned(text.to_owned())
            .unwrap();
        typed.run(&Call {
            unit: unit.unit(),
            arguments: &arguments,
            context: &FunctionContext::default(),
            registry: executor.registry(),
            toolchain: Toolchain::KubernetesYaml,
            cancellation: call,
            max_message_bytes,
            live_state: &[],
            native: &NativeData::Yaml,
        })
    }

    fn invocations() -> Vec<(&'static str, Vec<serde_json::Value>)> {
        vec![
            ("search-replace", vec![json!("v"), json!("w")]),
            (
                "replicate",
                vec![json!("v1/ConfigMap"), json!("c1"), json!(3)],
            ),
            (
                "set-string-path",
                vec![json!("*"), json!("data.value"), json!("w")],
            ),
            ("get-string-path", vec![json!("*"), json!("data.value")]),
            (
                "where-filter",
                vec![json!("*"), json!("metadata.name LIKE 'c%'")],
            ),
            ("cel-validate", vec![json!("r.kind == 'ConfigMap'")]),
            ("yq", vec![json!(".metadata.name")]),
            ("get-placeholders", vec![]),
            ("validate", vec![]),
            ("get-resources", vec![]),
            ("ensure-context", vec![json!(true)]),
        ]
    }

    const UNIT: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\ndata:\n  value: v\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c2\ndata:\n  value: v\n";

    #[test]
    fn functions_stop_inside_their_loops_once_the_call_is_cancelled() {
        let executor = Executor::kubernetes();
        let live = HostCallContext::new(None);
        let cancelled = HostCallContext::new(None);
        cancelled.cancel(CancelReason::CallerCancelled);
        for (function, arguments) in invocations() {
            let ran = run(
                &executor,
                UNIT,
                function,
                arguments.clone(),
                &live.as_call_context(),
                1 << 20,
            );
            assert!(ran.is_ok(), "{function}: {ran:?}");
            let stopped = run(
                &executor,
                UNIT,
                function,
                arguments,
                &cancelled.as_call_context(),
                1 << 20,
            );
            assert!(
                matches!(stopped, Err(FunctionError::Stopped(_))),
                "{function}: {stopped:?}"
            );
        }
    }

    #[test]
    fn amplifying_functions_refuse_before_building_over_the_limit() {
        let executor = Executor::kubernetes();
        let call = HostCallContext::new(None);
        let call = call.as_call_context();
        let limit = UNIT.len() + 100;
        for (function, arguments) in [
            ("search-replace", vec![json!("v"), json!("w".repeat(200))]),
            ("replicate", vec![json!("v1/ConfigMap"), json!("c1"), json!(3)]),
            (
                "set-string-path",
                vec![json!("*"), json!("data.value"), json!("w".repeat(200))],
            ),
            (
                "upsert-resource",
                vec![
                    json!(
                        json!([{
                            "ResourceName": "/c3",
                            "ResourceNameWithoutScope": "c3",
                            "ResourceType": "v1/ConfigMap",
                            "ResourceCategory": "Resource",
                            "ResourceBody": format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c3\ndata:\n  value: {}\n", "w".repeat(200)),
                        }])
                        .to_string()
                    ),
                    json!("v1/ConfigMap"),
                    json!("c3"),
                ],
            ),
        ] {
            let refused = run(&executor, UNIT, function, arguments, &call, limit);
            let problem = refused.map(drop).unwrap_err().to_string();
            assert!(
                problem.contains(&format!("bytes, more than max_message_bytes {limit}")),
                "{function}: {problem}"
            );
        }
    }
}
