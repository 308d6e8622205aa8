//! Spans, exported over OTLP: the call as the gRPC server sees it (continuing the caller's
//! trace), the routing decision, each evaluator the runner asks, and the W3C context handed to
//! the evaluator, so that its function process joins the same trace.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use krm_plugin_api::{AttributeValue, TraceContext};
use krm_plugin_loader::{HostCallContext, HostSpan};
use opentelemetry::propagation::{Extractor, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tonic::metadata::{KeyRef, MetadataMap};

use super::TelemetryError;
use crate::config::telemetry::{OtlpProtocol, TelemetryConfig, TracesExporter};

struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    /// What `OTEL_PROPAGATORS` names, for reading the caller's context.
    propagator: TextMapCompositePropagator,
    /// Whether the W3C `traceparent` is propagated at all (not with `none`), and so handed to
    /// functions.
    w3c: bool,
}

static TRACING: OnceLock<Tracing> = OnceLock::new();

/// Starts exporting spans when `telemetry.traces.exporter` says so. Call it inside the async
/// runtime that serves (the gRPC exporter's connection lives there).
pub fn start(config: &TelemetryConfig) -> Result<(), TelemetryError> {
    if config.traces.exporter == TracesExporter::None {
        return Ok(());
    }
    let protocol = match config.traces.protocol {
        OtlpProtocol::Grpc => krm_otlp_exporter::OtlpProtocol::Grpc,
        OtlpProtocol::HttpProtobuf => krm_otlp_exporter::OtlpProtocol::HttpProtobuf,
    };
    let exporter = krm_otlp_exporter::span_exporter(protocol, config.traces.endpoint.as_deref())
        .map_err(|error| TelemetryError::Exporter {
            field: "telemetry.traces",
            reason: error.to_string(),
        })?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        )
        .build();
    let tracer = provider.tracer("krm-runner");
    let names = &config.propagators;
    let mut propagators: Vec<Box<dyn TextMapPropagator + Send + Sync>> = Vec::new();
    if names.iter().any(|name| name == "tracecontext") {
        propagators.push(Box::new(TraceContextPropagator::new()));
    }
    if names.iter().any(|name| name == "baggage") {
        propagators.push(Box::new(BaggagePropagator::new()));
    }
    let w3c = names.iter().any(|name| name == "tracecontext");
    let _ = TRACING.set(Tracing {
        provider,
        tracer,
        propagator: TextMapCompositePropagator::new(propagators),
        w3c,
    });
    Ok(())
}

/// Sends the spans not yet exported; blocks, so call it from a blocking thread.
pub fn shutdown() {
    if let Some(tracing) = TRACING.get()
        && let Err(error) = tracing.provider.shutdown()
    {
        tracing::warn!(%error, "telemetry: spans not exported at shutdown");
    }
}

/// The spans of one call: the context of the span now open, or nothing when the runner does
/// not trace (then every method does nothing).
#[derive(Clone, Default)]
pub struct CallTrace(Option<Context>);

impl CallTrace {
    /// The server span of a gRPC call, continuing the trace the caller's metadata names.
    pub fn server(metadata: &MetadataMap, service: &'static str, method: &'static str) -> Self {
        let Some(tracing) = TRACING.get() else {
            return Self(None);
        };
        let parent = tracing.propagator.extract(&Metadata(metadata));
        let attributes = [
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", service),
            KeyValue::new("rpc.method", method),
        ];
        let span = tracing
            .tracer
            .span_builder(format!("{service}/{method}"))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&tracing.tracer, &parent);
        Self(Some(parent.with_span(span)))
    }

    /// A span inside this one (none when not tracing).
    pub fn child(&self, name: impl Into<Cow<'static, str>>) -> Self {
        let (Some(parent), Some(tracing)) = (&self.0, TRACING.get()) else {
            return Self(None);
        };
        let span = tracing
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .start_with_context(&tracing.tracer, parent);
        Self(Some(parent.with_span(span)))
    }

    pub fn is_recording(&self) -> bool {
        self.0.is_some()
    }

    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        if let Some(context) = &self.0 {
            context.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Sets a list of strings (evaluators that declined, say).
    pub fn set_list(&self, key: &'static str, values: &[String]) {
        if let Some(context) = &self.0 {
            let values: Vec<opentelemetry::StringValue> =
                values.iter().map(|value| value.clone().into()).collect();
            context.span().set_attribute(KeyValue::new(
                key,
                Value::Array(opentelemetry::Array::String(values)),
            ));
        }
    }

    /// Ends the span; an error status carries `message`.
    pub fn end(self, error: Option<&str>) {
        if let Some(context) = self.0 {
            let span = context.span();
            if let Some(message) = error {
                span.set_status(Status::error(message.to_owned()));
            }
            span.end();
        }
    }

    /// The trace id, hex, for log lines.
    pub fn trace_id(&self) -> Option<String> {
        let context = self.0.as_ref()?;
        Some(context.span().span_context().trace_id().to_string())
    }

    /// Hands this span's W3C context to the evaluators about to be called (they pass it on to
    /// their function processes as `TRACEPARENT`/`TRACESTATE`).
    pub fn lend_to(&self, call: &HostCallContext) {
        let (Some(context), Some(tracing)) = (&self.0, TRACING.get()) else {
            return;
        };
        if !tracing.w3c {
            return;
        }
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(context, &mut headers);
        if let Some(traceparent) = headers.get("traceparent") {
            call.set_trace_context(
                traceparent,
                headers.get("tracestate").map_or("", String::as_str),
            );
        }
    }

    /// A `tracing` span carrying the trace id, so that every log line of the call (the
    /// plugins' included) names its trace; `Span::none()` when not tracing. At level ERROR so
    /// that no log filter hides it.
    pub fn log_span(&self) -> tracing::Span {
        match self.trace_id() {
            Some(trace_id) => tracing::error_span!("call", trace_id = %trace_id),
            None => tracing::Span::none(),
        }
    }
}

struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                KeyRef::Ascii(key) => Some(key.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// Span names and attribute keys from plugins are cut to this many bytes.
const MAX_PLUGIN_SPAN_NAME_BYTES: usize = 128;
/// String attribute values from plugins are cut to this many bytes.
const MAX_PLUGIN_ATTRIBUTE_BYTES: usize = 4096;

fn truncated(text: &str, max: usize) -> String {
    let cut = (0..=max.min(text.len()))
        .rev()
        .find(|index| text.is_char_boundary(*index))
        .unwrap_or(0);
    text[..cut].to_owned()
}

/// A span a plugin opened through the host handle, under `parent` (the call's context it was
/// lent) or in a trace of its own; `None` when the runner does not trace.
pub fn plugin_span(
    plugin: &str,
    instance: &str,
    parent: Option<&TraceContext>,
    name: &str,
) -> Option<Box<dyn HostSpan>> {
    let tracing = TRACING.get()?;
    let parent = match parent {
        Some(parent) => {
            let headers = HashMap::from([
                ("traceparent".to_owned(), parent.traceparent.clone()),
                ("tracestate".to_owned(), parent.tracestate.clone()),
            ]);
            TraceContextPropagator::new().extract(&headers)
        }
        None => Context::new(),
    };
    let span = tracing
        .tracer
        .span_builder(truncated(name, MAX_PLUGIN_SPAN_NAME_BYTES))
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new("krm.plugin", plugin.to_owned()),
            KeyValue::new("krm.evaluator", instance.to_owned()),
        ])
        .start_with_context(&tracing.tracer, &parent);
    Some(Box::new(PluginSpan(parent.with_span(span))))
}

struct PluginSpan(Context);

impl HostSpan for PluginSpan {
    fn set_attribute(&self, key: &str, value: AttributeValue) {
        let value = match value {
            AttributeValue::String(text) => {
                Value::from(truncated(&text, MAX_PLUGIN_ATTRIBUTE_BYTES))
            }
            AttributeValue::I64(number) => Value::I64(number),
            AttributeValue::F64(number) => Value::F64(number),
            AttributeValue::Bool(flag) => Value::Bool(flag),
        };
        self.0.span().set_attribute(KeyValue::new(
            truncated(key, MAX_PLUGIN_SPAN_NAME_BYTES),
            value,
        ));
    }

    fn set_error(&self, message: &str) {
        self.0.span().set_status(Status::error(truncated(
            message,
            MAX_PLUGIN_ATTRIBUTE_BYTES,
        )));
    }

    fn trace_context(&self) -> Option<TraceContext> {
        let mut headers = HashMap::new();
        TraceContextPropagator::new().inject_context(&self.0, &mut headers);
        TraceContext::new(
            headers.get("traceparent")?,
            headers.get("tracestate").map_or("", String::as_str),
        )
    }
}

impl Drop for PluginSpan {
    fn drop(&mut self) {
        self.0.span().end();
    }
}
