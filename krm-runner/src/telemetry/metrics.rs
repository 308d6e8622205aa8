//! Metrics served for Prometheus at `/metrics` (OpenMetrics text): the OpenTelemetry RPC server
//! metrics under the names OpenTelemetry's Prometheus exporter gives them (`rpc_server_*`), and
//! the runner's own per function image and evaluator, and for FunctionConfigs.

use std::borrow::{Borrow, Cow};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use krm_plugin_loader::{Measurement, MeasurementKind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::TelemetryError;
use crate::cache::ResultCache;
use crate::config::telemetry::{MetricsConfig, MetricsExporter};

/// The label value of images past `telemetry.metrics.max_images`.
pub const OTHER_IMAGE: &str = OTHER_LABEL;

/// The value bounded labels take once a metric has as many distinct values as it keeps.
const OTHER_LABEL: &str = "other";

/// Image strings longer than this count as [`OTHER_IMAGE`] (an image reference is far shorter).
const MAX_IMAGE_LABEL_BYTES: usize = 256;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc_system: &'static str,
    rpc_service: Cow<'static, str>,
    rpc_method: Cow<'static, str>,
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
struct ReasonLabels {
    image: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    outcome: &'static str,
}

/// The rule is the operator's (a bounded set); the reason one of `trust::Refusal::short`'s.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    rule: String,
    outcome: &'static str,
    reason: String,
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
    policy_decisions: Family<DecisionLabels, Counter>,
    plugins: Arc<PluginMetrics>,
    rpc_methods: Bounded<String>,
    cache_hits: Family<ImageLabels, Counter>,
    cache_shared: Family<ImageLabels, Counter>,
    cache_misses: Family<ReasonLabels, Counter>,
    cache_evictions: Family<ReasonLabels, Counter>,
    cache_bytes: Gauge,
    cache_entries: Gauge,
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
    Histogram::new(growing_bounds(0.0005, 2.0, 18))
}

fn bytes() -> Histogram {
    Histogram::new(growing_bounds(256.0, 4.0, 10))
}

/// `count` bounds from `first`, each `factor` times the last. prometheus-client's
/// `exponential_buckets` computes them with `powf`, which alone links libm into
/// `krm-runner`: one library more to load at every `fn` call's start. With the factors used
/// here, powers of two, multiplying gives the same bounds exactly.
fn growing_bounds(first: f64, factor: f64, count: usize) -> impl Iterator<Item = f64> {
    std::iter::successors(Some(first), move |bound| Some(bound * factor)).take(count)
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
            policy_decisions: Family::default(),
            plugins: Arc::default(),
            rpc_methods: Bounded::new(MAX_RPC_METHODS),
            cache_hits: Family::default(),
            cache_shared: Family::default(),
            cache_misses: Family::default(),
            cache_evictions: Family::default(),
            cache_bytes: Gauge::default(),
            cache_entries: Gauge::default(),
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
        registry.register(
            "krm_policy_decisions",
            "Trust policy decisions by deciding rule (`default`: the policy's default; `none`: \
             no policy), outcome (allowed, denied) and reason",
            metrics.policy_decisions.clone(),
        );
        registry.register(
            "krm_cache_hits",
            "Calls answered from the result cache, by function image",
            metrics.cache_hits.clone(),
        );
        registry.register(
            "krm_cache_shared",
            "Calls answered by an identical call's run they waited for, by function image",
            metrics.cache_shared.clone(),
        );
        registry.register(
            "krm_cache_misses",
            "Calls the result cache did not answer, by function image and reason: \
             not_cacheable, new, expired, evicted, new_digest (the code changed), corrupt (a \
             disk entry that was not whole, discarded)",
            metrics.cache_misses.clone(),
        );
        registry.register(
            "krm_cache_evictions",
            "Answers removed from the result cache, by function image and reason: size, expired",
            metrics.cache_evictions.clone(),
        );
        registry.register_with_unit(
            "krm_cache_stored",
            "Size of the answers in the result cache",
            Unit::Bytes,
            metrics.cache_bytes.clone(),
        );
        registry.register(
            "krm_cache_entries",
            "Answers in the result cache",
            metrics.cache_entries.clone(),
        );
        registry.register_collector(Box::new(metrics.plugins.clone()));
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
struct BoundedImages(Bounded<String>);

impl BoundedImages {
    fn new(max: usize) -> Self {
        Self(Bounded::new(max))
    }

    fn label(&self, image: &str) -> String {
        if image.len() > MAX_IMAGE_LABEL_BYTES {
            return OTHER_IMAGE.to_owned();
        }
        if self.0.admit(image) {
            image.to_owned()
        } else {
            OTHER_IMAGE.to_owned()
        }
    }
}

/// The first `max` distinct values seen; later ones are not admitted.
#[derive(Debug)]
struct Bounded<T> {
    max: usize,
    seen: Mutex<HashSet<T>>,
}

impl<T: Eq + Hash> Bounded<T> {
    fn new(max: usize) -> Self {
        Self {
            max,
            seen: Mutex::default(),
        }
    }

    /// Whether `value` is among the first `max` distinct values (recording it if there is room).
    fn admit<Q>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = T> + ?Sized,
    {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains(value) {
            return true;
        }
        if seen.len() < self.max {
            seen.insert(value.to_owned());
            return true;
        }
        false
    }
}

/// Starts serving `/metrics` when `telemetry.metrics.exporter` says so, on a listener of its
/// own, with the result cache's admin route beside it when `cache` is given; returns the
/// address bound.
pub async fn start(
    config: &MetricsConfig,
    cache: Option<Arc<ResultCache>>,
) -> Result<Option<std::net::SocketAddr>, TelemetryError> {
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
    let mut router = axum::Router::new().route("/metrics", axum::routing::get(exposition));
    if let Some(cache) = cache {
        router = router.merge(crate::cache::admin_routes(cache));
    }
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

/// Counts one trust policy decision; nothing when metrics are off or no policy is configured.
pub fn policy_decision(decision: &crate::trust::Decision) {
    let Some(metrics) = METRICS.get() else {
        return;
    };
    if decision.rule == "none" {
        return;
    }
    // An allowed call's reason names its digest: only a refusal's reason is a label.
    let reason = if decision.allowed {
        String::new()
    } else {
        decision.reason.clone()
    };
    metrics
        .policy_decisions
        .get_or_create(&DecisionLabels {
            rule: decision.rule.clone(),
            outcome: decision.outcome(),
            reason,
        })
        .inc();
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
            rpc_service: Cow::Borrowed(EVALUATOR_SERVICE),
            rpc_method: Cow::Borrowed(EVALUATE_METHOD),
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

/// What the result cache did for one call of `image`: `hit`, `shared`, or a miss for `reason`.
pub fn cache_lookup(image: &str, result: &'static str, reason: &'static str) {
    let Some(metrics) = METRICS.get() else {
        return;
    };
    let image = metrics.images.label(image);
    match result {
        "hit" => metrics
            .cache_hits
            .get_or_create(&ImageLabels { image })
            .inc(),
        "shared" => metrics
            .cache_shared
            .get_or_create(&ImageLabels { image })
            .inc(),
        _ => metrics
            .cache_misses
            .get_or_create(&ReasonLabels { image, reason })
            .inc(),
    };
}

/// An answer of `image` left the result cache for `reason` (`size`, `expired`).
pub fn cache_eviction(image: &str, reason: &'static str) {
    if let Some(metrics) = METRICS.get() {
        let image = metrics.images.label(image);
        metrics
            .cache_evictions
            .get_or_create(&ReasonLabels { image, reason })
            .inc();
    }
}

/// The result cache now holds `entries` answers of `bytes` in all.
pub fn cache_stored(entries: u64, bytes: u64) {
    if let Some(metrics) = METRICS.get() {
        metrics
            .cache_entries
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
        metrics
            .cache_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
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
pub fn function_config_routes(counts: [(&'static str, usize); 4]) {
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

/// How many metrics one plugin may have.
const MAX_PLUGIN_METRICS: usize = 64;
/// How many labels a plugin's measurement may carry (besides `evaluator`).
const MAX_PLUGIN_LABELS: usize = 8;
/// Distinct label sets a plugin metric keeps before later ones count under `other`.
const MAX_PLUGIN_SERIES: usize = 500;
/// Label values longer than this count as `other`.
const MAX_PLUGIN_LABEL_BYTES: usize = 256;
/// Metric names (and label keys) plugins may use: `[a-z][a-z0-9_]*`, at most this long.
const MAX_PLUGIN_NAME_BYTES: usize = 64;
/// Refused measurements are logged once per plugin metric, for this many metrics in all.
const MAX_REFUSALS_LOGGED: usize = 1024;

type PluginLabels = Vec<(String, String)>;

/// The metrics plugins record through the host handle ([`plugin_measurement`]), each named
/// `krm_plugin_<plugin>_<name>` and labelled with the instance (`evaluator`); written out at
/// each scrape.
#[derive(Debug, Default)]
struct PluginMetrics {
    /// Plugin name, then the metric's name as the plugin gave it.
    families: Mutex<HashMap<String, HashMap<String, PluginFamily>>>,
    refusals_logged: Mutex<HashSet<(String, String)>>,
}

#[derive(Debug)]
struct PluginFamily {
    exported_name: String,
    help: String,
    series: Bounded<PluginLabels>,
    metric: PluginMetric,
}

#[derive(Debug)]
enum PluginMetric {
    Counter(Family<PluginLabels, Counter<f64, AtomicU64>>),
    Histogram(HistogramFamily<PluginLabels>),
    Gauge(Family<PluginLabels, Gauge<f64, AtomicU64>>),
}

impl PluginMetric {
    fn new(kind: MeasurementKind) -> Self {
        match kind {
            MeasurementKind::CounterAdd => Self::Counter(Family::default()),
            MeasurementKind::HistogramRecord => {
                Self::Histogram(Family::new_with_constructor(seconds))
            }
            MeasurementKind::GaugeSet => Self::Gauge(Family::default()),
        }
    }

    fn kind(&self) -> MeasurementKind {
        match self {
            Self::Counter(_) => MeasurementKind::CounterAdd,
            Self::Histogram(_) => MeasurementKind::HistogramRecord,
            Self::Gauge(_) => MeasurementKind::GaugeSet,
        }
    }

    fn record(&self, labels: &PluginLabels, value: f64) {
        match self {
            Self::Counter(family) => {
                family.get_or_create(labels).inc_by(value);
            }
            Self::Histogram(family) => family.get_or_create(labels).observe(value),
            Self::Gauge(family) => {
                family.get_or_create(labels).set(value);
            }
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder, name: &str, help: &str) -> std::fmt::Result {
        match self {
            Self::Counter(family) => {
                family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)
            }
            Self::Histogram(family) => {
                family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)
            }
            Self::Gauge(family) => {
                family.encode(encoder.encode_descriptor(name, help, None, family.metric_type())?)
            }
        }
    }
}

fn kind_name(kind: MeasurementKind) -> &'static str {
    match kind {
        MeasurementKind::CounterAdd => "a counter",
        MeasurementKind::HistogramRecord => "a histogram",
        MeasurementKind::GaugeSet => "a gauge",
    }
}

/// Whether `name` may name a plugin metric or label: `[a-z][a-z0-9_]*`, bounded.
fn is_metric_name(name: &str) -> bool {
    name.len() <= MAX_PLUGIN_NAME_BYTES
        && name
            .bytes()
            .next()
            .is_some_and(|byte| byte.is_ascii_lowercase())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_')
}

/// The plugin's name as a metric name part (plugin names may hold `-`).
fn metric_part(plugin: &str) -> String {
    plugin
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

impl PluginMetrics {
    fn record(
        &self,
        plugin: &str,
        instance: &str,
        measurement: &Measurement<'_>,
    ) -> Result<(), String> {
        let Measurement {
            kind,
            name,
            value,
            labels,
        } = *measurement;
        if !is_metric_name(name) {
            return Err(format!(
                "the name is not [a-z][a-z0-9_]* of at most {MAX_PLUGIN_NAME_BYTES} bytes"
            ));
        }
        if !value.is_finite() || (kind == MeasurementKind::CounterAdd && value < 0.0) {
            return Err(format!("{value} cannot be recorded in {}", kind_name(kind)));
        }
        if labels.len() > MAX_PLUGIN_LABELS {
            return Err(format!(
                "{} labels, at most {MAX_PLUGIN_LABELS} allowed",
                labels.len()
            ));
        }
        let mut series: PluginLabels = Vec::with_capacity(labels.len() + 1);
        series.push(("evaluator".to_owned(), instance.to_owned()));
        for (key, label_value) in labels {
            if !is_metric_name(key) || series.iter().any(|(seen, _)| seen == key) {
                return Err(format!(
                    "label key {key:?} is not [a-z][a-z0-9_]*, is used twice, or is `evaluator`"
                ));
            }
            series.push(((*key).to_owned(), (*label_value).to_owned()));
        }
        let mut families = self.families.lock().unwrap_or_else(PoisonError::into_inner);
        let plugin_families = families.entry(plugin.to_owned()).or_default();
        if !plugin_families.contains_key(name) {
            if plugin_families.len() >= MAX_PLUGIN_METRICS {
                return Err(format!(
                    "the plugin already has {MAX_PLUGIN_METRICS} metrics"
                ));
            }
            plugin_families.insert(
                name.to_owned(),
                PluginFamily {
                    exported_name: format!("krm_plugin_{}_{name}", metric_part(plugin)),
                    help: format!("Recorded by the {plugin} plugin"),
                    series: Bounded::new(MAX_PLUGIN_SERIES),
                    metric: PluginMetric::new(kind),
                },
            );
        }
        let family = &plugin_families[name];
        if family.metric.kind() != kind {
            return Err(format!(
                "it is {}, recorded as {}",
                kind_name(family.metric.kind()),
                kind_name(kind)
            ));
        }
        let bounded = series
            .iter()
            .skip(1)
            .all(|(_, value)| value.len() <= MAX_PLUGIN_LABEL_BYTES)
            && family.series.admit(&series);
        if !bounded {
            for (_, value) in series.iter_mut().skip(1) {
                OTHER_LABEL.clone_into(value);
            }
        }
        family.metric.record(&series, value);
        Ok(())
    }

    /// Logs a refused measurement, once per plugin metric.
    fn refused(&self, plugin: &str, instance: &str, name: &str, reason: &str) {
        let mut logged = self
            .refusals_logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (
            plugin.to_owned(),
            name.chars().take(MAX_PLUGIN_NAME_BYTES).collect(),
        );
        if logged.len() < MAX_REFUSALS_LOGGED && logged.insert(key) {
            tracing::warn!(
                plugin,
                evaluator = instance,
                metric = %krm_plugin_api::quoted(name),
                "telemetry: dropped the plugin's measurements of this metric: {reason}"
            );
        }
    }
}

impl Collector for PluginMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let families = self.families.lock().unwrap_or_else(PoisonError::into_inner);
        for family in families.values().flat_map(HashMap::values) {
            family
                .metric
                .encode(&mut encoder, &family.exported_name, &family.help)?;
        }
        Ok(())
    }
}

/// A measurement a plugin recorded through the host handle; ignored when metrics are off.
pub fn plugin_measurement(plugin: &str, instance: &str, measurement: &Measurement<'_>) {
    let Some(metrics) = METRICS.get() else {
        return;
    };
    if let Err(reason) = metrics.plugins.record(plugin, instance, measurement) {
        metrics
            .plugins
            .refused(plugin, instance, measurement.name, &reason);
    }
}

const EVALUATOR_SERVICE: &str = "evaluator.FunctionEvaluator";
const EVALUATE_METHOD: &str = "EvaluateFunction";
/// Distinct method names the other RPCs keep as labels; later ones count as `other`, so that
/// requests for made-up methods cannot grow the series without bound.
const MAX_RPC_METHODS: usize = 64;

/// Measures the RPCs other than EvaluateFunction (which [`CallMetrics`] measures, with its
/// message sizes) as `rpc_server_duration_milliseconds`: health checks, the catalog, the
/// ConfigHub executor. `services` are the served services' names; requests for others count
/// under `rpc_service="other"`.
#[derive(Clone)]
pub struct RpcMetricsLayer {
    services: Arc<[&'static str]>,
}

impl RpcMetricsLayer {
    pub fn new(services: &[&'static str]) -> Self {
        Self {
            services: services.into(),
        }
    }
}

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RpcMetricsService {
            inner,
            services: self.services.clone(),
        }
    }
}

#[derive(Clone)]
pub struct RpcMetricsService<S> {
    inner: S,
    services: Arc<[&'static str]>,
}

type BoxedResponse<R, E> = std::pin::Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B, R> tower::Service<tonic::codegen::http::Request<B>> for RpcMetricsService<S>
where
    S: tower::Service<
            tonic::codegen::http::Request<B>,
            Response = tonic::codegen::http::Response<R>,
        >,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures_util::future::Either<S::Future, BoxedResponse<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
        use futures_util::future::Either;
        let Some(metrics) = METRICS.get() else {
            return Either::Left(self.inner.call(request));
        };
        let path = request.uri().path();
        let (service, method) = path
            .strip_prefix('/')
            .and_then(|path| path.split_once('/'))
            .unwrap_or(("", ""));
        if service == EVALUATOR_SERVICE && method == EVALUATE_METHOD {
            return Either::Left(self.inner.call(request));
        }
        let (service, method) = match self.services.iter().find(|known| **known == service) {
            Some(known) if metrics.rpc_methods.admit(method) => {
                (Cow::Borrowed(*known), Cow::Owned(method.to_owned()))
            }
            _ => (Cow::Borrowed(OTHER_LABEL), Cow::Borrowed(OTHER_LABEL)),
        };
        let started = Instant::now();
        let answer = self.inner.call(request);
        Either::Right(Box::pin(async move {
            let response = answer.await;
            if let Ok(response) = &response {
                // A handler's error comes back as a trailers-only response, its status in the
                // headers; a success's status is in the trailers, and is OK.
                let code = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|value| value.to_str().ok()?.parse::<i32>().ok())
                    .map_or(tonic::Code::Ok, tonic::Code::from);
                metrics
                    .rpc_duration
                    .get_or_create(&RpcLabels {
                        rpc_system: "grpc",
                        rpc_service: service,
                        rpc_method: method,
                        rpc_grpc_status_code: status_code_label(code),
                    })
                    .observe(started.elapsed().as_secs_f64() * 1000.0);
            }
            response
        }))
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
    fn growing_bounds_are_prometheus_clients_exponential_buckets() {
        use prometheus_client::metrics::histogram::exponential_buckets;
        for (first, factor, count) in [(0.0005, 2.0, 18), (256.0, 4.0, 10)] {
            let ours: Vec<f64> = growing_bounds(first, factor, count).collect();
            let theirs: Vec<f64> = exponential_buckets(first, factor, count as u16).collect();
            assert_eq!(ours, theirs);
        }
    }

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
            rpc_service: Cow::Borrowed(EVALUATOR_SERVICE),
            rpc_method: Cow::Borrowed(EVALUATE_METHOD),
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
