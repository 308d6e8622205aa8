//! The wrapper server's own span, exported over OTLP when `OTEL_TRACES_EXPORTER=otlp`, as
//! Porch's wrapper server does: one server span per call, continuing the caller's W3C
//! `traceparent`, and the parent of the function process's spans. `OTEL_EXPORTER_OTLP_PROTOCOL`
//! is `grpc` (the default) or `http/protobuf`, as for the runner; the OpenTelemetry SDK reads the
//! rest of its settings (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`, ...) from the environment.

use std::collections::HashMap;
use std::sync::OnceLock;

use krm_function_process::TraceContext;
use krm_otlp_exporter::OtlpProtocol;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// The service name when `OTEL_SERVICE_NAME` does not give one.
const SERVICE_NAME: &str = "wrapper-server";

/// An OpenTelemetry variable; empty counts as unset, as the specification says.
fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// Starts exporting spans when `OTEL_TRACES_EXPORTER=otlp`. Call it inside the async runtime
/// that serves (the exporter's connection lives there). A setting it cannot use is an error
/// naming the variable; the caller logs it and serves without traces, since the function runs
/// the same either way.
pub fn start() -> Result<(), String> {
    match variable("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("none") => return Ok(()),
        Some("otlp") => {}
        Some(other) => {
            return Err(format!(
                "OTEL_TRACES_EXPORTER: {other:?} is not one of otlp, none"
            ));
        }
    }
    let protocol = match variable("OTEL_EXPORTER_OTLP_PROTOCOL") {
        None => OtlpProtocol::Grpc,
        Some(name) => name
            .parse()
            .map_err(|error| format!("OTEL_EXPORTER_OTLP_PROTOCOL: {error}"))?,
    };
    let exporter = krm_otlp_exporter::span_exporter(protocol, None)
        .map_err(|error| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {error}"))?;
    let mut resource = Resource::builder();
    if variable("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("krm-wrapper-server");
    let _ = TRACING.set(Tracing { provider, tracer });
    Ok(())
}

/// Sends the spans not yet exported; blocks, so call it off the async runtime's threads.
pub fn shutdown() {
    if let Some(tracing) = TRACING.get()
        && let Err(error) = tracing.provider.shutdown()
    {
        tracing::warn!(%error, "spans not exported at shutdown");
    }
}

/// One call's server span; nothing when not tracing.
pub struct CallSpan(Option<Context>);

impl CallSpan {
    /// Opens the span of a call for `image`, continuing `parent` (the caller's context).
    pub fn start(parent: Option<&TraceContext>, image: &str) -> Self {
        let Some(tracing) = TRACING.get() else {
            return Self(None);
        };
        let parent = match parent {
            Some(parent) => TraceContextPropagator::new().extract(&HashMap::from([
                ("traceparent".to_owned(), parent.traceparent.clone()),
                ("tracestate".to_owned(), parent.tracestate.clone()),
            ])),
            None => Context::new(),
        };
        let span = tracing
            .tracer
            .span_builder("evaluator.FunctionEvaluator/EvaluateFunction")
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", "evaluator.FunctionEvaluator"),
                KeyValue::new("rpc.method", "EvaluateFunction"),
                KeyValue::new("krm.function.image", image.to_owned()),
            ])
            .start_with_context(&tracing.tracer, &parent);
        Self(Some(parent.with_span(span)))
    }

    /// The span's W3C context, for the function process; `None` when not tracing.
    pub fn trace_context(&self) -> Option<TraceContext> {
        let context = self.0.as_ref()?;
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(context, &mut headers);
        TraceContext::new(
            headers.get("traceparent")?,
            headers.get("tracestate").map_or("", String::as_str),
        )
    }

    /// Ends the span with the call's answer.
    pub fn end(self, code: tonic::Code, message: &str) {
        let Some(context) = self.0 else {
            return;
        };
        let span = context.span();
        span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
        if code != tonic::Code::Ok {
            span.set_status(Status::error(message.to_owned()));
        }
        span.end();
    }
}
