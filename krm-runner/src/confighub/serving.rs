//! ConfigHub's typed functions served: over HTTP/JSON on functionsrv's routes and bodies (so
//! ConfigHub's own client can call the runner) and over gRPC as `krmrunner.v1.FunctionExecutor`.
//! Both go through [`TypedFunctions::invoke`], over one executor.
//!
//! HTTP routes (ConfigHub's, under `/function`): `GET ok` and `GET info` answer `"OK"`; per
//! toolchain (`kubernetes` for Kubernetes/YAML, `properties` for AppConfig/Properties),
//! `POST <toolchain>` invokes (body FunctionInvocationRequest, reply
//! FunctionInvocationResponse; 400 when the request cannot run at all), `GET <toolchain>`
//! lists the signatures and `GET <toolchain>/paths` the path registry. `POST shutdown` is
//! refused: the runner stops on SIGTERM, not at any HTTP client's request.
//!
//! A request whose invocations all name functions whose signatures say Hermetic and Idempotent
//! is answered through the result cache ([`crate::cache`]), keyed by the service answering it,
//! the runner's version, what its functions are ([`code_identity`]), the toolchain and the
//! request's bytes; the answer says what the cache did (`x-krm-cache`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use krm_function_executor::api::{
    FunctionArgument, FunctionContext, FunctionInvocation, FunctionInvocationRequest,
    FunctionInvocationResponse,
};
use krm_function_executor::{Executor, ExecutorError, Toolchain};
use krm_plugin_api::{CancelReason, ErrorKind, EvalError, EvalResponse};
use krm_plugin_loader::HostCallContext;
use krm_runner_function_config::private_folder::hex;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_server::{
    FunctionExecutor, FunctionExecutorServer,
};
use krm_runner_proto::serving::{self, IN_FLIGHT_MESSAGES, RECEIVE_LIMIT, answer_by};
use prost::Message;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tonic::Status;
use tonic::metadata::MetadataValue;

use crate::allocator::{LARGE_CALL_BYTES, release_free_memory};
use crate::cache::{self, CACHE_HEADER, Cacheable, Identity, ResultCache};
use crate::runtime::{CancelOnDrop, Runtime, track_call};
use crate::server::to_status;
use crate::worker::typed::{TypedError, TypedWorkers};

/// How long a client may take to send a request's headers.
const HEADER_READ_LIMIT: Duration = Duration::from_secs(5);

/// The executor of each toolchain, the workers that run their sequences (when configured) and
/// the bound on the requests they work on at once.
pub struct TypedFunctions {
    kubernetes: Executor,
    properties: Executor,
    /// Where sequences run; without, in the runner's own process.
    workers: Option<TypedWorkers>,
    /// Requests being received or run; each may hold up to `max_message_bytes` of body.
    working: Arc<Semaphore>,
    /// The result cache, when the runner serves with one.
    cached: Option<Cached>,
}

/// The result cache, and what identifies each toolchain's functions in its keys.
struct Cached {
    cache: Arc<ResultCache>,
    /// [`code_identity`] of each toolchain's executor.
    kubernetes: String,
    properties: String,
}

/// The service a request came in by: its answers are encoded for it, so it is part of the key.
#[derive(Debug, Clone, Copy)]
enum Service {
    Http,
    Grpc,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Self::Http => "confighub-http",
            Self::Grpc => "confighub-grpc",
        }
    }
}

/// What decides a sequence's answer besides its request, hashed: every enabled instance's
/// plugin and version (the code of the functions they contribute), the executor's functions
/// and path registry as it lists them (so the attributes the configuration declares count too)
/// and the largest unit it may produce (`max_message_bytes`: below it an invocation fails).
fn code_identity(executor: &Executor, runtime: &Runtime) -> String {
    let mut hash = Sha256::new();
    let mut part = |bytes: &[u8]| {
        // Each part's length first, so that no two identities hash the same bytes.
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    for report in runtime.instances().iter().filter(|report| !report.disabled) {
        for text in [&report.name, &report.plugin_name, &report.plugin_version] {
            part(text.as_bytes());
        }
    }
    // Plain data with string keys: serializing cannot fail.
    part(&serde_json::to_vec(&executor.list()).unwrap_or_default());
    part(&serde_json::to_vec(executor.registry()).unwrap_or_default());
    part(&(executor.max_message_bytes() as u64).to_le_bytes());
    hex(&hash.finalize())
}

/// The name the cache's metrics give a toolchain's requests: no image is named so (an image's
/// repository has no capital letters).
fn cache_label(toolchain: Toolchain) -> String {
    format!("ConfigHub/{}", toolchain.route())
}

/// Why a request did not run.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{IN_FLIGHT_MESSAGES} requests were already being worked on for {} s; try again",
        RECEIVE_LIMIT.as_secs()
    )]
    Busy,
    #[error(transparent)]
    Typed(#[from] TypedError),
    #[error("the executor's task failed: {0}")]
    Internal(#[source] tokio::task::JoinError),
}

impl From<ExecutorError> for Refusal {
    fn from(error: ExecutorError) -> Self {
        Self::Typed(TypedError::Executor(error))
    }
}

impl Refusal {
    /// The kind of error the refusal is, which decides the caller's status.
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Busy => ErrorKind::ResourceExhausted,
            Self::Typed(error) => error.kind(),
            Self::Internal(_) => ErrorKind::Internal,
        }
    }
}

impl TypedFunctions {
    /// Kubernetes/YAML: `kubernetes`' functions (the builtin ones and those the configuration
    /// declares) and those the evaluator plugins contribute, clashes and problems logged, one
    /// warning each; AppConfig/Properties: its builtin functions.
    pub fn new(
        mut kubernetes: Executor,
        properties: Executor,
        runtime: &Runtime,
        workers: Option<TypedWorkers>,
    ) -> Arc<Self> {
        for report in super::add_contributed(&mut kubernetes, runtime) {
            tracing::warn!("{report}");
        }
        let cached = runtime.cache().map(|cache| Cached {
            cache: cache.clone(),
            kubernetes: code_identity(&kubernetes, runtime),
            properties: code_identity(&properties, runtime),
        });
        Arc::new(Self {
            kubernetes,
            properties,
            workers,
            working: Arc::new(Semaphore::new(IN_FLIGHT_MESSAGES)),
            cached,
        })
    }

    /// The executor of `toolchain`.
    pub fn executor(&self, toolchain: Toolchain) -> &Executor {
        match toolchain {
            Toolchain::KubernetesYaml => &self.kubernetes,
            Toolchain::AppConfigProperties => &self.properties,
        }
    }

    /// A place among the requests worked on, waiting for one up to [`RECEIVE_LIMIT`].
    async fn permit(&self) -> Result<OwnedSemaphorePermit, Refusal> {
        tokio::time::timeout(RECEIVE_LIMIT, self.working.clone().acquire_owned())
            .await
            .map_err(|_| Refusal::Busy)?
            .map_err(|_| Refusal::Busy)
    }

    /// Runs `request` with the executor of `toolchain` in a worker, or on a blocking thread of
    /// this process without workers, holding `permit`, within `call`: its deadline cancels it,
    /// which kills the worker (in this process, the sequence stops at its next invocation).
    async fn invoke(
        self: &Arc<Self>,
        permit: OwnedSemaphorePermit,
        toolchain: Toolchain,
        request: FunctionInvocationRequest,
        call: Arc<HostCallContext>,
    ) -> Result<FunctionInvocationResponse, Refusal> {
        let typed = self.clone();
        let running = call.clone();
        // Shutdown lets the sequence finish within its grace period, as it does a function call.
        let tracked = track_call(&call);
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _tracked = tracked;
            let large = request.config_data.len() >= LARGE_CALL_BYTES;
            let outcome = match &typed.workers {
                Some(workers) => workers.invoke(toolchain, request, &running),
                None => typed
                    .executor(toolchain)
                    .invoke_within(&request, &running.as_call_context())
                    .map_err(TypedError::from),
            };
            if large {
                release_free_memory();
            }
            outcome
        });
        let expiry = async {
            match call.deadline() {
                Some(deadline) => {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
                    call.cancel(CancelReason::DeadlineExceeded);
                }
                None => std::future::pending().await,
            }
        };
        tokio::pin!(task);
        let outcome = tokio::select! {
            joined = &mut task => joined,
            () = expiry => task.await,
        };
        Ok(outcome.map_err(Refusal::Internal)??)
    }

    /// Answers `request` (the bytes `received` by `service`), running it as
    /// [`TypedFunctions::invoke`] does: through the result cache when every invocation names a
    /// function whose signature says Hermetic and Idempotent. `reply` encodes an answer as the
    /// caller gets it; those bytes are what the cache keeps. A sequence that did not succeed is
    /// answered, never kept.
    async fn answer<F>(
        self: &Arc<Self>,
        permit: OwnedSemaphorePermit,
        toolchain: Toolchain,
        request: FunctionInvocationRequest,
        (service, received): (Service, &[u8]),
        call: Arc<HostCallContext>,
        reply: F,
    ) -> (Result<Vec<u8>, EvalError>, cache::Outcome)
    where
        F: Fn(FunctionInvocationResponse) -> Result<Vec<u8>, EvalError>,
    {
        let cacheable = self.cacheable(toolchain, &request, service, received);
        // A call runs its sequence at most once; the cache asks for a run through a closure.
        let permit = Mutex::new(Some(permit));
        let (permit, request, reply) = (&permit, &request, &reply);
        let run = || {
            let permit = permit.lock().unwrap_or_else(PoisonError::into_inner).take();
            self.clone()
                .run_sequence(permit, toolchain, request.clone(), call.clone(), reply)
        };
        let label = cache_label(toolchain);
        let (answered, outcome) = match cacheable {
            // The executors' code is the runner's own: it is the same after the run.
            Some((cache, cacheable, code)) => {
                cache
                    .answer(&call, &label, cacheable, run, || Some(code.to_owned()))
                    .await
            }
            None => {
                if self.cached.is_some() {
                    ResultCache::bypassed(&label);
                }
                (run().await, cache::Outcome::Bypass)
            }
        };
        // A sequence that ran and failed is answered as ConfigHub's server answers it.
        let answered = match answered {
            Ok(response) => Ok(response.resource_list),
            Err(error) if error.kind == ErrorKind::Failed && !error.resource_list.is_empty() => {
                Ok(error.resource_list)
            }
            Err(error) => Err(error),
        };
        (answered, outcome)
    }

    /// The result cache, how it keeps `request`'s answer and the code it keys it by; `None`
    /// when it may not: the cache is off, or an invocation names a function that is not both
    /// hermetic and idempotent (or none at all).
    fn cacheable(
        &self,
        toolchain: Toolchain,
        request: &FunctionInvocationRequest,
        service: Service,
        received: &[u8],
    ) -> Option<(&Arc<ResultCache>, Cacheable, &str)> {
        let cached = self.cached.as_ref()?;
        let executor = self.executor(toolchain);
        let pure = request.function_invocations.iter().all(|invocation| {
            executor
                .function(&invocation.function_name)
                .is_some_and(|function| {
                    let typed = &function.signature().typed;
                    typed.hermetic && typed.idempotent
                })
        });
        if !pure {
            return None;
        }
        let code = match toolchain {
            Toolchain::KubernetesYaml => &cached.kubernetes,
            Toolchain::AppConfigProperties => &cached.properties,
        };
        let identity = Identity {
            instance: service.name(),
            plugin: "krm-runner",
            plugin_version: env!("CARGO_PKG_VERSION"),
            code,
            route: "",
            image: &cache_label(toolchain),
            tag: "",
            request: received,
        };
        match cached.cache.decide(&identity, true, true, None) {
            cache::Decision::Cache(cacheable) => Some((&cached.cache, cacheable, code)),
            cache::Decision::Bypass => None,
        }
    }

    /// One run of a sequence, in the result cache's terms: a success is the reply's bytes; a
    /// sequence that failed is an error of kind `Failed` carrying its reply, so that it is
    /// never kept; a request that could not run is an error of the refusal's kind.
    async fn run_sequence<F>(
        self: Arc<Self>,
        permit: Option<OwnedSemaphorePermit>,
        toolchain: Toolchain,
        request: FunctionInvocationRequest,
        call: Arc<HostCallContext>,
        reply: &F,
    ) -> Result<EvalResponse, EvalError>
    where
        F: Fn(FunctionInvocationResponse) -> Result<Vec<u8>, EvalError>,
    {
        let refused = |refusal: Refusal| EvalError::new(refusal.kind(), refusal.to_string());
        let permit = match permit {
            Some(permit) => permit,
            None => self.permit().await.map_err(refused)?,
        };
        let response = self
            .invoke(permit, toolchain, request, call)
            .await
            .map_err(refused)?;
        let success = response.success;
        let encoded = reply(response)?;
        if success {
            return Ok(EvalResponse::new(encoded, Vec::new()));
        }
        Err(EvalError {
            resource_list: encoded,
            ..EvalError::new(ErrorKind::Failed, "the sequence failed")
        })
    }
}

/// The line logged for each FunctionExecutor request that ran (or was answered again).
fn log_call(
    service: Service,
    toolchain: Toolchain,
    invocations: usize,
    cached: cache::Outcome,
    started: Instant,
    outcome: &str,
) {
    tracing::info!(
        service = service.name(),
        toolchain = toolchain.name(),
        invocations,
        cache = cached.as_str(),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        outcome,
        "typed functions call"
    );
}

/// Refuses an answer of `size` bytes over the message limit, naming it, as an error of `kind`.
fn within_limit(size: usize, limit: usize, what: &str, kind: ErrorKind) -> Result<(), EvalError> {
    if size > limit {
        return Err(EvalError::new(
            kind,
            format!("{what} is {size} bytes, over max_message_bytes {limit}"),
        ));
    }
    Ok(())
}

/// The header in which an HTTP client gives its deadline, in seconds from the request.
pub const TIMEOUT_HEADER: &str = "x-krm-timeout";

/// The instant `seconds` (decimals allowed) from now; `None` when that is no duration.
pub fn deadline_after(seconds: f64) -> Option<Instant> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|timeout| Instant::now().checked_add(timeout))
}

// ---- HTTP ----

/// Serves ConfigHub's routes on `listener` until `stopping` turns true; connections then
/// finish the request they are on, within shutdown's grace period.
pub async fn serve_http(
    listener: TcpListener,
    typed: Arc<TypedFunctions>,
    max_message_bytes: usize,
    mut stopping: watch::Receiver<bool>,
) {
    let router = router(typed, max_message_bytes);
    let mut incoming = serving::incoming(listener);
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = incoming.next() => match accepted {
                Some(Ok(stream)) => {
                    connections.spawn(serve_connection(stream, router.clone(), closing_rx.clone()));
                }
                Some(Err(error)) => tracing::debug!(%error, "HTTP: accepting a connection failed"),
                None => break,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = turned_true(&mut stopping) => break,
        }
    }
    let _ = closing_tx.send(true);
    // Done when every answer is written: a sequence's call stops counting as running when it
    // ends, before its response is on the wire, and the runner exits once none is running.
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(stream: TcpStream, router: Router, mut closing: watch::Receiver<bool>) {
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_LIMIT)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(error) = served {
                tracing::debug!(%error, "HTTP connection ended");
            }
        }
        () = turned_true(&mut closing) => {
            // The request in progress is answered (shutdown's grace period bounds it, and the
            // runner's exit ends whatever is left); idle connections close at once.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Until `flag` is true (or its sender is gone).
async fn turned_true(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|flag| *flag).await.map(|_| ());
}

#[derive(Clone)]
struct HttpState {
    typed: Arc<TypedFunctions>,
    max_message_bytes: usize,
}

fn router(typed: Arc<TypedFunctions>, max_message_bytes: usize) -> Router {
    let mut router = Router::new()
        .route("/function/ok", get(ok))
        .route("/function/info", get(ok))
        .route("/function/shutdown", post(shutdown));
    for toolchain in Toolchain::ALL {
        let route = format!("/function/{}", toolchain.route());
        router = router
            .route(
                &route,
                get(move |state| list(state, toolchain))
                    .post(move |state, headers, body| invoke_http(state, toolchain, headers, body)),
            )
            .route(
                &format!("{route}/paths"),
                get(move |state| paths(state, toolchain)),
            );
    }
    router.fallback(not_found).with_state(HttpState {
        typed,
        max_message_bytes,
    })
}

/// A JSON answer of at most `limit` bytes; a larger one is refused, naming the limit.
fn bounded_json(body: Vec<u8>, limit: usize) -> Response {
    match within_limit(body.len(), limit, "the response", ErrorKind::Internal) {
        Ok(()) => json(StatusCode::OK, body),
        Err(refused) => error(StatusCode::INTERNAL_SERVER_ERROR, refused.message),
    }
}

/// The HTTP status of an error of `kind`.
fn http_status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Cancelled => StatusCode::REQUEST_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn json(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// An error as Echo (ConfigHub's server framework) writes one: `{"message": "..."}`.
fn error(status: StatusCode, message: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({ "message": message.to_string() });
    json(status, body.to_string().into_bytes())
}

async fn ok() -> Response {
    json(StatusCode::OK, b"\"OK\"".to_vec())
}

async fn shutdown() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "krm-runner does not stop at an HTTP request; send it SIGTERM",
    )
}

async fn not_found() -> Response {
    let toolchains: Vec<String> = Toolchain::ALL
        .iter()
        .map(|toolchain| {
            format!(
                "GET and POST /function/{route}, GET /function/{route}/paths ({toolchain})",
                route = toolchain.route()
            )
        })
        .collect();
    error(
        StatusCode::NOT_FOUND,
        format!(
            "no such route; served: GET /function/ok, GET /function/info, {}",
            toolchains.join(", ")
        ),
    )
}

/// A body as ConfigHub's echo server writes one: Go's JSON (HTML characters escaped), then a
/// newline.
fn go_json_body<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut body = krm_function_executor::go_json::to_vec(value)?;
    body.push(b'\n');
    Ok(body)
}

async fn list(State(state): State<HttpState>, toolchain: Toolchain) -> Response {
    match go_json_body(&state.typed.executor(toolchain).list()) {
        Ok(body) => bounded_json(body, state.max_message_bytes),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn paths(State(state): State<HttpState>, toolchain: Toolchain) -> Response {
    match go_json_body(state.typed.executor(toolchain).registry()) {
        Ok(body) => bounded_json(body, state.max_message_bytes),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn invoke_http(
    State(state): State<HttpState>,
    toolchain: Toolchain,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let deadline = match headers.get(TIMEOUT_HEADER) {
        None => None,
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<f64>().ok())
            .and_then(deadline_after)
        {
            Some(deadline) => Some(deadline),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("header {TIMEOUT_HEADER}: not a number of seconds"),
                );
            }
        },
    };
    let call = HostCallContext::new(deadline);
    // A client that goes away cancels the sequence.
    let _cancel_if_dropped = CancelOnDrop::new(call.clone());
    let permit = match state.typed.permit().await {
        Ok(permit) => permit,
        Err(refusal) => return error(StatusCode::SERVICE_UNAVAILABLE, refusal),
    };
    let limit = state.max_message_bytes;
    let received = tokio::time::timeout(RECEIVE_LIMIT, Limited::new(body, limit).collect()).await;
    let bytes = match received {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body over max_message_bytes {limit}"),
            );
        }
        Ok(Err(e)) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            );
        }
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request did not arrive whole within {} s",
                    RECEIVE_LIMIT.as_secs()
                ),
            );
        }
    };
    let mut request: FunctionInvocationRequest = match serde_json::from_slice(&bytes) {
        Ok(request) => request,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("request body is not a FunctionInvocationRequest: {e}"),
            );
        }
    };
    // The route names the toolchain; a body that names another one is refused by the executor.
    if request.context.toolchain_type.is_empty() {
        request.context.toolchain_type = toolchain.name().to_owned();
    }
    let invocations = request.function_invocations.len();
    let received = (Service::Http, bytes.as_ref());
    let encode = |response: FunctionInvocationResponse| {
        let body = go_json_body(&response)
            .map_err(|e| EvalError::new(ErrorKind::Internal, e.to_string()))?;
        within_limit(body.len(), limit, "the response", ErrorKind::Internal)?;
        Ok(body)
    };
    let (answered, cached) = state
        .typed
        .answer(permit, toolchain, request, received, call, encode)
        .await;
    let mut response = match answered {
        Ok(body) => json(StatusCode::OK, body),
        Err(refused) => error(http_status(refused.kind), refused.message),
    };
    log_call(
        Service::Http,
        toolchain,
        invocations,
        cached,
        started,
        response.status().as_str(),
    );
    response
        .headers_mut()
        .insert(CACHE_HEADER, HeaderValue::from_static(cached.as_str()));
    response
}

// ---- gRPC ----

/// `krmrunner.v1.FunctionExecutor`, for the runner's gRPC server.
pub fn grpc_service(
    typed: Arc<TypedFunctions>,
    max_message_bytes: usize,
) -> FunctionExecutorServer<GrpcExecutor> {
    FunctionExecutorServer::new(GrpcExecutor {
        typed,
        max_message_bytes,
    })
    .max_decoding_message_size(max_message_bytes)
    .max_encoding_message_size(max_message_bytes)
}

pub struct GrpcExecutor {
    typed: Arc<TypedFunctions>,
    max_message_bytes: usize,
}

/// Refuses an answer of `size` bytes over the message limit, naming it (tonic's own refusal
/// would be OUT_OF_RANGE without saying which setting).
fn bounded(size: usize, limit: usize, what: &str) -> Result<(), EvalError> {
    within_limit(size, limit, what, ErrorKind::ResourceExhausted)
}

#[tonic::async_trait]
impl FunctionExecutor for GrpcExecutor {
    async fn invoke(
        &self,
        request: tonic::Request<pb::InvokeRequest>,
    ) -> Result<tonic::Response<pb::InvokeResponse>, Status> {
        let started = Instant::now();
        let call = HostCallContext::new(answer_by(&request));
        // A caller that goes away cancels the sequence.
        let _cancel_if_dropped = CancelOnDrop::new(call.clone());
        let toolchain = toolchain_of(&request.get_ref().toolchain)?;
        // The request's bytes, for the cache's key: tonic hands over the decoded message, and
        // its encoding carries every field the request does.
        let received = match self.typed.cached {
            Some(_) => request.get_ref().encode_to_vec(),
            None => Vec::new(),
        };
        let request = from_proto(request.into_inner())?;
        let invocations = request.function_invocations.len();
        let permit = self
            .typed
            .permit()
            .await
            .map_err(|refusal| Status::resource_exhausted(refusal.to_string()))?;
        let limit = self.max_message_bytes;
        let encode = |response: FunctionInvocationResponse| {
            let response = to_proto(response)?;
            let size = response.config_data.len()
                + response.output_json.len()
                + response.mutations_json.len()
                + response
                    .error_messages
                    .iter()
                    .map(String::len)
                    .sum::<usize>();
            bounded(size, limit, "the response")?;
            Ok(response.encode_to_vec())
        };
        let (answered, cached) = self
            .typed
            .answer(
                permit,
                toolchain,
                request,
                (Service::Grpc, &received),
                call,
                encode,
            )
            .await;
        let answered = answered
            .map_err(|error| to_status(&error))
            .and_then(|bytes| {
                pb::InvokeResponse::decode(bytes.as_slice())
                    .map_err(|e| Status::internal(format!("a kept answer does not decode: {e}")))
            });
        let outcome = match &answered {
            Ok(_) => format!("{:?}", tonic::Code::Ok),
            Err(status) => format!("{:?}", status.code()),
        };
        log_call(
            Service::Grpc,
            toolchain,
            invocations,
            cached,
            started,
            &outcome,
        );
        let mut reply = tonic::Response::new(answered?);
        reply
            .metadata_mut()
            .insert(CACHE_HEADER, MetadataValue::from_static(cached.as_str()));
        Ok(reply)
    }

    async fn list_typed_functions(
        &self,
        request: tonic::Request<pb::ListTypedFunctionsRequest>,
    ) -> Result<tonic::Response<pb::JsonDocument>, Status> {
        let toolchain = toolchain_of(&request.get_ref().toolchain)?;
        let json = serde_json::to_string(&self.typed.executor(toolchain).list())
            .map_err(|e| Status::internal(e.to_string()))?;
        bounded(json.len(), self.max_message_bytes, "the function list")
            .map_err(|error| to_status(&error))?;
        Ok(tonic::Response::new(pb::JsonDocument { json }))
    }

    async fn list_paths(
        &self,
        request: tonic::Request<pb::ListPathsRequest>,
    ) -> Result<tonic::Response<pb::JsonDocument>, Status> {
        let toolchain = toolchain_of(&request.get_ref().toolchain)?;
        let json = serde_json::to_string(self.typed.executor(toolchain).registry())
            .map_err(|e| Status::internal(e.to_string()))?;
        bounded(json.len(), self.max_message_bytes, "the path registry")
            .map_err(|error| to_status(&error))?;
        Ok(tonic::Response::new(pb::JsonDocument { json }))
    }
}

/// The toolchain a gRPC request names (empty: Kubernetes/YAML).
fn toolchain_of(name: &str) -> Result<Toolchain, Status> {
    Toolchain::from_name(name).map_err(|unknown| Status::invalid_argument(unknown.to_string()))
}

fn from_proto(request: pb::InvokeRequest) -> Result<FunctionInvocationRequest, Status> {
    let mut context: FunctionContext = if request.context_json.is_empty() {
        FunctionContext::default()
    } else {
        serde_json::from_str(&request.context_json).map_err(|e| {
            Status::invalid_argument(format!(
                "context_json is not a ConfigHub FunctionContext: {e}"
            ))
        })?
    };
    context.toolchain_type = request.toolchain;
    let mut invocations = Vec::with_capacity(request.invocations.len());
    for (index, invocation) in request.invocations.into_iter().enumerate() {
        let mut arguments = Vec::with_capacity(invocation.arguments.len());
        for (position, argument) in invocation.arguments.into_iter().enumerate() {
            let value = match argument.value {
                Some(pb::argument::Value::StringValue(text)) => Value::from(text),
                Some(pb::argument::Value::IntValue(number)) => Value::from(number),
                Some(pb::argument::Value::BoolValue(flag)) => Value::from(flag),
                None => {
                    return Err(Status::invalid_argument(format!(
                        "invocations[{index}].arguments[{position}] has no value"
                    )));
                }
            };
            arguments.push(FunctionArgument {
                parameter_name: argument.parameter_name,
                value,
            });
        }
        invocations.push(FunctionInvocation::new(invocation.function_name, arguments));
    }
    Ok(FunctionInvocationRequest {
        context,
        config_data: request.config_data,
        live_state: request.live_state,
        cast_string_args_to_scalars: request.cast_string_args_to_scalars,
        num_filters: request.num_filters as usize,
        stop_on_error: request.stop_on_error,
        combine_validation_results: request.combine_validation_results,
        function_invocations: invocations,
    })
}

fn to_proto(response: FunctionInvocationResponse) -> Result<pb::InvokeResponse, EvalError> {
    let internal = |message: String| EvalError::new(ErrorKind::Internal, message);
    let output_json = String::from_utf8(response.output)
        .map_err(|e| internal(format!("output is not UTF-8: {e}")))?;
    let output_type = response
        .output_type
        .map(|output_type| serde_json::to_value(output_type).ok())
        .and_then(|value| value.and_then(|v| v.as_str().map(str::to_owned)))
        .unwrap_or_default();
    let mutations_json =
        serde_json::to_string(&response.mutations).map_err(|e| internal(e.to_string()))?;
    Ok(pb::InvokeResponse {
        config_data: response.config_data,
        output_type,
        output_json,
        success: response.success,
        error_messages: response.error_messages,
        mutations_json,
        mutators: response
            .mutators
            .into_iter()
            .map(|index| index as u32)
            .collect(),
    })
}
