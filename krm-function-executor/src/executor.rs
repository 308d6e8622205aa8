//! Runs a request: each invocation in order over the unit's current text, arguments checked
//! against the signature first; validating invocations within `NumFilters` end the sequence
//! quietly when they fail; outputs of compatible types are combined; every invocation that
//! changed the data is recorded with its per-resource, per-path mutations.

use std::collections::BTreeMap;
use std::sync::Arc;

use krm_plugin_api::{CallContext, CancelReason, quoted};

use crate::api::{
    FunctionInvocationRequest, FunctionInvocationResponse, FunctionSignature, OutputType,
    ValidationResult,
};
use crate::args;
use crate::functions::{self, Call, Output, TypedFunction};
use crate::go_json;
use crate::mutations;
use crate::registry::PathRegistry;
use crate::toolchain::properties::PropertiesError;
use crate::toolchain::{Toolchain, UnknownToolchain};
use crate::yaml::ParseError;

/// Config data larger than this is refused.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024 * 1024;
/// Requests with more invocations than this are refused.
pub const MAX_INVOCATIONS: usize = 1024;
/// An error message longer than this is cut, saying how much was left out (the saying
/// included): messages name resources and quote arguments, and a unit of many resources can
/// fail on each.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 8 * 1024;

/// Room kept at the end of a cut message for "... (N more bytes)", N of up to 20 digits.
const LEFT_OUT_NOTE_BYTES: usize = 40;

/// A request that cannot run at all (ConfigHub answers these with HTTP 400). Problems of one
/// invocation are not errors: they are the response's `ErrorMessages`.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("config data is {size} bytes, more than the limit of {MAX_CONFIG_BYTES}")]
    TooLarge { size: usize },
    #[error("{count} invocations, more than the limit of {MAX_INVOCATIONS}")]
    TooManyInvocations { count: usize },
    #[error("config data is not UTF-8 text")]
    NotText(#[source] std::str::Utf8Error),
    #[error("configuration data parsing error: {0}")]
    Unparsable(#[source] ParseError),
    /// A mutating function left a text that does not parse.
    #[error("{function} produced data that does not parse: {error}")]
    UnparsableResult {
        function: String,
        #[source]
        error: ParseError,
    },
    #[error(transparent)]
    Toolchain(#[from] UnknownToolchain),
    /// The request names a toolchain other than the one this executor serves.
    #[error("this executor serves {served}, not {requested}")]
    OtherToolchain {
        requested: Toolchain,
        served: Toolchain,
    },
    /// The properties file cannot be read, or the functions' result written back as one.
    #[error("configuration data parsing error: {0}")]
    Properties(#[source] PropertiesError),
    #[error("the result cannot be written as properties: {0}")]
    PropertiesResult(#[source] PropertiesError),
    /// The call ended before the sequence did; nothing of it is answered.
    #[error("{} at invocation {index} ({function}); no data changed", cancelled_text(*.reason))]
    Cancelled {
        reason: CancelReason,
        index: usize,
        function: String,
    },
}

/// What a sequence stopped for `reason` says, in every message about it.
pub fn cancelled_text(reason: CancelReason) -> &'static str {
    match reason {
        CancelReason::CallerCancelled => "the caller cancelled the sequence",
        CancelReason::DeadlineExceeded => "the sequence exceeded the caller's deadline",
        CancelReason::ShuttingDown => "the sequence was stopped: the runner is shutting down",
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("function {0} already registered")]
    Duplicate(String),
    #[error("function {name}: validating functions must output ValidationResult")]
    ValidatingOutput { name: String },
}

/// The functions of one toolchain and the path registry they use.
pub struct Executor {
    toolchain: Toolchain,
    functions: BTreeMap<String, Arc<dyn TypedFunction>>,
    registry: Arc<PathRegistry>,
    /// The largest unit text an answer may carry (see [`Executor::with_max_message_bytes`]).
    max_message_bytes: usize,
}

impl Executor {
    /// A Kubernetes/YAML executor with no functions over `registry`.
    pub fn empty(registry: PathRegistry) -> Self {
        Self::empty_for(Toolchain::KubernetesYaml, registry)
    }

    /// An executor of `toolchain` with no functions over `registry`.
    pub fn empty_for(toolchain: Toolchain, registry: PathRegistry) -> Self {
        Self {
            toolchain,
            functions: BTreeMap::new(),
            registry: Arc::new(registry),
            max_message_bytes: MAX_CONFIG_BYTES,
        }
    }

    /// Limits the unit text an invocation may produce to the runner's `max_message_bytes`
    /// (without it, to [`MAX_CONFIG_BYTES`]): a function that would build more is refused
    /// before it builds it, as its answer could not be sent anyway.
    pub fn with_max_message_bytes(mut self, max_message_bytes: usize) -> Self {
        self.max_message_bytes = max_message_bytes;
        self
    }

    /// See [`Executor::with_max_message_bytes`].
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// Every built-in Kubernetes/YAML function over the Kubernetes path registry.
    pub fn kubernetes() -> Self {
        Self::built_in(Toolchain::KubernetesYaml)
    }

    /// Every built-in AppConfig/Properties function (the generic ones ConfigHub registers
    /// for it) over the properties path registry.
    pub fn properties() -> Self {
        Self::built_in(Toolchain::AppConfigProperties)
    }

    /// The built-in functions and path registry of `toolchain`.
    pub fn built_in(toolchain: Toolchain) -> Self {
        let registry = match toolchain {
            Toolchain::KubernetesYaml => PathRegistry::kubernetes(),
            Toolchain::AppConfigProperties => PathRegistry::properties(),
        };
        let mut executor = Self::empty_for(toolchain, registry);
        let built = functions::built_in(toolchain, &executor.registry);
        for function in built {
            executor
                .register(function)
                .expect("built-in functions have unique names and valid outputs");
        }
        executor
    }

    /// The toolchain whose data this executor works on.
    pub fn toolchain(&self) -> Toolchain {
        self.toolchain
    }

    /// Adds a function; names are unique.
    pub fn register(&mut self, function: Arc<dyn TypedFunction>) -> Result<(), RegistrationError> {
        let signature = function.signature();
        let name = signature.name().to_owned();
        let outputs_verdict = signature
            .typed
            .output
            .as_ref()
            .is_some_and(|o| o.output_type == OutputType::ValidationResult);
        if signature.validating() != outputs_verdict {
            return Err(RegistrationError::ValidatingOutput { name });
        }
        if self.functions.contains_key(&name) {
            return Err(RegistrationError::Duplicate(name));
        }
        self.functions.insert(name, function);
        Ok(())
    }

    pub fn registry(&self) -> &PathRegistry {
        &self.registry
    }

    pub fn function(&self, name: &str) -> Option<&Arc<dyn TypedFunction>> {
        self.functions.get(name)
    }

    /// Every function, by name.
    pub fn functions(&self) -> impl Iterator<Item = &Arc<dyn TypedFunction>> {
        self.functions.values()
    }

    /// The signatures in ConfigHub's form, by name (what `GET /function/kubernetes` returns).
    pub fn list(&self) -> BTreeMap<String, FunctionSignature> {
        self.functions
            .iter()
            .map(|(name, f)| (name.clone(), f.signature().to_confighub()))
            .collect()
    }

    /// Runs `request` outside any call: nothing cancels it.
    pub fn invoke(
        &self,
        request: &FunctionInvocationRequest,
    ) -> Result<FunctionInvocationResponse, ExecutorError> {
        self.invoke_within(request, &CallContext::detached())
    }

    /// Runs `request` within a call: once `call` is cancelled (or its deadline passes), the
    /// invocation running stops inside its loop (functions check the call per resource, path,
    /// match or copy), and the whole request fails with [`ExecutorError::Cancelled`].
    pub fn invoke_within(
        &self,
        request: &FunctionInvocationRequest,
        call: &CallContext<'_>,
    ) -> Result<FunctionInvocationResponse, ExecutorError> {
        self.run(request, call, MutationRecords::Kept)
    }

    /// [`invoke_within`](Self::invoke_within) for a caller that reads no mutation records
    /// (`krm-runner do` and `doseq` print none): the response's `mutations` stay empty, which
    /// spares diffing every resource an invocation changed; `mutators` are still listed.
    pub fn invoke_within_unrecorded(
        &self,
        request: &FunctionInvocationRequest,
        call: &CallContext<'_>,
    ) -> Result<FunctionInvocationResponse, ExecutorError> {
        self.run(request, call, MutationRecords::Skipped)
    }

    fn run(
        &self,
        request: &FunctionInvocationRequest,
        call: &CallContext<'_>,
        records: MutationRecords,
    ) -> Result<FunctionInvocationResponse, ExecutorError> {
        let cancelled = |reason, index: usize, function: &str| ExecutorError::Cancelled {
            reason,
            index,
            // A name no function has is the caller's text.
            function: if self.functions.contains_key(function) {
                function.to_owned()
            } else {
                quoted(function).to_string()
            },
        };
        let stop_if_cancelled = |index: usize, function: &str| match call.cancel_reason() {
            Some(reason) => Err(cancelled(reason, index, function)),
            None => Ok(()),
        };
        let requested = Toolchain::from_name(&request.context.toolchain_type)?;
        if requested != self.toolchain {
            return Err(ExecutorError::OtherToolchain {
                requested,
                served: self.toolchain,
            });
        }
        if request.config_data.len() > MAX_CONFIG_BYTES {
            return Err(ExecutorError::TooLarge {
                size: request.config_data.len(),
            });
        }
        if request.function_invocations.len() > MAX_INVOCATIONS {
            return Err(ExecutorError::TooManyInvocations {
                count: request.function_invocations.len(),
            });
        }
        let text = std::str::from_utf8(&request.config_data)
            .map_err(ExecutorError::NotText)?
            .to_owned();
        // Unparsable data is the request's fault, before any invocation runs.
        let (model, native) = self
            .toolchain
            .read(text)
            .map_err(ExecutorError::Properties)?;
        let mut current = self
            .toolchain
            .parse_owned(model)
            .map_err(ExecutorError::Unparsable)?;

        let mut run = Run {
            combine: request.combine_validation_results,
            instance: instance(request),
            output: None,
            messages: Vec::new(),
        };
        let mut success = true;
        let mut filters_left = request.num_filters;
        let mut mutations = Vec::new();
        let mut mutators = Vec::new();
        for (index, invocation) in request.function_invocations.iter().enumerate() {
            stop_if_cancelled(index, &invocation.function_name)?;
            let Some(function) = self.functions.get(&invocation.function_name) else {
                run.push(format!(
                    "invoke {}: function does not exist",
                    quoted(&invocation.function_name).bounded()
                ));
                success = false;
                if request.stop_on_error {
                    break;
                }
                continue;
            };
            let signature = function.signature();
            let is_filter = signature.validating() && filters_left > 0;
            if is_filter {
                filters_left -= 1;
            }
            let arguments = match args::check(signature, invocation).and_then(|arguments| {
                let problems = function.check(&arguments);
                if problems.is_empty() {
                    Ok(arguments)
                } else {
                    Err(problems
                        .into_iter()
                        .map(|problem| format!("{}: {problem}", invocation.function_name))
                        .collect())
                }
            }) {
                Ok(arguments) => arguments,
                Err(problems) => {
                    problems.into_iter().for_each(|problem| run.push(problem));
                    success = false;
                    if request.stop_on_error {
                        break;
                    }
                    continue;
                }
            };
            let invocation_call = Call {
                unit: current.unit(),
                arguments: &arguments,
                context: &request.context,
                registry: &self.registry,
                toolchain: self.toolchain,
                cancellation: call,
                max_message_bytes: self.max_message_bytes,
                live_state: &request.live_state,
                native: &native,
            };
            let ran = function.run(&invocation_call);
            // What a function did while the call was being cancelled is not answered.
            stop_if_cancelled(index, &invocation.function_name)?;
            // A plugin's function stops where its plugin runs, which may hear that the call
            // ended before this process does: the sequence ends with it, never going on.
            if let Err(error) = &ran
                && let Some(reason) = error.cancel_reason()
            {
                return Err(cancelled(reason, index, &invocation.function_name));
            }
            let mut outcome = match ran {
                Ok(outcome) => outcome,
                Err(message) => {
                    run.push(format!("{}: {message}", invocation.function_name));
                    success = false;
                    if request.stop_on_error {
                        break;
                    }
                    continue;
                }
            };
            if is_filter
                && let Some(Output::Validation(result)) = &outcome.output
                && !result.passed
            {
                break;
            }
            // Only mutating functions may change the data.
            if let Some(new_text) = outcome.text.take()
                && signature.mutating()
                && new_text != current.text()
            {
                // A function that built more than its check allowed still cannot pass it on.
                if new_text.len() > self.max_message_bytes {
                    run.push(format!(
                        "{}: the result is {} bytes, more than max_message_bytes {}",
                        invocation.function_name,
                        new_text.len(),
                        self.max_message_bytes
                    ));
                    success = false;
                    if request.stop_on_error {
                        break;
                    }
                    continue;
                }
                let after = self.toolchain.parse_owned(new_text).map_err(|error| {
                    ExecutorError::UnparsableResult {
                        function: invocation.function_name.clone(),
                        error,
                    }
                })?;
                // What the toolchain's format cannot hold is this invocation's failure, and
                // none of it is applied.
                if let Err(problem) = native.check(after.unit()) {
                    run.push(format!(
                        "{}: the result cannot be written as {}: {problem}",
                        invocation.function_name, self.toolchain
                    ));
                    success = false;
                    if request.stop_on_error {
                        break;
                    }
                    continue;
                }
                if records == MutationRecords::Kept {
                    mutations::merge(
                        &mut mutations,
                        mutations::diff(self.toolchain, current.unit(), after.unit(), index),
                    );
                }
                mutators.push(index);
                current = after;
            }
            // A filter that passed is combined like any output, as ConfigHub's InvokeCore
            // combines it: a later output of another type is discarded as incompatible.
            if let Some(output) = outcome.output
                && signature.typed.output.is_some()
            {
                run.combine(&invocation.function_name, index, output);
            }
        }
        let (output_type, output) = run.encoded();
        let config_data = if mutators.is_empty() {
            request.config_data.clone()
        } else {
            native
                .write(current.unit())
                .map_err(ExecutorError::PropertiesResult)?
                .into_bytes()
        };
        Ok(FunctionInvocationResponse {
            organization_id: request.context.organization_id.clone(),
            space_id: request.context.space_id.clone(),
            unit_id: request.context.unit_id.clone(),
            revision_id: request.context.revision_id.clone(),
            config_data,
            output,
            output_type,
            success,
            mutations,
            mutators,
            error_messages: run.messages,
        })
    }
}

/// Whether a response lists what each invocation changed, per resource and path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MutationRecords {
    Kept,
    Skipped,
}

/// How ConfigHub names the unit in messages: its ID, and the revision's when there is one.
fn instance(request: &FunctionInvocationRequest) -> String {
    let context = &request.context;
    if context.revision_id == crate::api::NIL_UUID || context.revision_id.is_empty() {
        context.unit_id.clone()
    } else {
        format!("{}: {}", context.unit_id, context.revision_id)
    }
}

/// The combined output of a sequence.
enum Combined {
    Validation(ValidationResult),
    Validations(Vec<ValidationResult>),
    Single(Output),
}

struct Run {
    combine: bool,
    instance: String,
    output: Option<Combined>,
    messages: Vec<String>,
}

impl Run {
    /// Adds an error message, cut to at most [`MAX_ERROR_MESSAGE_BYTES`].
    fn push(&mut self, mut message: String) {
        if message.len() > MAX_ERROR_MESSAGE_BYTES {
            let cut = (0..=MAX_ERROR_MESSAGE_BYTES - LEFT_OUT_NOTE_BYTES)
                .rev()
                .find(|&at| message.is_char_boundary(at))
                .unwrap_or(0);
            let left_out = message.len() - cut;
            message.truncate(cut);
            message.push_str(&format!("... ({left_out} more bytes)"));
        }
        self.messages.push(message);
    }

    fn combine(&mut self, function: &str, index: usize, output: Output) {
        if let Output::Validation(result) = &output
            && !result.passed
        {
            self.messages.push(format!(
                "function failed: {function} at {index} on {}",
                self.instance
            ));
        }
        match (self.output.take(), output) {
            (None, Output::Validation(mut result)) => {
                self.output = Some(if self.combine {
                    result.index = 0;
                    Combined::Validation(result)
                } else {
                    result.index = index;
                    Combined::Validations(vec![result])
                });
            }
            (None, other) => self.output = Some(Combined::Single(other)),
            (Some(Combined::Validation(mut before)), Output::Validation(result)) => {
                // ConfigHub's CombineOutputs keeps the newer result with the details of both
                // (newer first) and the newer failed attributes only.
                before.passed = before.passed && result.passed;
                let mut details = result.details;
                details.append(&mut before.details);
                before.details = details;
                before.failed_attributes = result.failed_attributes;
                self.output = Some(Combined::Validation(before));
            }
            (Some(Combined::Validations(mut list)), Output::Validation(mut result)) => {
                result.index = index;
                list.push(result);
                self.output = Some(Combined::Validations(list));
            }
            (Some(Combined::Single(before)), newer) => {
                let merged = match (before, newer) {
                    (Output::Attributes(mut a), Output::Attributes(b)) => {
                        a.extend(b);
                        Ok(Output::Attributes(a))
                    }
                    (Output::ResourceInfos(mut a), Output::ResourceInfos(b)) => {
                        a.extend(b);
                        Ok(Output::ResourceInfos(a))
                    }
                    (Output::Resources(mut a), Output::Resources(b)) => {
                        a.extend(b);
                        Ok(Output::Resources(a))
                    }
                    (before, newer) => Err((before, newer)),
                };
                match merged {
                    Ok(output) => self.output = Some(Combined::Single(output)),
                    Err((before, newer)) => {
                        let kind = if before.output_type() == newer.output_type() {
                            "unmergeable"
                        } else {
                            "incompatible"
                        };
                        // ConfigHub's words: the unit, not the function, is named.
                        self.messages.push(format!(
                            "functions with {kind} output types; output of {} discarded",
                            self.instance
                        ));
                        self.output = Some(Combined::Single(before));
                    }
                }
            }
            (Some(before), _) => {
                self.messages.push(format!(
                    "functions with incompatible output types; output of {} discarded",
                    self.instance
                ));
                self.output = Some(before);
            }
        }
    }

    /// The output type and the output as JSON text (`null` when there is none), fields in
    /// the order of their types.
    fn encoded(&self) -> (Option<OutputType>, Vec<u8>) {
        let encoded = match &self.output {
            None => return (None, b"null".to_vec()),
            Some(Combined::Validation(result)) => {
                (OutputType::ValidationResult, go_json::to_vec(result))
            }
            Some(Combined::Validations(list)) => {
                (OutputType::ValidationResultList, go_json::to_vec(list))
            }
            Some(Combined::Single(output)) => (output.output_type(), output.to_json()),
        };
        match encoded {
            (output_type, Ok(bytes)) => (Some(output_type), bytes),
            // Plain data types always serialize; keep the response well formed regardless.
            (_, Err(_)) => (None, b"null".to_vec()),
        }
    }
}
