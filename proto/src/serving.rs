//! Server-side conventions shared by every krm-runner gRPC server (the runner and the pods'
//! wrapper server), so that both answer as Porch's servers do.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio_stream::Stream;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tower::{Layer, Service};

/// Porch's health checker: SERVING for any service name; Watch sends one message and ends.
pub fn health_service() -> HealthServer<AlwaysServing> {
    HealthServer::new(AlwaysServing)
}

pub struct AlwaysServing;

type HealthStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Health for AlwaysServing {
    async fn check(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        Ok(Response::new(serving()))
    }

    type WatchStream = HealthStream;

    async fn watch(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthStream>, Status> {
        Ok(Response::new(Box::pin(tokio_stream::once(Ok(serving())))))
    }
}

fn serving() -> HealthCheckResponse {
    HealthCheckResponse {
        status: ServingStatus::Serving as i32,
    }
}

/// How much earlier than the caller's deadline a server answers DEADLINE_EXCEEDED. tonic's
/// server enforces `grpc-timeout` too, answering CANCELLED "Timeout expired", from a timer
/// started in the same poll as ours; answering first keeps Porch's code.
const DEADLINE_MARGIN: Duration = Duration::from_millis(20);

/// When the server gives up on a call, stamped on the request by [`ServingLayer`].
#[derive(Debug, Clone, Copy)]
struct AnswerBy(Instant);

/// When to give up on a call: a little before the caller's `grpc-timeout`, counted from the
/// request's arrival, if the caller sent one. Handlers cancel their work by then; the layer
/// answers DEADLINE_EXCEEDED at that instant even if a starved handler has not.
pub fn answer_by<T>(request: &Request<T>) -> Option<Instant> {
    request
        .extensions()
        .get::<AnswerBy>()
        .map(|answer_by| answer_by.0)
}

/// The caller's `grpc-timeout` header (`<digits><unit>`, unit one of H M S m u n).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// Every krm-runner server's tower layer. It enforces the caller's deadline (see
/// [`answer_by`]) and, since Porch's clients expect RESOURCE_EXHAUSTED for a request over the
/// message limit (grpc-go's code) where tonic answers OUT_OF_RANGE, rewrites exactly that answer.
#[derive(Debug, Clone, Copy)]
pub struct ServingLayer {
    limit: usize,
}

impl ServingLayer {
    pub fn new(max_message_bytes: usize) -> Self {
        Self {
            limit: max_message_bytes,
        }
    }
}

impl<S> Layer<S> for ServingLayer {
    type Service = Serving<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Serving {
            inner,
            limit: self.limit,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Serving<S> {
    inner: S,
    limit: usize,
}

impl<S, ReqBody> Service<http::Request<ReqBody>> for Serving<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqBody>) -> Self::Future {
        let answer_by = grpc_timeout(request.headers())
            .map(|timeout| Instant::now() + timeout.saturating_sub(DEADLINE_MARGIN));
        if let Some(answer_by) = answer_by {
            request.extensions_mut().insert(AnswerBy(answer_by));
        }
        let limit = self.limit;
        let response = self.inner.call(request);
        Box::pin(async move {
            // tonic's timeout polls this future before its own timer, and ours expires first,
            // so a handler late past the deadline is answered here (dropping it cancels its call).
            let mut response = match answer_by {
                Some(answer_by) => {
                    match tokio::time::timeout_at(answer_by.into(), response).await {
                        Ok(response) => response?,
                        Err(_) => {
                            return Ok(Status::deadline_exceeded(
                                "the caller's deadline (grpc-timeout) passed",
                            )
                            .into_http());
                        }
                    }
                }
                None => response.await?,
            };
            rewrite_too_large(response.headers_mut(), limit);
            Ok(response)
        })
    }
}

fn rewrite_too_large(headers: &mut http::HeaderMap, limit: usize) {
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    if status.code() != Code::OutOfRange
        || !status
            .message()
            .contains("decoded message length too large")
    {
        return;
    }
    let size = status
        .message()
        .split("found ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or("?");
    let exhausted = Status::resource_exhausted(format!(
        "request message of {size} bytes exceeds max_message_bytes {limit} (--max-request-body-size)"
    ));
    let _ = exhausted.add_header(headers);
}
