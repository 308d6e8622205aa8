//! The binary contract between the runner and a plugin library. Everything here is `#[repr(C)]`
//! and checked by abi_stable when a library loads; nothing here is visible outside this crate
//! except through the export macro's hidden path.
//!
//! Growing the contract: add methods after the `last_prefix_field` method of a `#[sabi_trait]`
//! (with a default body) or fields after `last_prefix_field` of [`PluginModule`]; anything else
//! is a new [`crate::ABI_VERSION`].

// The sabi_trait macro puts impls inside generated modules.
#![allow(non_local_definitions)]
// Parts of the contract only the runner's side reads (feature `host`): a plugin's own build
// writes them but never reads them back.
#![cfg_attr(not(feature = "host"), allow(dead_code))]

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    sabi_trait,
    sabi_types::{RRef, VersionStrings},
    std_types::{RArc, RBox, ROption, RResult, RSlice, RStr, RString, RVec},
};

use crate::ErrorKind;

/// What a plugin library says about itself.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct PluginInfoFfi {
    pub name: RString,
    pub version: RString,
    pub description: RString,
    pub abi_version: AbiVersionRepr,
}

#[cfg(not(krm_plugin_api_previous))]
pub type AbiVersionRepr = u32;
/// The previous ABI's layout differs here, so that abi_stable's layout check refuses it.
#[cfg(krm_plugin_api_previous)]
pub type AbiVersionRepr = u16;

#[repr(C)]
#[derive(StableAbi, Debug, Clone, Default)]
pub struct ResponseFfi {
    pub resource_list: RVec<u8>,
    pub log: RVec<u8>,
    /// Empty when the evaluator served the call itself; the host then puts the instance name.
    pub served_by: RString,
    pub declined: RVec<RString>,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct ErrorFfi {
    pub kind: ErrorKind,
    pub message: RString,
    pub declined: RVec<RString>,
    /// What the function printed before failing: its ResourceList (with results) and log.
    pub resource_list: RVec<u8>,
    pub log: RVec<u8>,
}

/// Why a call context was cancelled; `NotCancelled` while it runs.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReasonFfi {
    NotCancelled = 0,
    CallerCancelled = 1,
    DeadlineExceeded = 2,
    ShuttingDown = 3,
}

/// Called by the host, at most once, when a call is cancelled.
#[sabi_trait]
pub trait CancelCallbackFfi: Send + Sync {
    fn cancelled(&self, reason: CancelReasonFfi);
}

/// One call's deadline and cancellation signal, owned by the host.
#[sabi_trait]
pub trait CallContextFfi: Send + Sync {
    /// Nanoseconds left before the caller's deadline, if it set one (0 once past).
    fn remaining_nanos(&self) -> ROption<u64>;
    fn cancel_reason(&self) -> CancelReasonFfi;
    /// Blocks up to `timeout_nanos`; returns the reason, `NotCancelled` on timeout.
    fn wait_cancelled(&self, timeout_nanos: u64) -> CancelReasonFfi;
    /// Runs `callback` once the call is cancelled (at once if it already is).
    fn on_cancel(&self, callback: CancelCallbackFfi_TO<'static, RBox<()>>);
    /// How many evaluators deep this call is (guards against chains that loop).
    fn depth(&self) -> u32;
    /// Why the runner chose this evaluator, as JSON ([`crate::FunctionConfigRoute`]); empty when no
    /// FunctionConfig routed the call.
    #[sabi(last_prefix_field)]
    fn route(&self) -> RString;

    /// The version constraint the caller sent with an untagged image (Porch's request field
    /// 3); empty when none. A runner from before it answers empty.
    fn tag(&self) -> RString {
        RString::new()
    }

    /// The evaluator resolved the call's constraint and runs `reference` (image with tag, and
    /// `@digest` when known). A runner from before it ignores the report.
    fn report_resolved(&self, reference: RStr<'_>) {
        let _ = reference;
    }

    /// The W3C trace context of the span the call runs under: the `traceparent` value, then,
    /// after a newline, the `tracestate` value (possibly empty). Empty when the runner does not
    /// trace the call, or is from before it.
    fn trace_context(&self) -> RString {
        RString::new()
    }
}

pub type CallContextRef<'a> = CallContextFfi_TO<'a, RRef<'a, ()>>;

/// An evaluator instance, as the host sees it.
#[sabi_trait]
pub trait EvaluatorFfi: Send + Sync {
    fn evaluate(
        &self,
        context: CallContextRef<'_>,
        image: RStr<'_>,
        resource_list: RSlice<'_, u8>,
    ) -> RResult<ResponseFfi, ErrorFfi>;

    /// The functions this evaluator implements itself, as JSON (`[FunctionSignature]`).
    fn functions(&self) -> RString;

    /// A hint that calls for `image` are coming (routed as `route`, JSON or empty): prepare
    /// without blocking. Errors are the evaluator's to log.
    #[sabi(last_prefix_field)]
    fn warm_up(&self, image: RStr<'_>, route: RStr<'_>);

    /// What the evaluator would run for `image` under the tag constraint `tag` (routed as
    /// `route`, JSON or empty), as JSON (`ResolveAnswer`); empty when it does not resolve
    /// constraints (plugins from before it).
    fn resolve(&self, image: RStr<'_>, tag: RStr<'_>, route: RStr<'_>) -> RString {
        let _ = (image, tag, route);
        RString::new()
    }

    /// What the evaluator would do with `image` (routed as `route`, JSON or empty), as JSON
    /// ([`crate::Probe`]); empty when it cannot tell, as from plugins built before this method.
    fn probe(&self, image: RStr<'_>, route: RStr<'_>) -> RString {
        let _ = (image, route);
        RString::new()
    }

    /// The typed functions (ConfigHub's model) the evaluator contributes, as JSON: a list of
    /// `krm_function_executor::TypedSignature` (a [`crate::FunctionSignature`] with its `typed`
    /// object). Empty when it contributes none, as from plugins built before this method.
    fn typed_functions(&self) -> RString {
        RString::new()
    }

    /// Runs the typed function `function` once: `request` is a FunctionInvocationRequest
    /// (JSON, ConfigHub's field names, as the HTTP route takes it) holding that one invocation,
    /// its arguments already checked against the signature and named; the answer is a
    /// FunctionInvocationResponse (JSON) whose `Success` says whether the function succeeded.
    /// An error is the evaluator's own failure (a panic, an unknown function).
    fn invoke_typed(
        &self,
        context: CallContextRef<'_>,
        function: RStr<'_>,
        request: RSlice<'_, u8>,
    ) -> RResult<RVec<u8>, ErrorFfi> {
        let _ = (context, request);
        RResult::RErr(ErrorFfi {
            kind: ErrorKind::NotFound,
            message: RString::from(format!(
                "no typed function {:?} here: the plugin contributes none",
                function.as_str()
            )),
            declined: RVec::new(),
            resource_list: RVec::new(),
            log: RVec::new(),
        })
    }

    /// The function `name` picks among those the evaluator implements itself, as JSON (a
    /// [`crate::FunctionSignature`], or `null`). Empty from plugins built before this method:
    /// the runner then picks among `functions`.
    fn function(&self, name: RStr<'_>) -> RString {
        let _ = name;
        RString::new()
    }

    /// What a call for `image` (routed as `route`, JSON or empty) would run, for the runner's
    /// result cache, as JSON ([`crate::CacheIdentity`]); empty when it cannot tell, as from
    /// plugins built before this method (their calls are never cached unless an operator
    /// marks their images).
    fn cache_identity(&self, image: RStr<'_>, route: RStr<'_>) -> RString {
        let _ = (image, route);
        RString::new()
    }
}

pub type EvaluatorBox = EvaluatorFfi_TO<'static, RBox<()>>;
pub type EvaluatorArc = EvaluatorFfi_TO<'static, RArc<()>>;

/// What the host offers a plugin: logging, settings and the other evaluator instances.
#[sabi_trait]
pub trait HostFfi: Send + Sync + Clone {
    fn log(&self, level: u8, target: RStr<'_>, message: RStr<'_>);
    fn max_log_level(&self) -> u8;
    fn setting(&self, key: RStr<'_>) -> ROption<RString>;
    fn evaluator(&self, name: RStr<'_>) -> ROption<EvaluatorArc>;

    /// Records one measurement of the plugin's metric `name` (see [`crate::Telemetry`]). A
    /// runner from before it, or without metrics, ignores it.
    fn record(
        &self,
        kind: MeasurementKindFfi,
        name: RStr<'_>,
        value: f64,
        labels: RSlice<'_, LabelFfi<'_>>,
    ) {
        let _ = (kind, name, value, labels);
    }

    /// Opens the span `name` under `parent` (wire form of [`crate::TraceContext`]: traceparent,
    /// newline, tracestate; empty: a new trace). `RNone` when the runner does not trace, or is
    /// from before it.
    fn start_span(&self, parent: RStr<'_>, name: RStr<'_>) -> ROption<SpanBox> {
        let _ = (parent, name);
        ROption::RNone
    }
}

pub type HostArc = HostFfi_TO<'static, RArc<()>>;

/// What a measurement does to its metric.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeasurementKindFfi {
    CounterAdd = 0,
    HistogramRecord = 1,
    GaugeSet = 2,
}

#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct LabelFfi<'a> {
    pub key: RStr<'a>,
    pub value: RStr<'a>,
}

#[repr(u8)]
#[derive(StableAbi, Debug, Clone)]
pub enum AttributeValueFfi {
    Str(RString),
    I64(i64),
    F64(f64),
    Bool(bool),
}

/// A span a plugin opened through the host; dropping it ends it.
#[sabi_trait]
pub trait SpanFfi: Send + Sync {
    fn set_attribute(&self, key: RStr<'_>, value: AttributeValueFfi);
    /// Marks the span failed, with `message`.
    fn set_error(&self, message: RStr<'_>);
    /// This span's W3C context, in the wire form of [`crate::TraceContext`], for passing on.
    #[sabi(last_prefix_field)]
    fn trace_context(&self) -> RString;
}

pub type SpanBox = SpanFfi_TO<'static, RBox<()>>;

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef)))]
#[sabi(missing_field(panic))]
pub struct PluginModule {
    pub info: extern "C" fn() -> PluginInfoFfi,
    #[sabi(last_prefix_field)]
    pub build: extern "C" fn(
        instance: RStr<'_>,
        config_json: RStr<'_>,
        host: HostArc,
    ) -> RResult<EvaluatorBox, RString>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "krm_runner_plugin";
    const NAME: &'static str = "krm-runner evaluator plugin";
    const VERSION_STRINGS: VersionStrings = crate::INTERFACE_VERSION;
}

/// Log levels on the wire: 1 = error ... 5 = trace.
pub fn level_to_u8(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 1,
        tracing::Level::WARN => 2,
        tracing::Level::INFO => 3,
        tracing::Level::DEBUG => 4,
        tracing::Level::TRACE => 5,
    }
}
