//! What an evaluator receives and returns for one call.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::sabi_types::RRef;
use abi_stable::std_types::{RBox, ROption, RString};

use crate::abi::{
    CallContextFfi, CallContextFfi_TO, CallContextRef, CancelCallbackFfi, CancelCallbackFfi_TO,
    CancelReasonFfi,
};
use crate::{TraceContext, quoted};

/// Why a call failed, as the runner maps it onto gRPC status codes.
#[repr(u8)]
#[derive(
    abi_stable::StableAbi,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum ErrorKind {
    /// This evaluator does not serve the image; the chain asks the next one (gRPC NOT_FOUND).
    NotFound,
    /// The request itself is unusable, e.g. the ResourceList does not parse (INVALID_ARGUMENT).
    InvalidInput,
    /// The function ran and failed (INTERNAL, carrying its stderr and results).
    Failed,
    /// The caller's deadline passed (DEADLINE_EXCEEDED).
    DeadlineExceeded,
    /// The caller went away (CANCELLED).
    Cancelled,
    /// The evaluator cannot serve right now, e.g. it is shutting down (UNAVAILABLE).
    Unavailable,
    /// A limit was reached: a full queue, an output too large (RESOURCE_EXHAUSTED).
    ResourceExhausted,
    /// A bug or an unexpected condition in the evaluator, including a panic (INTERNAL).
    Internal,
}

impl ErrorKind {
    /// The gRPC status code (its number, as every gRPC library has it) a runner answers this
    /// error with.
    pub fn grpc_code(self) -> i32 {
        match self {
            ErrorKind::NotFound => 5,
            ErrorKind::InvalidInput => 3,
            ErrorKind::Failed | ErrorKind::Internal => 13,
            ErrorKind::DeadlineExceeded => 4,
            ErrorKind::Cancelled => 1,
            ErrorKind::Unavailable => 14,
            ErrorKind::ResourceExhausted => 8,
        }
    }

    /// The kind of error a gRPC status code stands for: the inverse of [`ErrorKind::grpc_code`],
    /// with INTERNAL read as [`ErrorKind::Failed`] (a function's failure) and codes without a
    /// kind of their own as `None`.
    pub fn from_grpc_code(code: i32) -> Option<ErrorKind> {
        Some(match code {
            5 => ErrorKind::NotFound,
            3 => ErrorKind::InvalidInput,
            13 => ErrorKind::Failed,
            4 => ErrorKind::DeadlineExceeded,
            1 => ErrorKind::Cancelled,
            14 => ErrorKind::Unavailable,
            8 => ErrorKind::ResourceExhausted,
            _ => return None,
        })
    }
}

/// An evaluator's error: a kind and a message for the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    /// What went wrong, which decides the gRPC status the caller gets.
    pub kind: ErrorKind,
    /// For the caller; name the thing at fault.
    pub message: String,
    /// Evaluators that declined (answered NotFound) before this error, in order. Delegating
    /// evaluators such as `multi` fill it; leaf evaluators leave it empty.
    pub declined: Vec<String>,
    /// What a failed function printed anyway: its ResourceList (carrying `results`), if any.
    pub resource_list: Vec<u8>,
    /// The failed function's log (stderr), if any.
    pub log: Vec<u8>,
}

impl EvalError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            declined: Vec::new(),
            resource_list: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Attaches what the function printed before failing.
    pub fn with_output(mut self, resource_list: Vec<u8>, log: Vec<u8>) -> Self {
        self.resource_list = resource_list;
        self.log = log;
        self
    }

    /// The conventional decline: `function "<image>" not found`, as kpt and Porch word it.
    pub fn not_found(image: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            format!("function {} not found", quoted(image)),
        )
    }

    /// The function ran and failed (INTERNAL, with its output).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Failed, message)
    }

    /// Something broke in the evaluator itself (INTERNAL).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// The caller's input cannot be used (INVALID_ARGUMENT).
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }
}

/// A successful call's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvalResponse {
    /// The output ResourceList.
    pub resource_list: Vec<u8>,
    /// The function's log (its stderr, for process-based evaluators).
    pub log: Vec<u8>,
    /// The evaluator instance that really served the call, when this one delegated. Leave it
    /// `None` when serving yourself: the runner fills in your instance name.
    pub served_by: Option<String>,
    /// Evaluators that declined before the one that served, in order (delegating evaluators).
    pub declined: Vec<String>,
}

impl EvalResponse {
    /// A served call's answer: the ResourceList and the function's log (stderr).
    pub fn new(resource_list: Vec<u8>, log: Vec<u8>) -> Self {
        Self {
            resource_list,
            log,
            ..Self::default()
        }
    }
}

/// What an evaluator runs for an image and a tag constraint: the highest version it knows of
/// that satisfies the constraint (see [`crate::Evaluator::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resolution {
    /// The image it runs: the repository with the chosen tag.
    pub image: String,
    /// The chosen tag.
    pub tag: String,
    /// The image's manifest digest, when the evaluator knows it.
    pub digest: Option<String>,
    /// The version tags it chose among, highest first.
    pub candidates: Vec<String>,
}

impl Resolution {
    /// The image with its digest when known: what `x-krm-resolved-image` says.
    pub fn reference(&self) -> String {
        match &self.digest {
            Some(digest) => format!("{}@{digest}", self.image),
            None => self.image.clone(),
        }
    }
}

/// [`Resolution`] or the error, as the ABI carries it (JSON).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ResolveAnswer {
    Resolved(Resolution),
    Error { kind: ErrorKind, message: String },
}

impl ResolveAnswer {
    pub(crate) fn to_json(outcome: Option<Result<Resolution, EvalError>>) -> String {
        let answer = match outcome {
            None => return String::new(),
            Some(Ok(resolution)) => Self::Resolved(resolution),
            Some(Err(error)) => Self::Error {
                kind: error.kind,
                message: error.message,
            },
        };
        serde_json::to_string(&answer).unwrap_or_default()
    }

    #[cfg(feature = "host")]
    pub(crate) fn from_json(json: &str) -> Option<Result<Resolution, EvalError>> {
        if json.is_empty() {
            return None;
        }
        Some(match serde_json::from_str(json) {
            Ok(Self::Resolved(resolution)) => Ok(resolution),
            Ok(Self::Error { kind, message }) => Err(EvalError::new(kind, message)),
            Err(error) => Err(EvalError::internal(format!(
                "unreadable resolution from the evaluator ({error}): {json}"
            ))),
        })
    }
}

/// Why the runner sent a call to an evaluator: the FunctionConfig that matched the image and
/// the executor of it that names this evaluator. Evaluators read their own settings from it
/// (the builtin its function id, exec its binary path, pod its pool limits).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionConfigRoute {
    /// The FunctionConfig, as `namespace/name` (cluster) or `name (file)` (files).
    pub function_config: String,
    /// The executor section of the FunctionConfig that chose the evaluator.
    pub executor: FunctionConfigExecutor,
    /// That executor's section of the FunctionConfig's spec (`goExecutor`, `wasmExecutor`,
    /// `binaryExecutor` or `podExecutor`), with a relative binary or module path made absolute. Read it with
    /// [`FunctionConfigRoute::settings`] into the matching type of `krm-runner-function-config`.
    pub settings: serde_json::Value,
}

/// The executors of a FunctionConfig, in the order the runner tries them. `wasmExecutor` is
/// krm-runner's extension to Porch's three; a plugin built before it never receives it (the
/// runner routes wasmExecutor calls to the instance standing for it only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FunctionConfigExecutor {
    /// `goExecutor`: a function compiled into an evaluator (the builtins).
    GoExecutor,
    /// `wasmExecutor`: a WebAssembly module, from a file or a registry.
    WasmExecutor,
    /// `binaryExecutor`: an executable on the runner's disk.
    BinaryExecutor,
    /// `podExecutor`: a container image run in a pod.
    PodExecutor,
}

impl std::fmt::Display for FunctionConfigExecutor {
    /// The field name, as in messages about a FunctionConfig (`goExecutor: not configured`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.field())
    }
}

impl FunctionConfigExecutor {
    /// The executor's field name in a FunctionConfig spec.
    pub fn field(self) -> &'static str {
        match self {
            Self::GoExecutor => "goExecutor",
            Self::WasmExecutor => "wasmExecutor",
            Self::BinaryExecutor => "binaryExecutor",
            Self::PodExecutor => "podExecutor",
        }
    }
}

impl FunctionConfigRoute {
    /// The executor's settings as `T`; an `Internal` error naming the FunctionConfig if they
    /// do not fit (the runner validated them, so this means mismatched versions).
    pub fn settings<T: serde::de::DeserializeOwned>(&self) -> Result<T, EvalError> {
        T::deserialize(&self.settings).map_err(|error| {
            EvalError::internal(format!(
                "FunctionConfig {}: unreadable {}: {error}",
                self.function_config,
                self.executor.field()
            ))
        })
    }

    pub(crate) fn from_json(json: &str) -> Option<Self> {
        if json.is_empty() {
            return None;
        }
        match serde_json::from_str(json) {
            Ok(route) => Some(route),
            Err(error) => {
                tracing::error!("unreadable route from the runner ({error}): {json}");
                None
            }
        }
    }

    pub(crate) fn to_json(route: Option<&Self>) -> String {
        route
            .and_then(|route| serde_json::to_string(route).ok())
            .unwrap_or_default()
    }
}

/// Why a call stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CancelReason {
    /// The caller cancelled or disconnected.
    CallerCancelled,
    /// The caller's deadline passed.
    DeadlineExceeded,
    /// The runner is shutting down and its grace period is over.
    ShuttingDown,
}

impl CancelReason {
    pub(crate) fn from_ffi(reason: CancelReasonFfi) -> Option<Self> {
        match reason {
            CancelReasonFfi::NotCancelled => None,
            CancelReasonFfi::CallerCancelled => Some(Self::CallerCancelled),
            CancelReasonFfi::DeadlineExceeded => Some(Self::DeadlineExceeded),
            CancelReasonFfi::ShuttingDown => Some(Self::ShuttingDown),
        }
    }

    /// The kind of error a call stopped for this reason answers with.
    pub fn error_kind(self) -> ErrorKind {
        match self {
            Self::CallerCancelled => ErrorKind::Cancelled,
            Self::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            Self::ShuttingDown => ErrorKind::Unavailable,
        }
    }

    /// The error an evaluator returns when it stops for this reason.
    pub fn to_error(self, image: &str) -> EvalError {
        match self {
            Self::CallerCancelled => EvalError::new(
                ErrorKind::Cancelled,
                format!("call to {} cancelled by the caller", quoted(image)),
            ),
            Self::DeadlineExceeded => EvalError::new(
                ErrorKind::DeadlineExceeded,
                format!("call to {} exceeded the caller's deadline", quoted(image)),
            ),
            Self::ShuttingDown => EvalError::new(
                ErrorKind::Unavailable,
                format!(
                    "call to {} stopped: the runner is shutting down",
                    quoted(image)
                ),
            ),
        }
    }
}

/// One call's deadline and cancellation signal. The runner cancels the context when the
/// caller cancels, when its deadline passes and when shutdown's grace period ends; a long-running
/// evaluator checks [`CallContext::is_cancelled`] or waits on [`CallContext::cancelled`] and
/// stops its work (kill its processes, release its slots).
pub struct CallContext<'a> {
    pub(crate) inner: CallContextRef<'a>,
}

impl<'a> CallContext<'a> {
    pub(crate) fn new(inner: CallContextRef<'a>) -> Self {
        Self { inner }
    }

    /// A context no one cancels, without deadline or route: for work done outside any call
    /// (a command-line run, a test).
    pub fn detached() -> CallContext<'static> {
        CallContext::new(CallContextFfi_TO::from_ptr(RRef::new(&DETACHED), TD_Opaque))
    }

    /// When the caller stops waiting, if it said.
    pub fn deadline(&self) -> Option<Instant> {
        match self.inner.remaining_nanos() {
            ROption::RSome(nanos) => Some(Instant::now() + Duration::from_nanos(nanos)),
            ROption::RNone => None,
        }
    }

    /// Why the call was cancelled, once it has been.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        CancelReason::from_ffi(self.inner.cancel_reason())
    }

    /// Whether the call has been cancelled (by the caller, its deadline or shutdown).
    pub fn is_cancelled(&self) -> bool {
        self.cancel_reason().is_some()
    }

    /// Blocks the calling thread until the call is cancelled or `timeout` passes.
    pub fn wait_cancelled(&self, timeout: Duration) -> Option<CancelReason> {
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        CancelReason::from_ffi(self.inner.wait_cancelled(nanos))
    }

    /// Runs `callback` once, from a runner thread, when the call is cancelled; at once if it
    /// already is. Keep it short: wake your own task and return.
    pub fn on_cancel(&self, callback: impl FnOnce(CancelReason) + Send + 'static) {
        let callback = OnceCallback(Mutex::new(Some(Box::new(callback))));
        self.inner
            .on_cancel(CancelCallbackFfi_TO::from_value(callback, TD_Opaque));
    }

    /// Completes when the call is cancelled; for evaluators that run their own async runtime.
    pub fn cancelled(&self) -> impl Future<Output = CancelReason> + Send + 'static {
        let state = Arc::new(Mutex::new(CancelledState::default()));
        let writer = state.clone();
        self.on_cancel(move |reason| {
            let mut state = writer.lock().unwrap_or_else(PoisonError::into_inner);
            state.reason = Some(reason);
            if let Some(waker) = state.waker.take() {
                waker.wake();
            }
        });
        CancelledFuture(state)
    }

    /// How many evaluators deep this call is; delegating evaluators pass it on unchanged.
    pub fn depth(&self) -> u32 {
        self.inner.depth()
    }

    /// Why the runner chose this evaluator, when a FunctionConfig routed the call.
    pub fn route(&self) -> Option<FunctionConfigRoute> {
        FunctionConfigRoute::from_json(self.inner.route().as_str())
    }

    /// The version constraint the caller sent with an untagged image (Porch's request field
    /// 3, e.g. `~0.4.3`), already checked to parse. Run the highest version you have that
    /// satisfies it, report it with [`CallContext::report_resolved`], and decline naming the
    /// versions you have when none does.
    pub fn requested_tag(&self) -> Option<String> {
        Some(self.inner.tag().into_string()).filter(|tag| !tag.is_empty())
    }

    /// Says which image a constrained call runs (with its tag, and `@digest` when known); the
    /// runner returns it to the caller in `x-krm-resolved-image` and logs it.
    pub fn report_resolved(&self, reference: &str) {
        self.inner
            .report_resolved(abi_stable::std_types::RStr::from_str(reference));
    }

    /// The W3C trace context of the span this call runs under, when the runner traces it: hand
    /// it on (as `TRACEPARENT`/`TRACESTATE` to a process, as `traceparent`/`tracestate`
    /// metadata to a server) so that what the function does joins the caller's trace.
    pub fn trace_context(&self) -> Option<TraceContext> {
        trace_from_wire(self.inner.trace_context().as_str())
    }
}

/// A trace context as it crosses the ABI: `traceparent`, a newline, `tracestate`.
pub(crate) fn trace_from_wire(text: &str) -> Option<TraceContext> {
    let (traceparent, tracestate) = text.split_once('\n').unwrap_or((text, ""));
    TraceContext::new(traceparent, tracestate)
}

/// See [`trace_from_wire`].
pub(crate) fn trace_to_wire(context: &TraceContext) -> String {
    format!("{}\n{}", context.traceparent, context.tracestate)
}

/// What [`CallContext::detached`] stands on.
struct Detached;

static DETACHED: Detached = Detached;

impl CallContextFfi for Detached {
    fn remaining_nanos(&self) -> ROption<u64> {
        ROption::RNone
    }

    fn cancel_reason(&self) -> CancelReasonFfi {
        CancelReasonFfi::NotCancelled
    }

    fn wait_cancelled(&self, timeout_nanos: u64) -> CancelReasonFfi {
        std::thread::sleep(Duration::from_nanos(timeout_nanos));
        CancelReasonFfi::NotCancelled
    }

    fn on_cancel(&self, callback: CancelCallbackFfi_TO<'static, RBox<()>>) {
        drop(callback);
    }

    fn depth(&self) -> u32 {
        0
    }

    fn route(&self) -> RString {
        RString::new()
    }
}

type Callback = Box<dyn FnOnce(CancelReason) + Send>;

struct OnceCallback(Mutex<Option<Callback>>);

impl CancelCallbackFfi for OnceCallback {
    fn cancelled(&self, reason: CancelReasonFfi) {
        let callback = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let (Some(callback), Some(reason)) = (callback, CancelReason::from_ffi(reason)) {
            // A panic must not cross back into the runner.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| callback(reason)));
        }
    }
}

#[derive(Default)]
struct CancelledState {
    reason: Option<CancelReason>,
    waker: Option<Waker>,
}

struct CancelledFuture(Arc<Mutex<CancelledState>>);

impl Future for CancelledFuture {
    type Output = CancelReason;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CancelReason> {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match state.reason {
            Some(reason) => Poll::Ready(reason),
            None => {
                state.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl From<CancelReason> for CancelReasonFfi {
    fn from(reason: CancelReason) -> Self {
        match reason {
            CancelReason::CallerCancelled => Self::CallerCancelled,
            CancelReason::DeadlineExceeded => Self::DeadlineExceeded,
            CancelReason::ShuttingDown => Self::ShuttingDown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    /// Each kind answers with the code its documentation names, and reads back as itself (an
    /// internal error reads back as a failure: both are INTERNAL).
    #[test]
    fn grpc_codes_round_trip() {
        for (kind, code) in [
            (ErrorKind::Cancelled, 1),
            (ErrorKind::InvalidInput, 3),
            (ErrorKind::DeadlineExceeded, 4),
            (ErrorKind::NotFound, 5),
            (ErrorKind::ResourceExhausted, 8),
            (ErrorKind::Failed, 13),
            (ErrorKind::Unavailable, 14),
        ] {
            assert_eq!(kind.grpc_code(), code, "{kind:?}");
            assert_eq!(ErrorKind::from_grpc_code(code), Some(kind));
        }
        assert_eq!(ErrorKind::Internal.grpc_code(), 13);
        for code in [0, 2, 6, 7, 9, 10, 11, 12, 15, 16, 99] {
            assert_eq!(ErrorKind::from_grpc_code(code), None, "{code}");
        }
    }
}
