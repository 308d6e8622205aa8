//! The runner's side of a call: building instances from a plugin's root module and calling
//! them under a context the runner owns. `krm-plugin-loader` (the runner's loader) and the test
//! kit use it; plugins never do.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use abi_stable::{
    library::{LibHeader, LibraryError},
    sabi_trait::TD_Opaque,
    sabi_types::RRef,
    std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString},
};

use crate::abi::{
    AttributeValueFfi, CallContextFfi, CallContextFfi_TO, CallContextRef, CancelCallbackFfi_TO,
    CancelReasonFfi, ErrorFfi, EvaluatorArc, EvaluatorBox, EvaluatorFfi, EvaluatorFfi_TO, HostArc,
    HostFfi, HostFfi_TO, LabelFfi, MeasurementKindFfi, PluginModuleRef, ResponseFfi, SpanBox,
    SpanFfi, SpanFfi_TO, level_to_u8,
};
use crate::call::ResolveAnswer;
use crate::plugin::{from_ffi_result, to_ffi_result};
use crate::{
    AttributeValue, CacheIdentity, CallContext, CancelReason, ConfigError, ErrorKind, EvalError,
    EvalResponse, FunctionConfigRoute, FunctionSignature, Probe, ProbeOutcome, Resolution,
    TraceContext, TypedFunctionSet,
};
// What only the runner handles: plugins record measurements through `Telemetry`, and their
// declines are worded by the SDK.
pub use crate::decline::declined_message;
pub use crate::telemetry::{Measurement, MeasurementKind};

/// Calls nest through delegating evaluators; deeper than this is a loop in the configuration.
const MAX_CALL_DEPTH: u32 = 16;

/// A plugin's root module, reached through the ABI: what builds its instances. The loader
/// (`krm-plugin-loader`) takes it from a library file, the test kit from a plugin linked in.
#[derive(Clone, Copy)]
pub struct PluginModule(PluginModuleRef);

impl PluginModule {
    /// The module behind a loaded library's header, after abi_stable's layout and version
    /// checks.
    pub fn from_library_header(header: &'static LibHeader) -> Result<Self, LibraryError> {
        header.init_root_module::<PluginModuleRef>().map(Self)
    }

    /// The module behind a loaded library's header, after abi_stable's version checks but
    /// without its layout check, which walks every type of the ABI.
    ///
    /// # Safety
    /// The library's layouts must have passed [`Self::from_library_header`]'s check against
    /// this very executable before: the same files, unchanged since.
    pub unsafe fn from_library_header_checked_before(
        header: &'static LibHeader,
    ) -> Result<Self, LibraryError> {
        // SAFETY: the caller vouches that the layout check this skips has passed for these
        // same files.
        unsafe { header.init_root_module_with_unchecked_layout::<PluginModuleRef>() }.map(Self)
    }

    /// Plugin `P` linked into this process, as if loaded from a file.
    pub fn linked_in<P: crate::Plugin>() -> Self {
        Self(crate::plugin::root_module::<P>())
    }

    /// The name the plugin gives through the ABI.
    pub fn name(&self) -> String {
        (self.0.info())().name.into_string()
    }

    /// Builds the instance `instance` of plugin `plugin` from its `config:` section (JSON
    /// text). The error holds every problem the plugin reported, each naming the field at fault.
    pub fn build(
        &self,
        plugin: &str,
        instance: &str,
        config_json: &str,
        services: Arc<dyn HostServices>,
    ) -> Result<EvaluatorInstance, ConfigError> {
        let host: HostArc = HostFfi_TO::from_ptr(
            RArc::new(HostAdapter {
                plugin: plugin.to_owned(),
                instance: instance.to_owned(),
                services,
            }),
            TD_Opaque,
        );
        let build = self.0.build();
        match build(RStr::from_str(instance), RStr::from_str(config_json), host) {
            RResult::ROk(inner) => Ok(EvaluatorInstance {
                name: instance.to_owned(),
                inner,
            }),
            RResult::RErr(problems) => Err(ConfigError::from_wire(problems.as_str())),
        }
    }
}

/// What the runner offers the plugins it builds.
pub trait HostServices: Send + Sync + 'static {
    /// A runner-wide setting by key (`default_image_prefix`, `max_message_bytes`).
    fn setting(&self, key: &str) -> Option<String>;
    /// The slot of the instance `name`, looked up by `asking` while it is built.
    fn evaluator(&self, asking: &str, name: &str) -> Option<Arc<EvaluatorSlot>>;

    /// A measurement the instance `instance` of plugin `plugin` recorded.
    fn record(&self, plugin: &str, instance: &str, measurement: &Measurement<'_>) {
        let _ = (plugin, instance, measurement);
    }

    /// Opens a span for the instance `instance` of plugin `plugin`; `None` when not tracing.
    fn start_span(
        &self,
        plugin: &str,
        instance: &str,
        parent: Option<&TraceContext>,
        name: &str,
    ) -> Option<Box<dyn HostSpan>> {
        let _ = (plugin, instance, parent, name);
        None
    }
}

/// A span a plugin opened, as the runner keeps it; dropping it ends it.
pub trait HostSpan: Send + Sync {
    fn set_attribute(&self, key: &str, value: AttributeValue);
    fn set_error(&self, message: &str);
    fn trace_context(&self) -> Option<TraceContext>;
}

struct SpanAdapter(Box<dyn HostSpan>);

impl SpanFfi for SpanAdapter {
    fn set_attribute(&self, key: RStr<'_>, value: AttributeValueFfi) {
        self.0
            .set_attribute(key.as_str(), AttributeValue::from_ffi(value));
    }

    fn set_error(&self, message: RStr<'_>) {
        self.0.set_error(message.as_str());
    }

    fn trace_context(&self) -> RString {
        self.0
            .trace_context()
            .map(|context| RString::from(crate::call::trace_to_wire(&context)))
            .unwrap_or_default()
    }
}

#[derive(Clone)]
struct HostAdapter {
    plugin: String,
    instance: String,
    services: Arc<dyn HostServices>,
}

impl HostFfi for HostAdapter {
    fn log(&self, level: u8, target: RStr<'_>, message: RStr<'_>) {
        let (plugin, target, message) = (&self.plugin, target.as_str(), message.as_str());
        match level {
            0 | 1 => tracing::error!(plugin, target, "{message}"),
            2 => tracing::warn!(plugin, target, "{message}"),
            3 => tracing::info!(plugin, target, "{message}"),
            4 => tracing::debug!(plugin, target, "{message}"),
            _ => tracing::trace!(plugin, target, "{message}"),
        }
    }

    fn max_log_level(&self) -> u8 {
        tracing::level_filters::LevelFilter::current()
            .into_level()
            .map_or(0, level_to_u8)
    }

    fn setting(&self, key: RStr<'_>) -> ROption<RString> {
        let services = &self.services;
        catch_unwind(AssertUnwindSafe(|| services.setting(key.as_str())))
            .ok()
            .flatten()
            .map(RString::from)
            .into()
    }

    fn evaluator(&self, name: RStr<'_>) -> ROption<EvaluatorArc> {
        let services = &self.services;
        catch_unwind(AssertUnwindSafe(|| {
            services.evaluator(&self.instance, name.as_str())
        }))
        .ok()
        .flatten()
        .map(|slot| EvaluatorFfi_TO::from_ptr(RArc::new(SlotEvaluator(slot)), TD_Opaque))
        .into()
    }

    fn record(
        &self,
        kind: MeasurementKindFfi,
        name: RStr<'_>,
        value: f64,
        labels: RSlice<'_, LabelFfi<'_>>,
    ) {
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|label| (label.key.as_str(), label.value.as_str()))
            .collect();
        let measurement = Measurement {
            kind: MeasurementKind::from_ffi(kind),
            name: name.as_str(),
            value,
            labels: &labels,
        };
        let services = &self.services;
        let _ = catch_unwind(AssertUnwindSafe(|| {
            services.record(&self.plugin, &self.instance, &measurement)
        }));
    }

    fn start_span(&self, parent: RStr<'_>, name: RStr<'_>) -> ROption<SpanBox> {
        let parent = crate::call::trace_from_wire(parent.as_str());
        let services = &self.services;
        catch_unwind(AssertUnwindSafe(|| {
            services.start_span(&self.plugin, &self.instance, parent.as_ref(), name.as_str())
        }))
        .ok()
        .flatten()
        .map(|span| SpanFfi_TO::from_value(SpanAdapter(span), TD_Opaque))
        .into()
    }
}

/// A configured instance that other instances may call, filled once it is built. Lookups happen
/// while instances are being built, in any order, so they return the slot, not the instance.
pub struct EvaluatorSlot {
    name: String,
    state: OnceLock<SlotState>,
    /// Builds the instance when it is first needed; see [`EvaluatorSlot::fill_on_first_use`].
    on_first_use: Mutex<Option<BuildOnFirstUse>>,
}

/// Builds a slot's instance, or says why it cannot.
pub type BuildOnFirstUse = Box<dyn FnOnce() -> Result<Arc<EvaluatorInstance>, String> + Send>;

enum SlotState {
    Ready(Arc<EvaluatorInstance>),
    Disabled,
    /// Built on first use, and that failed: why.
    Unusable(String),
}

impl EvaluatorSlot {
    pub fn new(name: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            state: OnceLock::new(),
            on_first_use: Mutex::new(None),
        })
    }

    pub fn fill(&self, instance: Arc<EvaluatorInstance>) {
        let _ = self.state.set(SlotState::Ready(instance));
    }

    /// Disabled instances decline every call, so delegating evaluators skip them.
    pub fn disable(&self) {
        let _ = self.state.set(SlotState::Disabled);
    }

    /// Leaves the slot empty until a call (or a question about its functions) reaches it, and
    /// only then runs `build`, once: a runner that makes one call loads only the plugins that
    /// call reaches. When `build` fails, every call through the slot fails with its reason.
    /// `build` must not call through any slot.
    pub fn fill_on_first_use(&self, build: BuildOnFirstUse) {
        *self
            .on_first_use
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(build);
    }

    fn state(&self) -> Option<&SlotState> {
        if let Some(state) = self.state.get() {
            return Some(state);
        }
        // Held while building, so that a call arriving meanwhile waits for the instance.
        let mut on_first_use = self
            .on_first_use
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(build) = on_first_use.take() {
            let state = match build() {
                Ok(instance) => SlotState::Ready(instance),
                Err(reason) => SlotState::Unusable(reason),
            };
            let _ = self.state.set(state);
        }
        self.state.get()
    }
}

/// Why a disabled instance declines every call.
const DISABLED_REASON: &str = "disabled (`disabled:` or --disable-runtimes)";

struct SlotEvaluator(Arc<EvaluatorSlot>);

impl EvaluatorFfi for SlotEvaluator {
    fn evaluate(
        &self,
        context: CallContextRef<'_>,
        image: RStr<'_>,
        resource_list: RSlice<'_, u8>,
    ) -> RResult<ResponseFfi, ErrorFfi> {
        let slot = &self.0;
        if context.depth() >= MAX_CALL_DEPTH {
            return to_ffi_result(Err(EvalError::internal(format!(
                "evaluator chain deeper than {MAX_CALL_DEPTH} calls at {:?}: the configuration loops",
                slot.name
            ))));
        }
        match slot.state() {
            Some(SlotState::Ready(instance)) => {
                let depth = context.depth() + 1;
                let nested = NestedContext {
                    parent: context,
                    depth,
                };
                instance.evaluate_ffi(
                    CallContextFfi_TO::from_ptr(RRef::new(&nested), TD_Opaque),
                    image,
                    resource_list,
                )
            }
            Some(SlotState::Disabled) => to_ffi_result(Err(EvalError::declined_because(
                image.as_str(),
                DISABLED_REASON,
            ))),
            Some(SlotState::Unusable(reason)) => to_ffi_result(Err(EvalError::new(
                ErrorKind::Unavailable,
                format!("evaluator {:?} could not start: {reason}", slot.name),
            ))),
            None => to_ffi_result(Err(EvalError::new(
                ErrorKind::Unavailable,
                format!("evaluator {:?} is not built yet", slot.name),
            ))),
        }
    }

    fn functions(&self) -> RString {
        match self.0.state() {
            Some(SlotState::Ready(instance)) => instance.inner.functions(),
            _ => RString::from("[]"),
        }
    }

    fn function(&self, name: RStr<'_>) -> RString {
        match self.0.state() {
            Some(SlotState::Ready(instance)) => instance.inner.function(name),
            _ => RString::from("null"),
        }
    }

    fn warm_up(&self, image: RStr<'_>, route: RStr<'_>) {
        if let Some(SlotState::Ready(instance)) = self.0.state() {
            instance.inner.warm_up(image, route);
        }
    }

    fn resolve(&self, image: RStr<'_>, tag: RStr<'_>, route: RStr<'_>) -> RString {
        match self.0.state() {
            Some(SlotState::Ready(instance)) => instance.inner.resolve(image, tag, route),
            _ => RString::new(),
        }
    }

    fn cache_identity(&self, image: RStr<'_>, route: RStr<'_>) -> RString {
        match self.0.state() {
            Some(SlotState::Ready(instance)) => instance.inner.cache_identity(image, route),
            _ => RString::new(),
        }
    }

    fn probe(&self, image: RStr<'_>, route: RStr<'_>) -> RString {
        match self.0.state() {
            Some(SlotState::Ready(instance)) => instance.inner.probe(image, route),
            Some(SlotState::Disabled) => RString::from(
                serde_json::to_string(&Probe::Declines(DISABLED_REASON.to_owned()))
                    .unwrap_or_default(),
            ),
            Some(SlotState::Unusable(_)) | None => RString::new(),
        }
    }
}

/// A built evaluator instance.
pub struct EvaluatorInstance {
    name: String,
    inner: EvaluatorBox,
}

impl EvaluatorInstance {
    /// An instance named `name` that the runner implements itself, behind the same ABI as a
    /// plugin's: e.g. one that runs another instance's calls in a worker process.
    pub fn from_evaluator(name: impl Into<String>, evaluator: impl crate::Evaluator) -> Self {
        Self {
            name: name.into(),
            inner: crate::plugin::exported(evaluator),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs one call on the current thread (it blocks: call it from a blocking thread),
    /// telling the evaluator why it was chosen when a FunctionConfig routed the call. The
    /// response's `served_by` is always set.
    pub fn evaluate(
        &self,
        context: &HostCallContext,
        route: Option<&FunctionConfigRoute>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let routed = RoutedContext {
            parent: context,
            route: FunctionConfigRoute::to_json(route),
        };
        FAILED_BY.with_borrow_mut(Option::take);
        let outcome = from_ffi_result(self.evaluate_ffi(
            CallContextFfi_TO::from_ptr(RRef::new(&routed), TD_Opaque),
            RStr::from_str(image),
            RSlice::from_slice(resource_list),
        ));
        if outcome.is_err()
            && let Some(instance) = FAILED_BY.with_borrow_mut(Option::take)
        {
            context.set_failed_by(instance);
        }
        outcome
    }

    /// Tells the instance that calls for `image` are coming; it prepares in the background.
    pub fn warm_up(&self, image: &str, route: Option<&FunctionConfigRoute>) {
        self.inner.warm_up(
            RStr::from_str(image),
            RStr::from_str(&FunctionConfigRoute::to_json(route)),
        );
    }

    /// What the instance would run for the untagged `image` under the tag constraint `tag`;
    /// `None` when it does not serve the image or does not resolve constraints.
    pub fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        let answer = self.inner.resolve(
            RStr::from_str(image),
            RStr::from_str(tag),
            RStr::from_str(&FunctionConfigRoute::to_json(route)),
        );
        ResolveAnswer::from_json(answer.as_str())
    }

    /// What the instance would do with a call for `image` (see [`crate::Evaluator::probe`]).
    pub fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> ProbeOutcome {
        crate::plugin::probe_from_json(&self.inner.probe(
            RStr::from_str(image),
            RStr::from_str(&FunctionConfigRoute::to_json(route)),
        ))
        .into_resolution(&self.name)
    }

    /// What a call for `image` routed as `route` would run here, for the result cache (see
    /// [`crate::Evaluator::cache_identity`]); `None` when the instance cannot tell.
    pub fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let answer = self.inner.cache_identity(
            RStr::from_str(image),
            RStr::from_str(&FunctionConfigRoute::to_json(route)),
        );
        if answer.is_empty() {
            return None;
        }
        serde_json::from_str(answer.as_str()).unwrap_or_else(|error| {
            tracing::error!(instance = %self.name, "unreadable cache identity ({error}): {answer}");
            None
        })
    }

    /// The functions the instance implements itself, with their signatures.
    pub fn functions(&self) -> Vec<FunctionSignature> {
        serde_json::from_str(self.inner.functions().as_str()).unwrap_or_default()
    }

    /// The function `name` picks among those the instance implements itself (see
    /// [`crate::pick_function`]), found without listing them all when the plugin can.
    pub fn function(&self, name: &str) -> Option<FunctionSignature> {
        let answer = self.inner.function(RStr::from_str(name));
        if answer.is_empty() {
            return crate::pick_function(self.functions(), name, |signature| signature);
        }
        serde_json::from_str(answer.as_str()).unwrap_or_else(|error| {
            tracing::error!(instance = %self.name, "unreadable function answer ({error}): {answer}");
            None
        })
    }

    fn evaluate_ffi(
        &self,
        context: CallContextRef<'_>,
        image: RStr<'_>,
        resource_list: RSlice<'_, u8>,
    ) -> RResult<ResponseFfi, ErrorFfi> {
        let mut result = self.inner.evaluate(context, image, resource_list);
        match &mut result {
            RResult::ROk(response) if response.served_by.is_empty() => {
                response.served_by = RString::from(self.name.as_str());
            }
            RResult::RErr(error) if error.kind != ErrorKind::NotFound => {
                // The innermost instance that failed is the first to return.
                FAILED_BY.with_borrow_mut(|failed_by| {
                    failed_by.get_or_insert_with(|| self.name.clone());
                });
            }
            _ => {}
        }
        result
    }
}

/// The instance's typed functions, called through the ABI with the caller's context; none
/// (empty signatures) from a plugin built before typed functions.
impl TypedFunctionSet for EvaluatorInstance {
    fn signatures_json(&self) -> String {
        self.inner.typed_functions().into_string()
    }

    fn invoke(
        &self,
        context: &CallContext<'_>,
        function: &str,
        request: &[u8],
    ) -> Result<Vec<u8>, EvalError> {
        match self.inner.invoke_typed(
            context.inner.sabi_reborrow(),
            RStr::from_str(function),
            RSlice::from_slice(request),
        ) {
            RResult::ROk(response) => Ok(response.into_vec()),
            RResult::RErr(error) => Err(crate::plugin::error_from_ffi(error)),
        }
    }
}

thread_local! {
    /// The innermost instance that failed the call running on this thread (rather than
    /// declining it), for the runner to name. Delegating evaluators call other instances on
    /// the calling thread; one that used another thread leaves the runner naming the instance
    /// it asked.
    static FAILED_BY: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// One call's deadline, cancellation and requested tag constraint, owned by the runner and lent
/// to the evaluators, which report back the image a constraint resolved to.
pub struct HostCallContext {
    deadline: Option<Instant>,
    tag: String,
    resolved: Mutex<Option<String>>,
    failed_by: Mutex<Option<String>>,
    /// `traceparent`, newline, `tracestate` of the span the evaluator now running works under.
    trace: Mutex<String>,
    state: Mutex<CancelState>,
    changed: Condvar,
}

#[derive(Default)]
struct CancelState {
    reason: Option<CancelReason>,
    callbacks: Vec<CancelCallbackFfi_TO<'static, RBox<()>>>,
}

impl HostCallContext {
    pub fn new(deadline: Option<Instant>) -> Arc<Self> {
        Self::with_tag(deadline, String::new())
    }

    /// A call carrying a tag constraint (checked to parse; empty: none).
    pub fn with_tag(deadline: Option<Instant>, tag: String) -> Arc<Self> {
        Arc::new(Self {
            deadline,
            tag,
            resolved: Mutex::default(),
            failed_by: Mutex::default(),
            trace: Mutex::default(),
            state: Mutex::new(CancelState::default()),
            changed: Condvar::new(),
        })
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// This context as an evaluator sees it, for work the runner does itself under the call
    /// (ConfigHub's executor) and hands on to plugins.
    pub fn as_call_context(&self) -> CallContext<'_> {
        CallContext::new(CallContextFfi_TO::from_ptr(RRef::new(self), TD_Opaque))
    }

    /// The requested tag constraint; empty when none.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The image the constraint resolved to, as the evaluator that served reported it (or the
    /// runner recorded it, when it resolved the constraint itself).
    pub fn resolved(&self) -> Option<String> {
        self.resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The instance that failed the call (the innermost one, when instances delegate); `None`
    /// when the call succeeded or every instance declined.
    pub fn failed_by(&self) -> Option<String> {
        self.failed_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_failed_by(&self, instance: String) {
        *self
            .failed_by
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(instance);
    }

    /// Records the image a constraint resolved to; the latest report stands (an evaluator that
    /// declines after resolving is followed by the one that serves).
    pub fn set_resolved(&self, reference: &str) {
        *self.resolved.lock().unwrap_or_else(PoisonError::into_inner) = Some(reference.to_owned());
    }

    /// The W3C trace context evaluators see from now on (see [`crate::TraceContext`]): the
    /// runner sets it to the span of the evaluator it is about to call.
    pub fn set_trace_context(&self, traceparent: &str, tracestate: &str) {
        let mut trace = self.trace.lock().unwrap_or_else(PoisonError::into_inner);
        trace.clear();
        trace.push_str(traceparent);
        trace.push('\n');
        trace.push_str(tracestate);
    }

    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.lock().reason
    }

    /// Cancels the call; the first reason given stands. Registered callbacks run on this thread.
    pub fn cancel(&self, reason: CancelReason) {
        let callbacks = {
            let mut state = self.lock();
            if state.reason.is_some() {
                return;
            }
            state.reason = Some(reason);
            std::mem::take(&mut state.callbacks)
        };
        self.changed.notify_all();
        for callback in callbacks {
            callback.cancelled(reason.into());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn reason_to_ffi(reason: Option<CancelReason>) -> CancelReasonFfi {
    reason.map_or(CancelReasonFfi::NotCancelled, CancelReasonFfi::from)
}

impl CallContextFfi for HostCallContext {
    fn remaining_nanos(&self) -> ROption<u64> {
        self.deadline
            .map(|deadline| {
                let left = deadline.saturating_duration_since(Instant::now());
                u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)
            })
            .into()
    }

    fn cancel_reason(&self) -> CancelReasonFfi {
        reason_to_ffi(self.lock().reason)
    }

    fn wait_cancelled(&self, timeout_nanos: u64) -> CancelReasonFfi {
        let timeout = Duration::from_nanos(timeout_nanos);
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |state| state.reason.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        reason_to_ffi(state.reason)
    }

    fn on_cancel(&self, callback: CancelCallbackFfi_TO<'static, RBox<()>>) {
        let mut state = self.lock();
        match state.reason {
            Some(reason) => {
                drop(state);
                callback.cancelled(reason.into());
            }
            None => state.callbacks.push(callback),
        }
    }

    fn depth(&self) -> u32 {
        0
    }

    fn route(&self) -> RString {
        RString::new()
    }

    fn tag(&self) -> RString {
        RString::from(self.tag.as_str())
    }

    fn report_resolved(&self, reference: RStr<'_>) {
        self.set_resolved(reference.as_str());
    }

    fn trace_context(&self) -> RString {
        RString::from(
            self.trace
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_str(),
        )
    }
}

/// The context a call sees from the runner: the call's own, plus the route that chose it.
struct RoutedContext<'a> {
    parent: &'a HostCallContext,
    route: String,
}

impl CallContextFfi for RoutedContext<'_> {
    fn remaining_nanos(&self) -> ROption<u64> {
        self.parent.remaining_nanos()
    }

    fn cancel_reason(&self) -> CancelReasonFfi {
        CallContextFfi::cancel_reason(self.parent)
    }

    fn wait_cancelled(&self, timeout_nanos: u64) -> CancelReasonFfi {
        self.parent.wait_cancelled(timeout_nanos)
    }

    fn on_cancel(&self, callback: CancelCallbackFfi_TO<'static, RBox<()>>) {
        self.parent.on_cancel(callback)
    }

    fn depth(&self) -> u32 {
        0
    }

    fn route(&self) -> RString {
        RString::from(self.route.as_str())
    }

    fn tag(&self) -> RString {
        CallContextFfi::tag(self.parent)
    }

    fn report_resolved(&self, reference: RStr<'_>) {
        self.parent.set_resolved(reference.as_str());
    }

    fn trace_context(&self) -> RString {
        CallContextFfi::trace_context(self.parent)
    }
}

/// The context a delegated call sees: the caller's, one level deeper.
struct NestedContext<'a> {
    parent: CallContextRef<'a>,
    depth: u32,
}

impl CallContextFfi for NestedContext<'_> {
    fn remaining_nanos(&self) -> ROption<u64> {
        self.parent.remaining_nanos()
    }

    fn cancel_reason(&self) -> CancelReasonFfi {
        self.parent.cancel_reason()
    }

    fn wait_cancelled(&self, timeout_nanos: u64) -> CancelReasonFfi {
        self.parent.wait_cancelled(timeout_nanos)
    }

    fn on_cancel(&self, callback: CancelCallbackFfi_TO<'static, RBox<()>>) {
        self.parent.on_cancel(callback)
    }

    fn depth(&self) -> u32 {
        self.depth
    }

    fn route(&self) -> RString {
        self.parent.route()
    }

    fn tag(&self) -> RString {
        self.parent.tag()
    }

    fn report_resolved(&self, reference: RStr<'_>) {
        self.parent.report_resolved(reference)
    }

    fn trace_context(&self) -> RString {
        self.parent.trace_context()
    }
}
