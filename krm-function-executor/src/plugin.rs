//! Typed functions contributed by evaluator plugins, both sides of the plugin ABI.
//!
//! - In the plugin, [`PluginFunctions`] holds the plugin's [`TypedFunction`]s (the trait the
//!   builtin functions implement) and answers the ABI: the evaluator returns it from
//!   [`krm_plugin_api::Evaluator::typed_functions`].
//! - In the runner, [`contributed`] turns a plugin's set into [`TypedFunction`]s the executor
//!   registers next to its own: arguments are checked against the plugin's signature before
//!   the plugin is called, and the plugin's answer becomes the invocation's outcome.
//!
//! On the wire, a call is a FunctionInvocationRequest holding the one invocation (arguments
//! checked and named, the unit's current text, the request's context) and the answer a
//! FunctionInvocationResponse (`Success`, `ErrorMessages`, `Output`, `OutputType`, and, when
//! the function returned new text, `Mutators: [0]` with that text as `ConfigData`, which is
//! empty otherwise), in the JSON of ConfigHub's HTTP route.

use std::sync::Arc;

use krm_plugin_api::{CallContext, EvalError, TypedFunctionSet};

use crate::api::{
    FunctionArgument, FunctionInvocation, FunctionInvocationRequest, FunctionInvocationResponse,
};
use crate::args;
use crate::executor::{Executor, RegistrationError};
use crate::functions::{Call, FunctionError, Outcome, Output, TypedFunction};
use crate::registry::PathRegistry;
use crate::signature::TypedSignature;

/// The typed functions a plugin contributes, served through the ABI.
///
/// ```text
/// struct Mine { typed: PluginFunctions }
/// impl Evaluator for Mine {
///     // evaluate(...) as usual
///     fn typed_functions(&self) -> Option<&dyn TypedFunctionSet> { Some(&self.typed) }
/// }
/// // in build: PluginFunctions::new(vec![Arc::new(CountReplicas::new())])?
/// ```
pub struct PluginFunctions {
    executor: Executor,
}

impl PluginFunctions {
    /// `functions`, over an empty path registry.
    pub fn new(functions: Vec<Arc<dyn TypedFunction>>) -> Result<Self, RegistrationError> {
        Self::with_registry(PathRegistry::default(), functions)
    }

    /// `functions`, over `registry` (e.g. [`PathRegistry::kubernetes`] for functions that
    /// visit the registered paths).
    pub fn with_registry(
        registry: PathRegistry,
        functions: Vec<Arc<dyn TypedFunction>>,
    ) -> Result<Self, RegistrationError> {
        let mut executor = Executor::empty(registry);
        for function in functions {
            executor.register(function)?;
        }
        Ok(Self { executor })
    }
}

impl TypedFunctionSet for PluginFunctions {
    fn signatures_json(&self) -> String {
        let signatures: Vec<&TypedSignature> =
            self.executor.functions().map(|f| f.signature()).collect();
        serde_json::to_string(&signatures).unwrap_or_else(|_| "[]".to_owned())
    }

    fn invoke(
        &self,
        context: &CallContext<'_>,
        function: &str,
        request: &[u8],
    ) -> Result<Vec<u8>, EvalError> {
        let Some(typed) = self.executor.function(function) else {
            return Err(EvalError::not_found(function));
        };
        let request: FunctionInvocationRequest = serde_json::from_slice(request).map_err(|e| {
            EvalError::invalid_input(format!("{function}: unreadable request: {e}"))
        })?;
        let [invocation] = request.function_invocations.as_slice() else {
            return Err(EvalError::invalid_input(format!(
                "{function}: a request holds exactly one invocation, not {}",
                request.function_invocations.len()
            )));
        };
        let text = String::from_utf8(request.config_data)
            .map_err(|e| EvalError::invalid_input(format!("{function}: config data: {e}")))?;
        let mut response = FunctionInvocationResponse {
            output: b"null".to_vec(),
            success: true,
            ..FunctionInvocationResponse::default()
        };
        let arguments = match args::check(typed.signature(), invocation) {
            Ok(arguments) => arguments,
            Err(problems) => {
                response.success = false;
                response.error_messages = problems;
                return encode(&response);
            }
        };
        let unit = crate::Toolchain::KubernetesYaml
            .parse_owned(text)
            .map_err(|e| EvalError::invalid_input(format!("{function}: config data: {e}")))?;
        let call = Call {
            unit: unit.unit(),
            arguments: &arguments,
            context: &request.context,
            registry: self.executor.registry(),
            toolchain: self.executor.toolchain(),
            cancellation: context,
            max_message_bytes: self.executor.max_message_bytes(),
            live_state: &request.live_state,
            native: &crate::toolchain::NativeData::Yaml,
        };
        match typed.run(&call) {
            Ok(outcome) => {
                if let Some(text) = outcome.text {
                    response.config_data = text.into_bytes();
                    response.mutators = vec![0];
                }
                if let Some(output) = outcome.output {
                    response.output_type = Some(output.output_type());
                    response.output = output
                        .to_json()
                        .map_err(|e| EvalError::internal(format!("{function}: output: {e}")))?;
                }
            }
            // Stopped because the call ended: the caller (a worker's sequence) hears why, as an
            // error of that kind, and ends its sequence rather than going on.
            Err(error) => match (&error, context.cancel_reason()) {
                (FunctionError::Stopped(_), Some(reason)) => return Err(reason.to_error(function)),
                _ => {
                    response.success = false;
                    response.error_messages = vec![error.to_string()];
                }
            },
        }
        encode(&response)
    }
}

fn encode(response: &FunctionInvocationResponse) -> Result<Vec<u8>, EvalError> {
    serde_json::to_vec(response).map_err(|e| EvalError::internal(e.to_string()))
}

/// A problem with what a plugin contributes, found while gathering (the function is left out).
#[derive(Debug, thiserror::Error)]
pub enum ContributionError {
    #[error("unreadable typed function signatures ({0})")]
    Unreadable(#[source] serde_json::Error),
    #[error("typed function name {0:?} is not [a-z0-9_-]+")]
    BadName(String),
}

/// The typed functions `set` contributes, each calling it by its own name. Signatures that do
/// not read or names that are not fctl's (`[a-z0-9_-]+`) are problems; the other functions
/// still come.
pub fn contributed(
    set: Arc<dyn TypedFunctionSet>,
) -> (Vec<Arc<RemoteFunction>>, Vec<ContributionError>) {
    let json = set.signatures_json();
    if json.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let signatures: Vec<TypedSignature> = match serde_json::from_str(&json) {
        Ok(signatures) => signatures,
        Err(error) => return (Vec::new(), vec![ContributionError::Unreadable(error)]),
    };
    let mut functions = Vec::new();
    let mut problems = Vec::new();
    for signature in signatures {
        let name = signature.name();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !valid {
            problems.push(ContributionError::BadName(name.to_owned()));
            continue;
        }
        functions.push(Arc::new(RemoteFunction {
            remote_name: name.to_owned(),
            signature,
            set: set.clone(),
        }));
    }
    (functions, problems)
}

/// A plugin's typed function as the runner's executor sees it.
pub struct RemoteFunction {
    /// The name the plugin knows it by.
    remote_name: String,
    /// Its signature, under the name it is registered with here.
    signature: TypedSignature,
    set: Arc<dyn TypedFunctionSet>,
}

impl RemoteFunction {
    /// The name the plugin gave it.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }

    /// The same function registered under `name` (e.g. `INSTANCE/NAME`).
    pub fn renamed(&self, name: &str) -> Self {
        let mut signature = self.signature.clone();
        signature.base.name = name.to_owned();
        Self {
            remote_name: self.remote_name.clone(),
            signature,
            set: self.set.clone(),
        }
    }
}

impl TypedFunction for RemoteFunction {
    fn signature(&self) -> &TypedSignature {
        &self.signature
    }

    fn run(&self, call: &Call) -> Result<Outcome, FunctionError> {
        let arguments = call
            .arguments
            .0
            .iter()
            .map(|(name, value)| FunctionArgument::named(name.as_str(), value.to_json()))
            .collect();
        let request = FunctionInvocationRequest {
            context: call.context.clone(),
            config_data: call.unit.doc.src.as_bytes().to_vec(),
            function_invocations: vec![FunctionInvocation::new(
                self.remote_name.as_str(),
                arguments,
            )],
            ..FunctionInvocationRequest::default()
        };
        let request = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
        let answer = self
            .set
            .invoke(call.cancellation, &self.remote_name, &request)?;
        let response: FunctionInvocationResponse = serde_json::from_slice(&answer)
            .map_err(|e| format!("unreadable answer from the plugin: {e}"))?;
        if !response.success {
            return Err(response.error_messages.join("; ").into());
        }
        let output = match response.output_type {
            Some(output_type) if response.output != b"null" => Some(
                Output::from_json(output_type, &response.output).map_err(|e| {
                    format!("unreadable {output_type:?} output from the plugin: {e}")
                })?,
            ),
            _ => None,
        };
        let text = if response.mutators.is_empty() {
            None
        } else {
            Some(
                String::from_utf8(response.config_data)
                    .map_err(|e| format!("the plugin's config data is not UTF-8: {e}"))?,
            )
        };
        Ok(Outcome { text, output })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AttributeValue, DataType, OutputType};
    use crate::functions::definition::{
        Definition, FunctionKind, KUBERNETES, Options, no_parameters, signature,
    };
    use crate::signature::ParameterBuilder;
    use crate::{ExecutorError, Toolchain};
    use serde_json::json;

    const UNIT: &str =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n";

    fn count_documents(call: &Call) -> Result<Outcome, FunctionError> {
        let label = call.arguments.str("label").unwrap_or_default();
        Ok(Outcome::output(Output::Attributes(vec![AttributeValue {
            resource: Default::default(),
            path: String::new(),
            in_live_state: false,
            attribute_name: String::new(),
            data_type: DataType::String,
            info: None,
            value: json!(format!("{label}: {}", call.unit.elements.len())),
            comment: String::new(),
        }])))
    }

    fn fail(_: &Call) -> Result<Outcome, FunctionError> {
        Err("deliberately failed".into())
    }

    static COUNT_DOCUMENTS: Definition = Definition {
        name: "count-documents",
        description: "counts",
        parameters: |_| {
            vec![ParameterBuilder::new("label", DataType::String, "a label").pattern("^[a-z]+$")]
        },
        kind: FunctionKind::Readonly {
            result: "count",
            description: "the count",
            output: OutputType::AttributeValueList,
        },
        toolchains: KUBERNETES,
        run: count_documents,
        options: Options::DEFAULT,
    };

    static ALWAYS_FAIL: Definition = Definition {
        name: "always-fail",
        description: "fails",
        parameters: no_parameters,
        kind: FunctionKind::Mutating,
        toolchains: KUBERNETES,
        run: fail,
        options: Options::DEFAULT,
    };

    static WAIT: Definition = Definition {
        name: "wait",
        description: "waits for cancellation",
        parameters: no_parameters,
        kind: FunctionKind::Quiet,
        toolchains: KUBERNETES,
        run: wait,
        options: Options::DEFAULT,
    };

    fn plugin_set() -> Arc<PluginFunctions> {
        Arc::new(
            PluginFunctions::new(vec![
                COUNT_DOCUMENTS.function(Toolchain::KubernetesYaml),
                ALWAYS_FAIL.function(Toolchain::KubernetesYaml),
            ])
            .unwrap(),
        )
    }

    fn executor_with_plugin() -> Executor {
        let (functions, problems) = contributed(plugin_set());
        assert!(problems.is_empty(), "{problems:?}");
        let mut executor = Executor::kubernetes();
        for function in functions {
            executor.register(function).unwrap();
        }
        executor
    }

    fn request(invocations: serde_json::Value) -> FunctionInvocationRequest {
        serde_json::from_value(json!({
            "ConfigData": base64_encode(UNIT),
            "CastStringArgsToScalars": true,
            "FunctionInvocations": invocations,
        }))
        .unwrap()
    }

    fn base64_encode(text: &str) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    #[test]
    fn plugin_functions_run_in_sequences_next_to_builtin_ones() {
        let executor = executor_with_plugin();
        assert!(executor.list().contains_key("count-documents"));
        let response = executor
            .invoke(&request(json!([
                {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
                {"FunctionName": "count-documents", "Arguments": [{"Value": "docs"}]},
                {"FunctionName": "get-replicas", "Arguments": []},
            ])))
            .unwrap();
        assert!(response.success, "{:?}", response.error_messages);
        assert_eq!(response.mutators, [0]);
        assert_eq!(response.output_type, Some(OutputType::AttributeValueList));
        let output: Vec<AttributeValue> = serde_json::from_slice(&response.output).unwrap();
        assert_eq!(output[0].value, json!("docs: 1"));
        assert_eq!(output[1].value, json!(3));
    }

    #[test]
    fn arguments_are_checked_against_the_plugins_signature_before_it_runs() {
        let executor = executor_with_plugin();
        let response = executor
            .invoke(&request(json!([
                {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
                {"FunctionName": "count-documents", "Arguments": [{"Value": "NOT lower"}]},
            ])))
            .unwrap();
        assert!(!response.success);
        assert!(
            response.error_messages[0].contains("label"),
            "{:?}",
            response.error_messages
        );
    }

    #[test]
    fn a_failing_plugin_function_changes_nothing_and_names_itself() {
        let executor = executor_with_plugin();
        let response = executor
            .invoke(&request(json!([{"FunctionName": "always-fail"}])))
            .unwrap();
        assert!(!response.success);
        assert_eq!(
            response.error_messages,
            ["always-fail: deliberately failed"]
        );
        assert_eq!(response.config_data, UNIT.as_bytes());
        assert!(response.mutators.is_empty());
    }

    fn wait(call: &Call) -> Result<Outcome, FunctionError> {
        match call
            .cancellation
            .wait_cancelled(std::time::Duration::from_secs(30))
        {
            Some(_) => Err(crate::functions::Stopped.into()),
            None => Ok(Outcome::default()),
        }
    }

    #[test]
    fn a_cancelled_call_stops_the_sequence_inside_a_plugin_function_and_answers_nothing() {
        use krm_plugin_api::CancelReason;
        use krm_plugin_api::host::HostCallContext;
        let set = PluginFunctions::new(vec![WAIT.function(Toolchain::KubernetesYaml)]).unwrap();
        let mut executor = Executor::kubernetes();
        for function in contributed(Arc::new(set)).0 {
            executor.register(function).unwrap();
        }
        let request = request(json!([
            {"FunctionName": "set-replicas", "Arguments": [{"Value": "3"}]},
            {"FunctionName": "wait"},
            {"FunctionName": "set-replicas", "Arguments": [{"Value": "5"}]},
        ]));
        let call = HostCallContext::new(None);
        let cancelling = call.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            cancelling.cancel(CancelReason::DeadlineExceeded);
        });
        let started = std::time::Instant::now();
        let error = executor
            .invoke_within(&request, &call.as_call_context())
            .unwrap_err();
        canceller.join().unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(
            error.to_string(),
            "the sequence exceeded the caller's deadline at invocation 1 (wait); no data changed"
        );
        // Cancelled before it starts: not even the first invocation runs.
        let error = executor
            .invoke_within(&request, &call.as_call_context())
            .unwrap_err();
        assert!(
            matches!(error, ExecutorError::Cancelled { index: 0, .. }),
            "{error}"
        );
    }

    #[test]
    fn unreadable_or_misnamed_contributions_are_problems() {
        struct Broken(&'static str);
        impl TypedFunctionSet for Broken {
            fn signatures_json(&self) -> String {
                self.0.to_owned()
            }
            fn invoke(&self, _: &CallContext<'_>, f: &str, _: &[u8]) -> Result<Vec<u8>, EvalError> {
                Err(EvalError::not_found(f))
            }
        }
        let (functions, problems) = contributed(Arc::new(Broken("not json")));
        assert!(functions.is_empty());
        assert!(problems[0].to_string().contains("unreadable"));
        let mut signature =
            serde_json::to_value(signature("Bad/Name", "", vec![], None, false)).unwrap();
        let json = json!([signature.take()]).to_string();
        let (functions, problems) = contributed(Arc::new(Broken(Box::leak(json.into_boxed_str()))));
        assert!(functions.is_empty());
        assert!(
            problems[0].to_string().contains("\"Bad/Name\""),
            "{}",
            problems[0]
        );
        let (functions, problems) = contributed(Arc::new(Broken("")));
        assert!(functions.is_empty() && problems.is_empty());
    }
}
