//! The gRPC server: Porch's `evaluator.FunctionEvaluator` and `grpc.health.v1.Health`, plus
//! krm-runner's `krmrunner.v1` catalog and ConfigHub executor.

mod catalog;

use std::sync::Arc;
use std::time::{Duration, Instant};

use krm_plugin_api::process;
use krm_plugin_api::{CancelReason, EvalError, quoted};
use krm_plugin_loader::HostCallContext;
use krm_runner_proto::evaluator::function_evaluator_server::{
    FunctionEvaluator, FunctionEvaluatorServer,
};
use krm_runner_proto::evaluator::{EvaluateFunctionRequest, EvaluateFunctionResponse};
use krm_runner_proto::krmrunner::v1::function_catalog_server::FunctionCatalogServer;
use krm_runner_proto::serving::{self, ServingLayer, answer_by, health_service};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::metadata::MetadataValue;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use self::catalog::CatalogService;
use crate::cache;
use crate::confighub::serving::{self as confighub_serving, TypedFunctions};
use crate::runtime::{self, CancelOnDrop, Refused, Runtime};
use crate::telemetry::metrics::{self, CallMetrics, RpcMetricsLayer};
use crate::telemetry::traces::CallTrace;
use crate::trust::Decision;

/// The response header naming the evaluator instance that served a call.
pub const EVALUATOR_HEADER: &str = "x-krm-evaluator";

/// The response header naming the image a tag constraint resolved to (with `@digest` when the
/// evaluator knows it).
pub const RESOLVED_IMAGE_HEADER: &str = "x-krm-resolved-image";

struct EvaluatorService {
    runtime: Arc<Runtime>,
    max_message_bytes: usize,
    shutdown: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl FunctionEvaluator for EvaluatorService {
    async fn evaluate_function(
        &self,
        request: Request<EvaluateFunctionRequest>,
    ) -> Result<Response<EvaluateFunctionResponse>, Status> {
        let deadline = answer_by(&request);
        let trace = CallTrace::server(
            request.metadata(),
            "evaluator.FunctionEvaluator",
            "EvaluateFunction",
        );
        let EvaluateFunctionRequest {
            resource_list,
            image,
            tag,
        } = request.into_inner();
        let context = HostCallContext::with_tag(deadline, tag);
        // The call runs on its own task, so that it is logged and cleaned up even when the
        // caller goes away; dropping this handler (the caller cancelled) cancels the call.
        let _cancel_if_dropped = CancelOnDrop::new(context.clone());
        let log_span = trace.log_span();
        let call = tokio::spawn(
            run_call(
                self.runtime.clone(),
                self.shutdown.clone(),
                self.max_message_bytes,
                context,
                trace,
                image,
                resource_list,
            )
            .instrument(log_span),
        );
        call.await
            .unwrap_or_else(|error| Err(Status::internal(format!("call task failed: {error}"))))
    }
}

async fn run_call(
    runtime: Arc<Runtime>,
    mut shutdown: watch::Receiver<bool>,
    max_message_bytes: usize,
    context: Arc<HostCallContext>,
    trace: CallTrace,
    image: String,
    resource_list: Vec<u8>,
) -> Result<Response<EvaluateFunctionResponse>, Status> {
    let started = Instant::now();
    let metrics = CallMetrics::start(&image);
    let request_bytes = resource_list.len();
    if trace.is_recording() {
        trace.set("krm.function.image", quoted(&image).bounded().into_owned());
        trace.set(
            "krm.function.tag",
            quoted(context.tag()).bounded().into_owned(),
        );
        trace.set("krm.request.bytes", request_bytes as i64);
    }
    let mut decision = None;
    let admit_and_evaluate = async {
        match runtime.admit(&context, &image).await {
            Ok(admitted) => {
                decision = Some(admitted.decision.clone());
                let (outcome, cached) = runtime
                    .evaluate(context.clone(), &trace, admitted, resource_list)
                    .await;
                (
                    outcome.map_err(|error| (to_status(&error), error.declined)),
                    cached,
                )
            }
            Err(refused) => {
                decision = refused.decision();
                (
                    Err((refused_status(&refused), Vec::new())),
                    cache::Outcome::Bypass,
                )
            }
        }
    };
    let (outcome, cached) = tokio::select! {
        outcome = admit_and_evaluate => outcome,
        _ = shutdown.wait_for(|forced| *forced) => {
            context.cancel(CancelReason::ShuttingDown);
            (
                Err((to_status(&CancelReason::ShuttingDown.to_error(&image)), Vec::new())),
                cache::Outcome::Bypass,
            )
        }
    };
    let call = CallEnd {
        cached,
        image: &image,
        tag: context.tag(),
        resolved: context.resolved(),
        decision,
        duration: started.elapsed(),
        request_bytes,
        trace,
        metrics,
    };
    let response = match outcome {
        Ok(response) => response,
        Err((status, declined)) => {
            let failed_by = context.failed_by().unwrap_or_default();
            call.record(&failed_by, &declined, status.code(), 0);
            return Err(status);
        }
    };
    let served_by = response.served_by.clone().unwrap_or_default();
    let size = response.resource_list.len() + response.log.len();
    if size > max_message_bytes {
        let status = Status::resource_exhausted(format!(
            "output of function {} is {size} bytes, over max_message_bytes {max_message_bytes}",
            quoted(&image)
        ));
        call.record(&served_by, &response.declined, status.code(), 0);
        return Err(status);
    }
    let resolved = call.resolved.clone();
    call.record(&served_by, &response.declined, tonic::Code::Ok, size);
    let mut reply = Response::new(EvaluateFunctionResponse {
        resource_list: response.resource_list,
        log: response.log,
    });
    if let Ok(value) = MetadataValue::try_from(served_by.as_str()) {
        reply.metadata_mut().insert(EVALUATOR_HEADER, value);
    }
    reply.metadata_mut().insert(
        cache::CACHE_HEADER,
        MetadataValue::from_static(cached.as_str()),
    );
    if let Some(Ok(value)) = resolved.as_deref().map(MetadataValue::try_from) {
        reply.metadata_mut().insert(RESOLVED_IMAGE_HEADER, value);
    }
    Ok(reply)
}

/// What is recorded about a call when it ends: its log line, its span's attributes and its
/// metrics.
struct CallEnd<'a> {
    /// What the result cache did for it.
    cached: cache::Outcome,
    image: &'a str,
    /// The requested tag constraint; empty when none.
    tag: &'a str,
    resolved: Option<String>,
    /// The trust policy's decision; `None` when the call never reached it.
    decision: Option<Decision>,
    duration: Duration,
    request_bytes: usize,
    trace: CallTrace,
    metrics: Option<CallMetrics>,
}

impl CallEnd<'_> {
    fn record(
        self,
        evaluator: &str,
        declined: &[String],
        code: tonic::Code,
        response_bytes: usize,
    ) {
        let Self {
            image,
            tag,
            duration,
            ..
        } = self;
        let outcome = metrics::outcome_label(code);
        if let Some(metrics) = self.metrics {
            metrics.finish(
                evaluator,
                code,
                duration,
                self.request_bytes,
                response_bytes,
            );
        }
        let resolved = self.resolved.as_deref().unwrap_or_default();
        let policy = self
            .decision
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let cache = self.cached.as_str();
        if self.trace.is_recording() {
            let trace = &self.trace;
            trace.set("krm.cache", cache);
            trace.set("rpc.grpc.status_code", code as i64);
            trace.set("krm.outcome", outcome);
            trace.set("krm.evaluator", evaluator.to_owned());
            trace.set_list("krm.evaluators.declined", declined);
            trace.set("krm.function.resolved_image", resolved.to_owned());
            trace.set("krm.response.bytes", response_bytes as i64);
            if let Some(decision) = &self.decision {
                trace.set("krm.policy.rule", decision.rule.clone());
                trace.set("krm.policy.outcome", decision.outcome());
                trace.set("krm.policy.reason", decision.reason.clone());
            }
        }
        self.trace.end((code != tonic::Code::Ok).then_some(outcome));
        let (image, tag) = (quoted(image).bounded(), quoted(tag).bounded());
        let (image, tag) = (image.as_ref(), tag.as_ref());
        let declined = declined.join(",");
        let duration_ms = duration.as_secs_f64() * 1000.0;
        let outcome = format!("{code:?}");
        if code == tonic::Code::Ok {
            tracing::info!(
                image,
                tag,
                resolved,
                policy,
                evaluator,
                declined,
                cache,
                duration_ms,
                outcome,
                "call"
            );
        } else {
            tracing::warn!(
                image,
                tag,
                resolved,
                policy,
                evaluator,
                declined,
                cache,
                duration_ms,
                outcome,
                "call"
            );
        }
    }
}

fn service_name<S: tonic::server::NamedService>(_: &S) -> &'static str {
    S::NAME
}

/// The gRPC status for a call [`Runtime::admit`] refused.
pub fn refused_status(refused: &Refused) -> Status {
    Status::new(tonic::Code::from(refused.grpc_code()), refused.to_string())
}

/// The gRPC status for an evaluator's error.
pub fn to_status(error: &EvalError) -> Status {
    Status::new(
        tonic::Code::from(error.kind.grpc_code()),
        error.message.clone(),
    )
}

/// Serves until SIGTERM or SIGINT, then drains: in-flight calls get `grace` to finish before
/// they are cancelled, and the runner exits within `grace` + [`serving::CLOSE_LIMIT`] even if
/// clients keep idle connections open. A second signal kills every call's processes and exits at once.
///
/// ConfigHub's typed functions are served on the same gRPC server and, given `confighub_http`,
/// over HTTP there too; that listener stops taking requests when shutdown starts.
pub async fn serve(
    runtime: Arc<Runtime>,
    listener: TcpListener,
    confighub_http: Option<TcpListener>,
    typed: Arc<TypedFunctions>,
    max_message_bytes: usize,
    grace: Duration,
) -> anyhow::Result<()> {
    let (force_tx, force_rx) = watch::channel(false);
    let (stopping_tx, mut stopping_rx) = watch::channel(false);
    let http = confighub_http.map(|listener| {
        tokio::spawn(confighub_serving::serve_http(
            listener,
            typed.clone(),
            max_message_bytes,
            stopping_rx.clone(),
        ))
    });
    let executor = confighub_serving::grpc_service(typed, max_message_bytes);
    let catalog = FunctionCatalogServer::new(CatalogService::new(runtime.clone()));
    let evaluator = FunctionEvaluatorServer::new(EvaluatorService {
        runtime,
        max_message_bytes,
        shutdown: force_rx,
    })
    .max_decoding_message_size(max_message_bytes)
    .max_encoding_message_size(max_message_bytes);
    // Installed now, before anything is served: a SIGTERM right after start-up is a shutdown.
    let terminated = crate::signals::terminated();
    let stop = async move {
        terminated.await;
        tracing::info!(
            grace_seconds = grace.as_secs(),
            "shutting down: no new calls; draining in-flight calls"
        );
        let _ = stopping_tx.send(true);
        tokio::spawn(async {
            crate::signals::terminated().await;
            tracing::warn!("second signal: killing every call's processes and exiting now");
            runtime::cancel_running_calls(CancelReason::ShuttingDown);
            process::kill_orphans_now();
            std::process::exit(1);
        });
    };
    let health = health_service();
    let rpc_metrics = RpcMetricsLayer::new(&[
        service_name(&health),
        service_name(&catalog),
        service_name(&executor),
    ]);
    let server = serving::configure(tonic::transport::Server::builder())
        .layer(ServingLayer::new(max_message_bytes))
        .layer(rpc_metrics)
        .add_service(health)
        .add_service(evaluator)
        .add_service(catalog)
        .add_service(executor)
        .serve_with_incoming_shutdown(serving::incoming(listener), stop);
    let stopping = async move {
        let _ = stopping_rx.wait_for(|stopping| *stopping).await;
    };
    let grace_over = move || {
        tracing::warn!("grace period over: cancelling in-flight calls");
        let _ = force_tx.send(true);
        // Typed-function sequences too (their workers are killed).
        runtime::cancel_running_calls(CancelReason::ShuttingDown);
    };
    serving::drain_within(
        server,
        stopping,
        runtime::running_call_count,
        grace,
        grace_over,
    )
    .await?;
    if let Some(http) = http {
        // It stopped accepting when shutdown started; it ends once its last answer is written.
        let _ = tokio::time::timeout(serving::CLOSE_LIMIT, http).await;
    }
    tracing::info!("stopped");
    Ok(())
}
