//! Server-side conventions shared by every krm-runner gRPC server (the runner and the pods'
//! wrapper server), so that both answer as Porch's servers do and hold up against hostile
//! clients: bounded streams per connection, bounded request bytes being received, bounded time
//! to send a request, bounded status messages, no busy loop when file descriptors run out, and
//! INVALID_ARGUMENT for a request that does not decode.

use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http_body::{Frame, SizeHint};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tokio_stream::Stream;
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_prost::{ProstDecoder, ProstEncoder};
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

/// Every krm-runner server's codec (the generated servers name it): tonic-prost's, except that
/// a request that does not decode (a string field that is not UTF-8, a truncated field) is
/// answered INVALID_ARGUMENT with prost's description of the problem, which names the message
/// and field, where tonic-prost answers INTERNAL: the request is at fault, not the server.
#[derive(Debug, Clone)]
pub struct RequestCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for RequestCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for RequestCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(ProstDecoder::default())
    }
}

/// See [`RequestCodec`].
#[derive(Debug, Clone)]
pub struct RequestDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0
            .decode(buf)
            .map_err(|status| Status::invalid_argument(status.message().to_owned()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
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

/// Concurrent calls (HTTP/2 streams) one connection may carry; clients queue the rest.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 100;
/// Largest request header block accepted.
const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;
/// Requests being received at once may hold this many times `max_message_bytes` in total;
/// a request that would go over is answered RESOURCE_EXHAUSTED.
pub const IN_FLIGHT_MESSAGES: usize = 16;
/// A request must arrive whole within this long of its headers (or by the caller's deadline,
/// if sooner): a stalled upload is answered DEADLINE_EXCEEDED and its memory freed.
pub const RECEIVE_LIMIT: Duration = Duration::from_secs(15);
/// Longest status message sent: clients cannot read unbounded headers (a function's log can be
/// long, and a caller's strings are the caller's).
pub const MAX_STATUS_MESSAGE_BYTES: usize = 8 << 10;
/// Pause in accepting connections after the process or the system ran out of file descriptors
/// (or socket memory): accepting again at once would only fail again, at full speed.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// After shutdown's calls have ended (finished, or cancelled when the grace period ran out),
/// how long their answers get to reach the callers before the server stops, whatever
/// connections are still open.
pub const CLOSE_LIMIT: Duration = Duration::from_secs(1);

/// Runs `server` (a tonic server with graceful shutdown) until it stops by itself or, once
/// `stopping` has completed, until no call is running (`running_calls`) or `grace` has passed
/// (then `grace_over` cancels what is left), plus [`CLOSE_LIMIT`]: an idle connection a client
/// keeps open never holds shutdown up.
pub async fn drain_within<E>(
    server: impl Future<Output = Result<(), E>>,
    stopping: impl Future<Output = ()>,
    running_calls: impl Fn() -> usize,
    grace: Duration,
    grace_over: impl FnOnce(),
) -> Result<(), E> {
    let drained = async move {
        stopping.await;
        let grace_ends = tokio::time::Instant::now() + grace;
        while running_calls() > 0 {
            if tokio::time::Instant::now() >= grace_ends {
                grace_over();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(CLOSE_LIMIT).await;
    };
    tokio::select! {
        served = server => served,
        () = drained => {
            tracing::info!("closing the connections still open");
            Ok(())
        }
    }
}

/// Every krm-runner server's HTTP/2 settings.
pub fn configure(builder: tonic::transport::Server) -> tonic::transport::Server {
    builder
        .max_concurrent_streams(Some(MAX_STREAMS_PER_CONNECTION))
        .http2_max_header_list_size(Some(MAX_HEADER_LIST_BYTES))
}

/// The connections accepted on `listener`, with TCP_NODELAY (small unary calls: without it,
/// Nagle and delayed ACKs add ~40 ms to each) and a pause after EMFILE/ENFILE-like errors.
pub fn incoming(listener: TcpListener) -> Incoming {
    Incoming {
        accepted: TcpIncoming::from(listener).with_nodelay(Some(true)),
        pause: None,
        out_of_resources: false,
    }
}

/// See [`incoming`].
pub struct Incoming {
    accepted: TcpIncoming,
    pause: Option<Pin<Box<Sleep>>>,
    /// Accepting is failing for lack of resources; reported once until it succeeds again.
    out_of_resources: bool,
}

impl Stream for Incoming {
    type Item = io::Result<TcpStream>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(pause) = self.pause.as_mut() {
            ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        let accepted = ready!(Pin::new(&mut self.accepted).poll_next(cx));
        match &accepted {
            Some(Err(error)) if lacks_resources(error) => {
                if !self.out_of_resources {
                    tracing::warn!(
                        %error,
                        pause = ?ACCEPT_PAUSE,
                        "cannot accept connections; pausing between attempts until it works again"
                    );
                    self.out_of_resources = true;
                }
                let mut pause = Box::pin(tokio::time::sleep(ACCEPT_PAUSE));
                // Registers the waker; the pause has only just started.
                let _ = pause.as_mut().poll(cx);
                self.pause = Some(pause);
                Poll::Pending
            }
            Some(Ok(_)) => {
                self.out_of_resources = false;
                Poll::Ready(accepted)
            }
            _ => Poll::Ready(accepted),
        }
    }
}

fn lacks_resources(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Every krm-runner server's tower layer. It enforces the caller's deadline (see
/// [`answer_by`]), bounds requests being received (see [`IN_FLIGHT_MESSAGES`] and
/// [`RECEIVE_LIMIT`]) and status messages ([`MAX_STATUS_MESSAGE_BYTES`]) and, since Porch's
/// clients expect RESOURCE_EXHAUSTED for a request over the message limit (grpc-go's code)
/// where tonic answers OUT_OF_RANGE, rewrites exactly that answer.
#[derive(Debug, Clone)]
pub struct ServingLayer {
    limit: usize,
    receiving: Arc<ReceiveBudget>,
}

impl ServingLayer {
    pub fn new(max_message_bytes: usize) -> Self {
        Self {
            limit: max_message_bytes,
            receiving: Arc::new(ReceiveBudget {
                limit: max_message_bytes.saturating_mul(IN_FLIGHT_MESSAGES),
                held: AtomicUsize::new(0),
            }),
        }
    }
}

impl<S> Layer<S> for ServingLayer {
    type Service = Serving<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Serving {
            inner,
            limit: self.limit,
            receiving: self.receiving.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Serving<S> {
    inner: S,
    limit: usize,
    receiving: Arc<ReceiveBudget>,
}

impl<S> Service<http::Request<Body>> for Serving<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let answer_by = grpc_timeout(request.headers())
            .map(|timeout| Instant::now() + timeout.saturating_sub(DEADLINE_MARGIN));
        let (mut parts, body) = request.into_parts();
        if let Some(answer_by) = answer_by {
            parts.extensions.insert(AnswerBy(answer_by));
        }
        let body = Body::new(BoundedReceive {
            body,
            budget: self.receiving.clone(),
            held: 0,
            deadline: Box::pin(tokio::time::sleep(RECEIVE_LIMIT)),
            complete: false,
        });
        let limit = self.limit;
        let response = self.inner.call(http::Request::from_parts(parts, body));
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
            bound_message(response.headers_mut());
            Ok(response)
        })
    }
}

/// The request bytes all connections are receiving at once, and their limit.
#[derive(Debug)]
struct ReceiveBudget {
    limit: usize,
    held: AtomicUsize,
}

impl ReceiveBudget {
    fn take(&self, bytes: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// A request body counted against the [`ReceiveBudget`] while it is held, and cut off at
/// [`RECEIVE_LIMIT`] if it has not arrived whole.
struct BoundedReceive {
    body: Body,
    budget: Arc<ReceiveBudget>,
    held: usize,
    deadline: Pin<Box<Sleep>>,
    complete: bool,
}

impl http_body::Body for BoundedReceive {
    type Data = <Body as http_body::Body>::Data;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending if this.complete => return Poll::Pending,
            Poll::Pending => {
                ready!(this.deadline.as_mut().poll(cx));
                return Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                    "the request did not arrive whole within {} s",
                    RECEIVE_LIMIT.as_secs()
                )))));
            }
        };
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let bytes = data.len();
                    if !this.budget.take(bytes) {
                        return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                            "requests being received already hold close to {} bytes \
                             ({IN_FLIGHT_MESSAGES} x max_message_bytes); try again",
                            this.budget.limit
                        )))));
                    }
                    this.held += bytes;
                }
            }
            None => this.complete = true,
            Some(Err(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for BoundedReceive {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
    }
}

/// Cuts a status message over [`MAX_STATUS_MESSAGE_BYTES`], saying how much was left out.
fn bound_message(headers: &mut http::HeaderMap) {
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    let message = status.message();
    if message.len() <= MAX_STATUS_MESSAGE_BYTES {
        return;
    }
    let mut cut = MAX_STATUS_MESSAGE_BYTES;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let bounded = Status::new(
        status.code(),
        format!(
            "{}... ({} more bytes not shown)",
            &message[..cut],
            message.len() - cut
        ),
    );
    let _ = bounded.add_header(headers);
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

/// An error and its causes, each said once: HTTP and gRPC client errors keep the reason (an
/// unknown certificate issuer, a refused connection) in their sources.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}
