//! Metrics served for Prometheus at `/metrics` (OpenMetrics text): the OpenTelemetry RPC server
//! metrics under the names OpenTelemetry's Prometheus exporter gives them (`rpc_server_*`), and
//! the runner's own per function image and evaluator, and for FunctionConfigs.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::TelemetryError;
use super::config::{MetricsConfig, MetricsExporter};

/// The label value of images past `telemetry.metrics.max_images`.
pub const OTHER_IMAGE: &str = "other";

/// Image strings longer than this count as [`OTHER_IMAGE`] (an image reference is far shorter).
const MAX_IMAGE_LABEL_BYTES: usize = 256;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc_system: &'static str,
    rpc_service: &'static str,
    rpc_method: &'static str,
    rpc_grpc_status_code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FunctionLabels {
    image: String,
    evaluator: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    image: String,
    evaluator: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ImageLabels {
    image: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutorLabels {
    executor: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

struct Metrics {
    registry: Registry,
    images: BoundedImages,
    rpc_duration: HistogramFamily<RpcLabels>,
    rpc_request_size: HistogramFamily<RpcLabels>,
    rpc_response_size: HistogramFamily<RpcLabels>,
    calls: Family<OutcomeLabels, Counter>,
    call_duration: HistogramFamily<FunctionLabels>,
    in_flight: Family<ImageLabels, Gauge>,
    request_bytes: Family<FunctionLabels, Counter>,
    response_bytes: Family<FunctionLabels, Counter>,
    config_reloads: Family<ReloadLabels, Counter>,
    config_load_errors: Counter,
    config_routes: Family<ExecutorLabels, Gauge>,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

fn milliseconds() -> Histogram {
    // OpenTelemetry's default bounds for durations in milliseconds.
    Histogram::new([
        0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
        7500.0, 10000.0,
    ])
}

fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

fn bytes() -> Histogram {
    Histogram::new(exponential_buckets(256.0, 4.0, 10))
}

impl Metrics {
    fn new(config: &MetricsConfig) -> Self {
        let metrics = Self {
            registry: Registry::default(),
            images: BoundedImages::new(config.max_images),
            rpc_duration: Family::new_with_constructor(milliseconds),
            rpc_request_size: Family::new_with_constructor(bytes),
            rpc_response_size: Family::new_with_constructor(bytes),
            calls: Family::default(),
            call_duration: Family::new_with_constructor(seconds),
            in_flight: Family::default(),
            request_bytes: Family::default(),
            response_bytes: Family::default(),
            config_reloads: Family::default(),
            config_load_errors: Counter::default(),
            config_routes: Family::default(),
        };
        let mut registry = Registry::default();
        registry.register_with_unit(
            "rpc_server_duration",
            "Duration of inbound RPCs",
            Unit::Other("milliseconds".to_owned()),
            metrics.rpc_duration.clone(),
        );
        registry.register_with_unit(
            "rpc_server_request_size",
            "Sizes of inbound RPC request messages",
            Unit::Bytes,
            metrics.rpc_request_size.clone(),
        );
        registry.register_with_unit(
            "rpc_server_response_size",
            "Sizes of RPC response messages",
            Unit::Bytes,
            metrics.rpc_response_size.clone(),
        );
        registry.register(
            "krm_function_calls",
            "EvaluateFunction calls by function image, the evaluator that served (empty: none) \
             and outcome (the gRPC status)",
            metrics.calls.clone(),
        );
        registry.register_with_unit(
            "krm_function_call_duration",
            "Duration of EvaluateFunction calls by function image and evaluator",
            Unit::Seconds,
            metrics.call_duration.clone(),
        );
        registry.register(
            "krm_function_calls_in_flight",
            "EvaluateFunction calls running, by function image",
            metrics.in_flight.clone(),
        );
        registry.register_with_unit(
            "krm_function_request",
            "ResourceList bytes received, by function image and evaluator",
            Unit::Bytes,
            metrics.request_bytes.clone(),
        );
        registry.register_with_unit(
            "krm_function_response",
            "ResourceList and log bytes returned, by function image and evaluator",
            Unit::Bytes,
            metrics.response_bytes.clone(),
        );
        registry.register(
            "krm_function_config_reloads",
            "Changes of the FunctionConfig files, applied or refused (then the last good \
             routing stays)",
            metrics.config_reloads.clone(),
        );
        registry.register(
            "krm_function_config_load_errors",
            "Problems found in FunctionConfig files that were refused",
            metrics.config_load_errors.clone(),
        );
        registry.register(
            "krm_function_config_routes",
            "FunctionConfigs in force with a section for each executor",
            metrics.config_routes.clone(),
        );
        // Both outcomes from the start, so that a first reload counts as an increase.
        for outcome in ["applied", "refused"] {
            metrics
                .config_reloads
                .get_or_create(&ReloadLabels { outcome })
                .inc_by(0);
        }
        Self {
            registry,
            ..metrics
        }
    }
}

/// Label values for images: the first `max` distinct images keep their own, later ones share
/// [`OTHER_IMAGE`], so hostile or careless callers cannot grow the series without bound.
struct BoundedImages {
    max: usize,
    seen: Mutex<HashSet<String>>,
}

impl BoundedImages {
    fn new(max: usize) -> Self {
        Self {
            max,
            seen: Mutex::default(),
        }
    }

    fn label(&self, image: &str) -> String {
        if image.len() > MAX_IMAGE_LABEL_BYTES {
            return OTHER_IMAGE.to_owned();
        }
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(image) {
            return image.to_owned();
        }
        if seen.len() < self.max {
            seen.insert(image.to_owned());
            return image.to_owned();
        }
        OTHER_IMAGE.to_owned()
    }
}

/// Starts serving `/metrics` when `telemetry.metrics.exporter` says so, on a listener of its
/// own; returns the address bound.
pub async fn start(config: &MetricsConfig) -> Result<Option<std::net::SocketAddr>, TelemetryError> {
    if config.exporter == MetricsExporter::None {
        return Ok(None);
    }
    let address = format!("{}:{}", config.host, config.port);
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|error| TelemetryError::Bind {
            field: "telemetry.metrics",
            address: address.clone(),
            source: error,
        })?;
    let bound = listener
        .local_addr()
        .map_err(|error| TelemetryError::Bind {
            field: "telemetry.metrics",
            address,
            source: error,
        })?;
    let _ = METRICS.set(Metrics::new(config));
    let router = axum::Router::new().route("/metrics", axum::routing::get(exposition));
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
            tracing::error!(%error, "telemetry: the metrics endpoint stopped");
        }
    });
    Ok(Some(bound))
}

async fn exposition() -> impl axum::response::IntoResponse {
    let mut text = String::new();
    if let Some(metrics) = METRICS.get() {
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &metrics.registry);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}

/// One EvaluateFunction call being counted: in flight until [`CallMetrics::finish`] (or drop).
pub struct CallMetrics {
    image: String,
}

impl CallMetrics {
    /// Counts a call for `image` in flight; `None` when metrics are off.
    pub fn start(image: &str) -> Option<Self> {
        let metrics = METRICS.get()?;
        let image = metrics.images.label(image);
        metrics
            .in_flight
            .get_or_create(&ImageLabels {
                image: image.clone(),
            })
            .inc();
        Some(Self { image })
    }

    /// Records the call's end: `evaluator` served it (empty: none did), `code` is its answer.
    pub fn finish(
        self,
        evaluator: &str,
        code: tonic::Code,
        duration: Duration,
        request_bytes: usize,
        response_bytes: usize,
    ) {
        let Some(metrics) = METRICS.get() else {
            return;
        };
        let rpc = RpcLabels {
            rpc_system: "grpc",
            rpc_service: "evaluator.FunctionEvaluator",
            rpc_method: "EvaluateFunction",
            rpc_grpc_status_code: status_code_label(code),
        };
        metrics
            .rpc_duration
            .get_or_create(&rpc)
            .observe(duration.as_secs_f64() * 1000.0);
        metrics
            .rpc_request_size
            .get_or_create(&rpc)
            .observe(request_bytes as f64);
        metrics
            .rpc_response_size
            .get_or_create(&rpc)
            .observe(response_bytes as f64);
        let function = FunctionLabels {
            image: self.image.clone(),
            evaluator: evaluator.to_owned(),
        };
        metrics
            .calls
            .get_or_create(&OutcomeLabels {
                image: self.image.clone(),
                evaluator: evaluator.to_owned(),
                outcome: outcome_label(code),
            })
            .inc();
        metrics
            .call_duration
            .get_or_create(&function)
            .observe(duration.as_secs_f64());
        metrics
            .request_bytes
            .get_or_create(&function)
            .inc_by(request_bytes as u64);
        metrics
            .response_bytes
            .get_or_create(&function)
            .inc_by(response_bytes as u64);
    }
}

impl Drop for CallMetrics {
    fn drop(&mut self) {
        if let Some(metrics) = METRICS.get() {
            metrics
                .in_flight
                .get_or_create(&ImageLabels {
                    image: std::mem::take(&mut self.image),
                })
                .dec();
        }
    }
}

/// A change of the FunctionConfig files was applied, or refused with `problems` problems.
pub fn function_configs_reloaded(problems: usize) {
    let Some(metrics) = METRICS.get() else {
        return;
    };
    let outcome = if problems == 0 { "applied" } else { "refused" };
    metrics
        .config_reloads
        .get_or_create(&ReloadLabels { outcome })
        .inc();
    metrics.config_load_errors.inc_by(problems as u64);
}

/// The FunctionConfigs now in force: how many have a section for each executor.
pub fn function_config_routes(counts: [(&'static str, usize); 3]) {
    let Some(metrics) = METRICS.get() else {
        return;
    };
    for (executor, count) in counts {
        metrics
            .config_routes
            .get_or_create(&ExecutorLabels { executor })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

/// `rpc.grpc.status_code`, the status as a number (OpenTelemetry's attribute).
fn status_code_label(code: tonic::Code) -> &'static str {
    const CODES: [&str; 17] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    ];
    CODES.get(code as usize).copied().unwrap_or("2")
}

/// The status as gRPC names it (`NOT_FOUND`).
pub fn outcome_label(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_past_the_cap_share_one_label() {
        let images = BoundedImages::new(2);
        assert_eq!(images.label("a"), "a");
        assert_eq!(images.label("b"), "b");
        assert_eq!(images.label("c"), OTHER_IMAGE);
        assert_eq!(images.label("a"), "a");
        assert_eq!(images.label(&"x".repeat(300)), OTHER_IMAGE);
    }

    #[test]
    fn rpc_metrics_have_opentelemetry_prometheus_names() {
        let metrics = Metrics::new(&MetricsConfig::default());
        let rpc = RpcLabels {
            rpc_system: "grpc",
            rpc_service: "evaluator.FunctionEvaluator",
            rpc_method: "EvaluateFunction",
            rpc_grpc_status_code: status_code_label(tonic::Code::NotFound),
        };
        metrics.rpc_duration.get_or_create(&rpc).observe(3.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
        assert!(
            text.contains(
                "rpc_server_duration_milliseconds_count{rpc_system=\"grpc\",\
                 rpc_service=\"evaluator.FunctionEvaluator\",rpc_method=\"EvaluateFunction\",\
                 rpc_grpc_status_code=\"5\"} 1"
            ),
            "{text}"
        );
    }
}
