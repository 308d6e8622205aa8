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

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
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
use krm_plugin_api::{CancelReason, ErrorKind};
use krm_plugin_loader::HostCallContext;
use krm_runner_proto::krmrunner::v1 as pb;
use krm_runner_proto::krmrunner::v1::function_executor_server::{
    FunctionExecutor, FunctionExecutorServer,
};
use krm_runner_proto::serving::{self, IN_FLIGHT_MESSAGES, RECEIVE_LIMIT, answer_by};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tonic::Status;

use crate::allocator::{LARGE_CALL_BYTES, release_free_memory};
use crate::runtime::{CancelOnDrop, Runtime, track_call};
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
        Arc::new(Self {
            kubernetes,
            properties,
            workers,
            working: Arc::new(Semaphore::new(IN_FLIGHT_MESSAGES)),
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
}

/// Why the call ended before the sequence did, when it did.
fn cancelled_reason(refusal: &Refusal) -> Option<CancelReason> {
    match refusal {
        Refusal::Typed(error) => error.cancel_reason(),
        _ => None,
    }
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
    if body.len() > limit {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the response is {} bytes, over max_message_bytes {limit}",
                body.len()
            ),
        );
    }
    json(StatusCode::OK, body)
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
    match state.typed.invoke(permit, toolchain, request, call).await {
        Ok(response) => match go_json_body(&response) {
            Ok(body) => bounded_json(body, limit),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
        },
        Err(refusal) if cancelled_reason(&refusal).is_some() => {
            let status = match cancelled_reason(&refusal) {
                Some(CancelReason::DeadlineExceeded) => StatusCode::GATEWAY_TIMEOUT,
                Some(CancelReason::ShuttingDown) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::REQUEST_TIMEOUT,
            };
            error(status, refusal)
        }
        Err(refusal) => {
            let status = match refusal.kind() {
                ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
                ErrorKind::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            error(status, refusal)
        }
    }
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
fn bounded(size: usize, limit: usize, what: &str) -> Result<(), Status> {
    if size > limit {
        return Err(Status::resource_exhausted(format!(
            "{what} is {size} bytes, over max_message_bytes {limit}"
        )));
    }
    Ok(())
}

#[tonic::async_trait]
impl FunctionExecutor for GrpcExecutor {
    async fn invoke(
        &self,
        request: tonic::Request<pb::InvokeRequest>,
    ) -> Result<tonic::Response<pb::InvokeResponse>, Status> {
        let call = HostCallContext::new(answer_by(&request));
        // A caller that goes away cancels the sequence.
        let _cancel_if_dropped = CancelOnDrop::new(call.clone());
        let toolchain = toolchain_of(&request.get_ref().toolchain)?;
        let request = from_proto(request.into_inner())?;
        let permit = self
            .typed
            .permit()
            .await
            .map_err(|refusal| Status::resource_exhausted(refusal.to_string()))?;
        let response = self
            .typed
            .invoke(permit, toolchain, request, call)
            .await
            .map_err(|refusal| {
                Status::new(
                    tonic::Code::from_i32(refusal.kind().grpc_code()),
                    refusal.to_string(),
                )
            })?;
        let response = to_proto(response)?;
        let size = response.config_data.len()
            + response.output_json.len()
            + response.mutations_json.len()
            + response
                .error_messages
                .iter()
                .map(String::len)
                .sum::<usize>();
        bounded(size, self.max_message_bytes, "the response")?;
        Ok(tonic::Response::new(response))
    }

    async fn list_typed_functions(
        &self,
        request: tonic::Request<pb::ListTypedFunctionsRequest>,
    ) -> Result<tonic::Response<pb::JsonDocument>, Status> {
        let toolchain = toolchain_of(&request.get_ref().toolchain)?;
        let json = serde_json::to_string(&self.typed.executor(toolchain).list())
            .map_err(|e| Status::internal(e.to_string()))?;
        bounded(json.len(), self.max_message_bytes, "the function list")?;
        Ok(tonic::Response::new(pb::JsonDocument { json }))
    }

    async fn list_paths(
        &self,
        request: tonic::Request<pb::ListPathsRequest>,
    ) -> Result<tonic::Response<pb::JsonDocument>, Status> {
        let toolchain = toolchain_of(&request.get_ref().toolchain)?;
        let json = serde_json::to_string(self.typed.executor(toolchain).registry())
            .map_err(|e| Status::internal(e.to_string()))?;
        bounded(json.len(), self.max_message_bytes, "the path registry")?;
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

fn to_proto(response: FunctionInvocationResponse) -> Result<pb::InvokeResponse, Status> {
    let output_json = String::from_utf8(response.output)
        .map_err(|e| Status::internal(format!("output is not UTF-8: {e}")))?;
    let output_type = response
        .output_type
        .map(|output_type| serde_json::to_value(output_type).ok())
        .and_then(|value| value.and_then(|v| v.as_str().map(str::to_owned)))
        .unwrap_or_default();
    let mutations_json =
        serde_json::to_string(&response.mutations).map_err(|e| Status::internal(e.to_string()))?;
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
