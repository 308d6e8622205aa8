//! The plugin author's side: the [`Plugin`] and [`Evaluator`] traits and what they are handed.

use std::ffi::{CString, c_char};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock};

use abi_stable::{
    library::{__call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult},
    prefix_type::PrefixTypeTrait,
    sabi_trait::TD_Opaque,
    std_types::{RResult, RSlice, RStr, RString, RVec},
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::abi::{
    CallContextRef, ErrorFfi, EvaluatorArc, EvaluatorBox, EvaluatorFfi, EvaluatorFfi_TO, HostArc,
    PluginInfoFfi, PluginModule, PluginModuleRef, ResponseFfi,
};
use crate::call::ResolveAnswer;
use crate::{
    ABI_VERSION, CacheIdentity, CallContext, ErrorKind, EvalError, EvalResponse,
    FunctionConfigRoute, FunctionSignature, Probe, ProbeOutcome, Resolution, panic_message,
};

/// A plugin: a named factory of evaluators, one per configured instance.
///
/// ```
/// use krm_plugin_api::{BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator, Plugin};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// struct Config { greeting: String }
///
/// struct Hello(String);
///
/// impl Evaluator for Hello {
///     fn evaluate(&self, _: &CallContext<'_>, image: &str, input: &[u8]) -> Result<EvalResponse, EvalError> {
///         if image != "hello" { return Err(EvalError::not_found(image)); }
///         Ok(EvalResponse::new(input.to_vec(), self.0.clone().into_bytes()))
///     }
/// }
///
/// struct HelloPlugin;
///
/// impl Plugin for HelloPlugin {
///     const NAME: &'static str = "hello";
///     const VERSION: &'static str = env!("CARGO_PKG_VERSION");
///     const DESCRIPTION: &'static str = "answers image `hello` with its input";
///     type Config = Config;
///     type Evaluator = Hello;
///     fn build(config: Config, _: &BuildContext) -> Result<Hello, ConfigError> {
///         Ok(Hello(config.greeting))
///     }
/// }
/// // In the plugin crate (a `cdylib`): krm_plugin_api::export_plugin!(HelloPlugin);
/// ```
pub trait Plugin: 'static {
    /// The name operators write in `plugin:`; the library file is `libkrm_plugin_<name>.so`.
    const NAME: &'static str;
    /// Usually `env!("CARGO_PKG_VERSION")`.
    const VERSION: &'static str;
    /// One line for `krm-runner plugins`.
    const DESCRIPTION: &'static str;
    /// The instance's `config:` section. Use `#[serde(deny_unknown_fields)]` so typos are
    /// errors. Its JSON schema (derive `schemars::JsonSchema`; doc comments become the keys'
    /// descriptions, `#[schemars(example = ...)]` their examples) is what
    /// `krm-runner plugins --config-schema` shows operators.
    type Config: DeserializeOwned + JsonSchema;
    /// What [`Plugin::build`] makes: the evaluator one configured instance runs.
    type Evaluator: Evaluator;

    /// Builds one instance. Errors name the offending field (see [`ConfigError::field`]).
    fn build(config: Self::Config, context: &BuildContext) -> Result<Self::Evaluator, ConfigError>;
}

/// An execution strategy: answers a call, or declines with [`EvalError::not_found`] so that the
/// chain asks the next evaluator.
///
/// The runner calls `evaluate` on a blocking thread of its own, many calls at once, so block
/// freely but honour [`CallContext`] cancellation. A panic becomes an `Internal` error for
/// that call; the runner keeps serving.
pub trait Evaluator: Send + Sync + 'static {
    /// Answers one call: `resource_list` (a serialized ResourceList) run through `image`.
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError>;

    /// The functions this evaluator implements itself, with their signatures, for discovery
    /// (`krm-runner functions`). Evaluators that run arbitrary images return none.
    fn functions(&self) -> Vec<FunctionSignature> {
        Vec::new()
    }

    /// The function `name` picks among [`functions`](Self::functions) (see
    /// [`crate::pick_function`]): what `krm-runner fn NAME` looks for. Override it when finding
    /// one costs less than listing them all, e.g. when some are built on first use.
    fn function(&self, name: &str) -> Option<FunctionSignature> {
        crate::pick_function(self.functions(), name, |signature| signature)
    }

    /// Calls for `image` are coming (the runner warms what its FunctionConfigs ask for, once
    /// they are read): start preparing in the background and return at once. Log failures.
    fn warm_up(&self, image: &str, route: Option<&FunctionConfigRoute>) {
        let _ = (image, route);
    }

    /// What this evaluator would run for the untagged `image` under the tag constraint `tag`
    /// (already checked to parse), routed as `route`: the same choice `evaluate` makes for a call
    /// carrying [`CallContext::requested_tag`]. `None`: it does not serve the image, or does not
    /// resolve constraints. An error: it serves the image but no version satisfies (NotFound,
    /// naming the versions it has), or it cannot tell now (e.g. the registry is unreachable).
    fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        let _ = (image, tag, route);
        None
    }

    /// Whether this evaluator serves `image` routed as `route`, decided without running
    /// anything: the one answer a call and [`probe`](Self::probe) both go by. A call for an
    /// image this declines ([`Probe::Declines`], with the reason its NOT_FOUND gives) is answered
    /// before [`evaluate`](Self::evaluate) runs, so `evaluate` only sees what it serves. By
    /// default ([`Probe::Unknown`]) only `evaluate` decides. Every call asks it: keep it cheap.
    fn serves(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        let _ = (image, route);
        Probe::Unknown
    }

    /// What a call for `image` (routed as `route`) would do here, decided without running
    /// anything: what [`serves`](Self::serves) answers. `krm-runner functions --resolve` shows
    /// it. Override it only to answer otherwise ahead of a call than during one: to delegate
    /// ([`Probe::Delegated`]), or when `evaluate` decides by itself with the same code.
    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        self.serves(image, route)
    }

    /// Typed functions (ConfigHub's model) this evaluator contributes: they are listed by
    /// `krm-runner list` and run by `do`, `doseq` and the executor services, in sequences next
    /// to the builtin ones. Keep a `krm_function_executor::plugin::PluginFunctions` in the
    /// evaluator and return it here; it does the serializing.
    fn typed_functions(&self) -> Option<&dyn TypedFunctionSet> {
        None
    }

    /// What a call for `image` (routed as `route`) would run here, for the runner's result
    /// cache: whether that function is pure and what identifies its code. `None` (the default)
    /// when this evaluator does not serve the image or cannot tell before a call: the runner
    /// then never caches its calls. An evaluator whose [`probe`](Self::probe) cannot tell
    /// whether it serves an image claims the call by answering here. The runner asks before
    /// every call it may cache: keep it cheap.
    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let _ = (image, route);
        None
    }
}

/// Typed functions served through the plugin ABI. `krm_function_executor::plugin` implements
/// both sides (`PluginFunctions` in the plugin, the runner's adapter in the executor), so a
/// plugin author writes neither.
pub trait TypedFunctionSet: Send + Sync {
    /// The signatures, as JSON: a list of `krm_function_executor::TypedSignature`.
    fn signatures_json(&self) -> String;

    /// Runs `function` once: `request` is a FunctionInvocationRequest (JSON) with that one
    /// invocation, the answer a FunctionInvocationResponse (JSON). An error is a failure of
    /// the set itself (an unknown function, an unreadable request), not of the function.
    fn invoke(
        &self,
        context: &CallContext<'_>,
        function: &str,
        request: &[u8],
    ) -> Result<Vec<u8>, EvalError>;
}

/// What is wrong with an instance's `config:` section: one problem or several, each with the
/// path of the field at fault (e.g. `functions[2].path`). Report every problem you find at
/// once, as the runner does with its own configuration:
///
/// ```
/// use krm_plugin_api::ConfigError;
///
/// let names = ["a", "", "b", ""];
/// let problems = names.iter().enumerate().filter(|(_, name)| name.is_empty()).map(|(index, _)| {
///     ConfigError::field(format!("names[{index}]"), "must not be empty")
/// });
/// let error = ConfigError::all(problems).expect("two names are empty");
/// assert_eq!(error.to_string(), "names[1]: must not be empty\nnames[3]: must not be empty");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<ConfigProblem>,
}

/// One configuration problem.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConfigProblem {
    /// The path of the field at fault within the instance's `config:`; `None` for the whole.
    pub field: Option<String>,
    /// What is wrong, for the operator.
    pub message: String,
}

impl ConfigError {
    /// A problem with the configuration as a whole.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            problems: vec![ConfigProblem {
                field: None,
                message: message.into(),
            }],
        }
    }

    /// A problem with the field at `field` (a path such as `chain[2]`).
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            problems: vec![ConfigProblem {
                field: Some(field.into()).filter(|field| !field.is_empty()),
                message: message.into(),
            }],
        }
    }

    /// Every problem of `errors` in one error; `None` when there are none.
    pub fn all(errors: impl IntoIterator<Item = ConfigError>) -> Option<Self> {
        let problems: Vec<_> = errors
            .into_iter()
            .flat_map(|error| error.problems)
            .collect();
        (!problems.is_empty()).then_some(Self { problems })
    }

    /// The problems, in the order they were found.
    pub fn problems(&self) -> &[ConfigProblem] {
        &self.problems
    }

    /// How the problems cross the ABI to the runner: a JSON list of [`ConfigProblem`]s.
    pub(crate) fn to_wire(&self) -> String {
        serde_json::to_string(&self.problems).unwrap_or_else(|_| self.to_string())
    }

    #[cfg(feature = "host")]
    /// The problems a plugin reported; plain text (a plugin built before problems were a list)
    /// is one problem with no field.
    pub(crate) fn from_wire(text: &str) -> Self {
        match serde_json::from_str::<Vec<ConfigProblem>>(text) {
            Ok(problems) if !problems.is_empty() => Self { problems },
            _ => Self::new(text),
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{field}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// One problem per line.
impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// The runner's `max_message_bytes` when it does not say (Porch's default: 6 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 6 * 1024 * 1024;

/// What an instance is built with: its name, the runner's settings and the other instances.
pub struct BuildContext {
    instance: String,
    host: HostArc,
}

impl BuildContext {
    /// The instance's name in the runner's `evaluators:` map.
    pub fn instance_name(&self) -> &str {
        &self.instance
    }

    /// A runner-wide setting: `default_image_prefix`, `max_message_bytes`, `validate_only`
    /// (each read through its own method below).
    pub fn setting(&self, key: &str) -> Option<String> {
        self.host
            .setting(RStr::from_str(key))
            .into_option()
            .map(String::from)
    }

    /// Whether the runner only checks the configuration (`krm-runner config check`, or a
    /// start-up that already failed): build and report problems as for serving, but start
    /// nothing outside the process (no pods, no background work).
    pub fn validate_only(&self) -> bool {
        self.setting("validate_only").as_deref() == Some("true")
    }

    /// The largest message a call may carry, in and out (the runner's `max_message_bytes`):
    /// bound what a call builds by it. [`DEFAULT_MAX_MESSAGE_BYTES`] from a runner that does
    /// not say.
    pub fn max_message_bytes(&self) -> usize {
        self.setting("max_message_bytes")
            .and_then(|value| value.parse().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES)
    }

    /// The registry prefix of images named without one (the runner's `default_image_prefix`,
    /// Porch's `--default-image-prefix`); empty when the runner sets none.
    pub fn default_image_prefix(&self) -> String {
        self.setting("default_image_prefix").unwrap_or_default()
    }

    /// The runner's metrics and traces, for the instance's own measurements and spans; keep it
    /// in the evaluator.
    pub fn telemetry(&self) -> crate::Telemetry {
        crate::Telemetry::new(self.host.clone())
    }

    /// Another configured evaluator instance, for evaluators that delegate. `None` when no
    /// instance has that name. The runner records the lookup as a dependency: it shows in
    /// `krm-runner plugins` and cycles are refused at start-up.
    pub fn evaluator(&self, name: &str) -> Option<EvaluatorHandle> {
        self.host
            .evaluator(RStr::from_str(name))
            .into_option()
            .map(|inner| EvaluatorHandle {
                name: name.to_owned(),
                inner: Arc::new(inner),
            })
    }
}

/// Another evaluator instance, reached through the runner.
#[derive(Clone)]
pub struct EvaluatorHandle {
    name: String,
    inner: Arc<EvaluatorArc>,
}

impl EvaluatorHandle {
    /// The instance's name in the runner's `evaluators:` map.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls the instance with this call's context. The response names the instance that
    /// served (`served_by` is always set).
    pub fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        from_ffi_result(self.inner.evaluate(
            context.inner.sabi_reborrow(),
            RStr::from_str(image),
            RSlice::from_slice(resource_list),
        ))
    }

    /// What the instance would do with a call for `image` (see [`Evaluator::probe`]).
    pub fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> ProbeOutcome {
        probe_from_json(&self.inner.probe(
            RStr::from_str(image),
            RStr::from_str(&FunctionConfigRoute::to_json(route)),
        ))
        .into_resolution(&self.name)
    }
}

/// A [`Probe`] read from the ABI; empty (a plugin built before probes) or unreadable is unknown.
pub(crate) fn probe_from_json(json: &str) -> Probe {
    if json.is_empty() {
        return Probe::Unknown;
    }
    serde_json::from_str(json).unwrap_or_else(|error| {
        tracing::error!("unreadable probe answer ({error}): {json}");
        Probe::Unknown
    })
}

pub(crate) fn from_ffi_result(
    result: RResult<ResponseFfi, ErrorFfi>,
) -> Result<EvalResponse, EvalError> {
    match result {
        RResult::ROk(response) => Ok(EvalResponse {
            resource_list: response.resource_list.into_vec(),
            log: response.log.into_vec(),
            served_by: Some(response.served_by.into_string()).filter(|s| !s.is_empty()),
            declined: response
                .declined
                .into_iter()
                .map(RString::into_string)
                .collect(),
        }),
        RResult::RErr(error) => Err(error_from_ffi(error)),
    }
}

pub(crate) fn error_from_ffi(error: ErrorFfi) -> EvalError {
    EvalError {
        kind: error.kind,
        message: error.message.into_string(),
        declined: error
            .declined
            .into_iter()
            .map(RString::into_string)
            .collect(),
        resource_list: error.resource_list.into_vec(),
        log: error.log.into_vec(),
    }
}

pub(crate) fn to_ffi_result(
    result: Result<EvalResponse, EvalError>,
) -> RResult<ResponseFfi, ErrorFfi> {
    match result {
        Ok(response) => RResult::ROk(ResponseFfi {
            resource_list: RVec::from(response.resource_list),
            log: RVec::from(response.log),
            served_by: response.served_by.map(RString::from).unwrap_or_default(),
            declined: response.declined.into_iter().map(RString::from).collect(),
        }),
        Err(error) => RResult::RErr(error_to_ffi(error)),
    }
}

fn error_to_ffi(error: EvalError) -> ErrorFfi {
    ErrorFfi {
        kind: error.kind,
        message: RString::from(error.message),
        declined: error.declined.into_iter().map(RString::from).collect(),
        resource_list: RVec::from(error.resource_list),
        log: RVec::from(error.log),
    }
}

/// Puts a plugin's evaluator behind the ABI, containing panics.
struct ExportedEvaluator<E>(E);

impl<E: Evaluator> EvaluatorFfi for ExportedEvaluator<E> {
    fn evaluate(
        &self,
        context: CallContextRef<'_>,
        image: RStr<'_>,
        resource_list: RSlice<'_, u8>,
    ) -> RResult<ResponseFfi, ErrorFfi> {
        let context = CallContext::new(context);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if let Probe::Declines(reason) = self.0.serves(image.as_str(), context.route().as_ref())
            {
                return Err(EvalError::declined_because(image.as_str(), reason));
            }
            self.0
                .evaluate(&context, image.as_str(), resource_list.as_slice())
        }));
        to_ffi_result(outcome.unwrap_or_else(|panic| {
            Err(EvalError::new(
                ErrorKind::Internal,
                format!(
                    "evaluator panicked while evaluating {:?}: {}",
                    image.as_str(),
                    panic_message(&*panic)
                ),
            ))
        }))
    }

    fn functions(&self) -> RString {
        let signatures = catch_unwind(AssertUnwindSafe(|| self.0.functions())).unwrap_or_default();
        RString::from(serde_json::to_string(&signatures).unwrap_or_else(|_| "[]".to_owned()))
    }

    fn function(&self, name: RStr<'_>) -> RString {
        let signature = catch_unwind(AssertUnwindSafe(|| self.0.function(name.as_str())))
            .unwrap_or_else(|panic| {
                tracing::error!(
                    "evaluator panicked while looking for function {:?}: {}",
                    name.as_str(),
                    panic_message(&*panic)
                );
                None
            });
        RString::from(serde_json::to_string(&signature).unwrap_or_else(|_| "null".to_owned()))
    }

    fn resolve(&self, image: RStr<'_>, tag: RStr<'_>, route: RStr<'_>) -> RString {
        let route = FunctionConfigRoute::from_json(route.as_str());
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            self.0.resolve(image.as_str(), tag.as_str(), route.as_ref())
        }))
        .unwrap_or_else(|panic| {
            Some(Err(EvalError::internal(format!(
                "evaluator panicked while resolving {:?} {:?}: {}",
                image.as_str(),
                tag.as_str(),
                panic_message(&*panic)
            ))))
        });
        RString::from(ResolveAnswer::to_json(outcome))
    }

    fn probe(&self, image: RStr<'_>, route: RStr<'_>) -> RString {
        let route = FunctionConfigRoute::from_json(route.as_str());
        let probe = catch_unwind(AssertUnwindSafe(|| {
            self.0.probe(image.as_str(), route.as_ref())
        }))
        .unwrap_or_default();
        RString::from(serde_json::to_string(&probe).unwrap_or_default())
    }

    fn cache_identity(&self, image: RStr<'_>, route: RStr<'_>) -> RString {
        let route = FunctionConfigRoute::from_json(route.as_str());
        let identity = catch_unwind(AssertUnwindSafe(|| {
            self.0.cache_identity(image.as_str(), route.as_ref())
        }))
        .unwrap_or_default();
        RString::from(
            identity
                .and_then(|identity| serde_json::to_string(&identity).ok())
                .unwrap_or_default(),
        )
    }

    fn typed_functions(&self) -> RString {
        let signatures = catch_unwind(AssertUnwindSafe(|| {
            self.0
                .typed_functions()
                .map(TypedFunctionSet::signatures_json)
        }))
        .unwrap_or_else(|panic| {
            tracing::error!(
                "evaluator panicked while listing its typed functions: {}",
                panic_message(&*panic)
            );
            None
        });
        RString::from(signatures.unwrap_or_default())
    }

    fn invoke_typed(
        &self,
        context: CallContextRef<'_>,
        function: RStr<'_>,
        request: RSlice<'_, u8>,
    ) -> RResult<RVec<u8>, ErrorFfi> {
        let context = CallContext::new(context);
        let outcome = catch_unwind(AssertUnwindSafe(|| match self.0.typed_functions() {
            Some(set) => set.invoke(&context, function.as_str(), request.as_slice()),
            None => Err(EvalError::not_found(function.as_str())),
        }));
        let outcome = outcome.unwrap_or_else(|panic| {
            Err(EvalError::internal(format!(
                "evaluator panicked while running typed function {:?}: {}",
                function.as_str(),
                panic_message(&*panic)
            )))
        });
        match outcome {
            Ok(response) => RResult::ROk(RVec::from(response)),
            Err(error) => RResult::RErr(error_to_ffi(error)),
        }
    }

    fn warm_up(&self, image: RStr<'_>, route: RStr<'_>) {
        let route = FunctionConfigRoute::from_json(route.as_str());
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| {
            self.0.warm_up(image.as_str(), route.as_ref())
        })) {
            tracing::error!(
                "evaluator panicked while warming up {:?}: {}",
                image.as_str(),
                panic_message(&*panic)
            );
        }
    }
}

fn build_evaluator<P: Plugin>(
    instance: &str,
    config_json: &str,
    host: HostArc,
) -> Result<EvaluatorBox, ConfigError> {
    crate::logging::forward_to(&host, P::NAME);
    let deserializer = &mut serde_json::Deserializer::from_str(config_json);
    let config: P::Config = serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = error.path().to_string();
        let message = error.into_inner().to_string();
        if path == "." {
            ConfigError::new(message)
        } else {
            ConfigError::field(path, message)
        }
    })?;
    let context = BuildContext {
        instance: instance.to_owned(),
        host,
    };
    let evaluator = P::build(config, &context)?;
    Ok(exported(evaluator))
}

/// `evaluator` behind the ABI, its panics contained.
pub(crate) fn exported(evaluator: impl Evaluator) -> EvaluatorBox {
    EvaluatorFfi_TO::from_value(ExportedEvaluator(evaluator), TD_Opaque)
}

extern "C" fn build_entry<P: Plugin>(
    instance: RStr<'_>,
    config_json: RStr<'_>,
    host: HostArc,
) -> RResult<EvaluatorBox, RString> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        build_evaluator::<P>(instance.as_str(), config_json.as_str(), host)
    }));
    match outcome {
        Ok(Ok(evaluator)) => RResult::ROk(evaluator),
        Ok(Err(error)) => RResult::RErr(RString::from(error.to_wire())),
        Err(panic) => RResult::RErr(RString::from(
            ConfigError::new(format!(
                "plugin {} panicked while building: {}",
                P::NAME,
                panic_message(&*panic)
            ))
            .to_wire(),
        )),
    }
}

fn info<P: Plugin>() -> PluginInfoFfi {
    PluginInfoFfi {
        name: RString::from(P::NAME),
        version: RString::from(P::VERSION),
        description: RString::from(P::DESCRIPTION),
        abi_version: ABI_VERSION as crate::abi::AbiVersionRepr,
    }
}

extern "C" fn info_entry<P: Plugin>() -> PluginInfoFfi {
    info::<P>()
}

pub(crate) fn root_module<P: Plugin>() -> PluginModuleRef {
    PluginModule {
        info: info_entry::<P>,
        build: build_entry::<P>,
    }
    .leak_into_prefix()
}

extern "C" fn construct_root_module<P: Plugin>() -> RootModuleResult {
    __call_root_module_loader(root_module::<P>)
}

/// The library header abi_stable looks for; emitted by [`crate::export_plugin!`].
pub const fn library_header<P: Plugin>() -> LibHeader {
    // SAFETY: the constructor returns a PluginModuleRef, the type named here.
    unsafe {
        LibHeader::from_constructor::<PluginModuleRef>(
            construct_root_module::<P>,
            CheckTypeLayout::Yes,
        )
    }
}

/// A layout-independent description (JSON), read by the runner before the ABI check so that a
/// refused plugin can still be named. `panic_unwind` is the plugin crate's panic strategy,
/// taken where [`crate::export_plugin!`] expands.
pub fn info_json<P: Plugin>(panic_unwind: bool) -> *const c_char {
    static INFO: OnceLock<CString> = OnceLock::new();
    INFO.get_or_init(|| {
        let json = serde_json::json!({
            "name": P::NAME,
            "version": P::VERSION,
            "description": P::DESCRIPTION,
            "abi_version": ABI_VERSION,
            "plugin_api_version": crate::PLUGIN_API_VERSION,
            "panic_unwind": panic_unwind,
        });
        CString::new(json.to_string()).unwrap_or_default()
    })
    .as_ptr()
}

/// The JSON schema of the plugin's `config:` section, read only when an operator asks for it.
/// Cached once per library, which exports exactly one plugin.
pub extern "C" fn config_schema_json<P: Plugin>() -> *const c_char {
    static SCHEMA: OnceLock<CString> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let schema = schemars::schema_for!(P::Config);
            CString::new(schema.as_value().to_string()).unwrap_or_default()
        })
        .as_ptr()
}

/// Exports a [`Plugin`] from a `cdylib` crate. Invoke it once, at the crate root.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        /// The abi_stable library header of this plugin.
        #[doc(hidden)]
        // abi_stable's mangled root-module symbol; `tests::export_name_matches_abi_stable`
        // keeps it in step with abi_stable.
        #[unsafe(export_name = "_1as_0lib_1header_0root_bmodule_bloader")]
        pub static __KRM_RUNNER_PLUGIN_HEADER: $crate::__private::LibHeader =
            $crate::__private::library_header::<$plugin>();

        /// Describes this plugin without the ABI, so a runner can name it when refusing it.
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub extern "C" fn krm_runner_plugin_info() -> *const ::std::ffi::c_char {
            $crate::__private::info_json::<$plugin>(cfg!(panic = "unwind"))
        }

        /// The JSON schema of this plugin's `config:` section.
        #[doc(hidden)]
        #[unsafe(no_mangle)]
        pub extern "C" fn krm_runner_plugin_config_schema() -> *const ::std::ffi::c_char {
            $crate::__private::config_schema_json::<$plugin>()
        }
    };
}
