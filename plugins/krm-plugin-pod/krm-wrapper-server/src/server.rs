//! The gRPC server: Porch's `evaluator.FunctionEvaluator` for one function, and
//! `grpc.health.v1.Health`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use krm_function_process::{TraceContext, quoted};
use krm_runner_proto::evaluator::function_evaluator_server::{
    FunctionEvaluator, FunctionEvaluatorServer,
};
use krm_runner_proto::evaluator::{EvaluateFunctionRequest, EvaluateFunctionResponse};
use krm_runner_proto::serving::{self, ServingLayer, answer_by, health_service};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use crate::process::{self, Exited, Outcome, OutputLimits};
use crate::resource_list;
use crate::telemetry::CallSpan;

/// Answer this long before the caller's deadline, so that our DEADLINE_EXCEEDED (and not
/// tonic's own timeout, which answers CANCELLED) reaches the caller in time.
/// What the server runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The function's command line: program and arguments.
    pub entrypoint: Vec<String>,
    /// Largest request and response message, in bytes (`--max-request-body-size`).
    pub max_message_bytes: usize,
}

struct Evaluator {
    entrypoint: Arc<[String]>,
    max_message_bytes: usize,
}

#[tonic::async_trait]
impl FunctionEvaluator for Evaluator {
    async fn evaluate_function(
        &self,
        request: Request<EvaluateFunctionRequest>,
    ) -> Result<Response<EvaluateFunctionResponse>, Status> {
        let deadline = answer_by(&request).map(tokio::time::Instant::from_std);
        let caller = trace_context(request.metadata());
        let EvaluateFunctionRequest {
            resource_list,
            image,
            ..
        } = request.into_inner();
        let span = CallSpan::start(caller.as_ref(), &image);
        let started = Instant::now();
        let limits = OutputLimits {
            max_stdout_bytes: self.max_message_bytes,
            max_log_bytes: self.max_message_bytes,
        };
        // The function's parent span: this call's when tracing, else the caller's.
        let environment = span
            .trace_context()
            .or(caller)
            .map(|trace| trace.environment())
            .unwrap_or_default();
        let outcome = process::run(
            &self.entrypoint,
            &environment,
            resource_list,
            deadline,
            limits,
        )
        .await;
        let result = respond(&image, outcome, self.max_message_bytes);
        match &result {
            Ok(_) => span.end(tonic::Code::Ok, ""),
            Err(status) => span.end(status.code(), status.message()),
        }
        let image = quoted(&image).bounded();
        let image = image.as_ref();
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        match &result {
            Ok(response) => tracing::info!(
                image,
                duration_ms,
                stdout_bytes = response.get_ref().resource_list.len(),
                "evaluated"
            ),
            Err(status) => tracing::warn!(
                image,
                duration_ms,
                code = ?status.code(),
                message = status.message(),
                "evaluation failed"
            ),
        }
        result
    }
}

/// The caller's W3C trace context (`traceparent`, `tracestate` metadata), which the function
/// receives as `TRACEPARENT`/`TRACESTATE` (under this server's span when it traces) so that its
/// own spans join the caller's trace.
fn trace_context(metadata: &tonic::metadata::MetadataMap) -> Option<TraceContext> {
    let value = |key| {
        metadata
            .get(key)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    };
    TraceContext::new(value("traceparent"), value("tracestate"))
}

/// The answer for a finished call, with Porch's wrapper-server messages.
fn respond(
    image: &str,
    outcome: Outcome,
    max_message_bytes: usize,
) -> Result<Response<EvaluateFunctionResponse>, Status> {
    let image = quoted(image);
    let exited = match outcome {
        Outcome::NotStarted(error) => {
            return Err(Status::internal(format!(
                "Failed to execute function {image}: {error} ()"
            )));
        }
        Outcome::DeadlineExceeded => {
            return Err(Status::deadline_exceeded(format!(
                "Failed to execute function {image}: context deadline exceeded; its processes \
                 were killed"
            )));
        }
        Outcome::Exited(exited) => exited,
    };
    let Exited {
        status,
        stdout,
        stderr,
        overflowed,
    } = exited;
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    if overflowed {
        return Err(Status::internal(format!(
            "Failed to execute function {image}: its output exceeded {max_message_bytes} bytes \
             and it was killed ({stderr})"
        )));
    }
    let Some(stdout) = stdout else {
        return Err(Status::internal(format!(
            "Failed to execute function {image}: its output pipe was held open by a process \
             that left its process group ({stderr})"
        )));
    };
    if !status.success() {
        return Err(match resource_list::check(&stdout) {
            Ok(()) => Status::internal(format!(
                "failed to evaluate function {image} with structured results: {} and stderr: \
                 {stderr}",
                resource_list::results_text(&stdout)
            )),
            Err(parse_error) => Status::internal(format!(
                "failed to parse the output of function {image} with stderr '{stderr}': \
                 {parse_error}"
            )),
        });
    }
    if let Err(parse_error) = resource_list::check(&stdout) {
        return Err(Status::internal(format!(
            "failed to parse the output of function {image} with stderr '{stderr}': \
             {parse_error}"
        )));
    }
    if resource_list::has_error_result(&stdout) {
        tracing::warn!(
            image = &*image.bounded(),
            results = resource_list::results_text(&stdout),
            stderr,
            "function exited 0 with error results"
        );
    }
    let response = EvaluateFunctionResponse {
        resource_list: stdout,
        log: stderr.into_bytes(),
    };
    let size = prost::Message::encoded_len(&response);
    if size > max_message_bytes {
        // grpc-go's code and wording for an answer over MaxSendMsgSize.
        return Err(Status::resource_exhausted(format!(
            "grpc: trying to send message larger than max ({size} vs. {max_message_bytes})"
        )));
    }
    Ok(Response::new(response))
}

/// Binds the wrapper's port on every interface: IPv6 and IPv4 when the host has IPv6, else IPv4.
/// Addresses are literals, so no resolver is involved.
pub async fn bind(port: u16) -> std::io::Result<TcpListener> {
    match TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port)).await {
        Ok(listener) => Ok(listener),
        Err(_) => TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)).await,
    }
}

/// Serves until `stop` completes, then stops gracefully: no new calls, in-flight calls finish.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    stop: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let evaluator = FunctionEvaluatorServer::new(Evaluator {
        entrypoint: config.entrypoint.into(),
        max_message_bytes: config.max_message_bytes,
    })
    .max_decoding_message_size(config.max_message_bytes)
    .max_encoding_message_size(config.max_message_bytes);
    let limit = config.max_message_bytes;
    serving::configure(tonic::transport::Server::builder())
        .layer(ServingLayer::new(limit))
        .add_service(health_service())
        .add_service(evaluator)
        .serve_with_incoming_shutdown(serving::incoming(listener), stop)
        .await
}
