//! Telemetry settings: the `telemetry:` keys of the layered configuration, which OpenTelemetry's
//! standard environment variables (`OTEL_*`, as Porch reads them) also set.

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

/// `telemetry:`; everything is off unless configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The `service.name` of the runner's spans (`OTEL_SERVICE_NAME`).
    pub service_name: String,
    /// How trace context is read from and written to calls (`OTEL_PROPAGATORS`):
    /// `tracecontext`, `baggage`, or `none`.
    pub propagators: Vec<String>,
    pub traces: TracesConfig,
    pub metrics: MetricsConfig,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            service_name: "krm-runner".to_owned(),
            propagators: vec!["tracecontext".to_owned(), "baggage".to_owned()],
            traces: TracesConfig::default(),
            metrics: MetricsConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TracesConfig {
    /// `OTEL_TRACES_EXPORTER`.
    pub exporter: TracesExporter,
    /// Where spans go (`OTEL_EXPORTER_OTLP_ENDPOINT`); absent: `http://localhost:4317` for
    /// gRPC, `http://localhost:4318` for HTTP (where `/v1/traces` is appended).
    pub endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub protocol: OtlpProtocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TracesExporter {
    #[default]
    None,
    Otlp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum OtlpProtocol {
    #[default]
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `OTEL_METRICS_EXPORTER`.
    pub exporter: MetricsExporter,
    /// The address `/metrics` is served on (`OTEL_EXPORTER_PROMETHEUS_HOST`).
    pub host: String,
    /// `OTEL_EXPORTER_PROMETHEUS_PORT`.
    pub port: u16,
    /// Distinct function images given their own label value; calls for images past these count
    /// under `other`, so that callers cannot grow the metrics without bound.
    pub max_images: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            exporter: MetricsExporter::None,
            host: "localhost".to_owned(),
            port: 9464,
            max_images: 100,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MetricsExporter {
    #[default]
    None,
    Prometheus,
}

/// The propagators `OTEL_PROPAGATORS` may name here.
pub const PROPAGATORS: [&str; 3] = ["tracecontext", "baggage", "none"];

impl TelemetryConfig {
    /// What is wrong beyond the types, one line each, naming the key.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.service_name.trim().is_empty() {
            problems.push("telemetry.service_name: empty".to_owned());
        }
        for (index, propagator) in self.propagators.iter().enumerate() {
            if !PROPAGATORS.contains(&propagator.as_str()) {
                problems.push(format!(
                    "telemetry.propagators[{index}]: {} is not one of {}",
                    krm_plugin_api::quoted(propagator),
                    PROPAGATORS.join(", ")
                ));
            }
        }
        if let Some(endpoint) = &self.traces.endpoint {
            let usable = endpoint.parse::<tonic::transport::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
            });
            if !usable {
                problems.push(format!(
                    "telemetry.traces.endpoint: {} is not an http:// or https:// URL such as \
                     http://localhost:4317",
                    krm_plugin_api::quoted(endpoint)
                ));
            }
        }
        if self.metrics.host.trim().is_empty() {
            problems.push("telemetry.metrics.host: empty".to_owned());
        }
        if self.metrics.max_images == 0 {
            problems.push("telemetry.metrics.max_images: must be at least 1".to_owned());
        }
        problems
    }
}

/// The name `krm-runner config` gives the values this provider sets.
pub const OTEL_ENV_NAME: &str = "OpenTelemetry environment (OTEL_*)";

/// OpenTelemetry's standard variables as `telemetry:` keys: one layer above the configuration
/// files and below `KRM_RUNNER_*`, so that a deployment written for Porch's runner works as is.
pub struct OtelEnv {
    variables: Vec<(String, String)>,
}

/// Each variable read, and the key it sets.
const VARIABLES: [(&str, &[&str]); 8] = [
    ("OTEL_SERVICE_NAME", &["service_name"]),
    ("OTEL_PROPAGATORS", &["propagators"]),
    ("OTEL_TRACES_EXPORTER", &["traces", "exporter"]),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", &["traces", "endpoint"]),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", &["traces", "protocol"]),
    ("OTEL_METRICS_EXPORTER", &["metrics", "exporter"]),
    ("OTEL_EXPORTER_PROMETHEUS_HOST", &["metrics", "host"]),
    ("OTEL_EXPORTER_PROMETHEUS_PORT", &["metrics", "port"]),
];

impl OtelEnv {
    pub fn from_process() -> Self {
        Self::from_variables(
            VARIABLES
                .iter()
                .filter_map(|(name, _)| Some((name.to_string(), std::env::var(name).ok()?))),
        )
    }

    pub fn from_variables(variables: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            variables: variables.into_iter().collect(),
        }
    }

    /// Whether no variable was set.
    pub fn is_empty(&self) -> bool {
        self.variables.is_empty()
    }
}

impl Provider for OtelEnv {
    fn metadata(&self) -> Metadata {
        Metadata::named(OTEL_ENV_NAME)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut telemetry = Dict::new();
        for (name, text) in &self.variables {
            let Some((_, path)) = VARIABLES.iter().find(|(known, _)| known == name) else {
                continue;
            };
            // The specification: an empty variable is as good as unset.
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let value = match name.as_str() {
                "OTEL_PROPAGATORS" => Value::from(
                    text.split(',')
                        .map(|item| Value::from(item.trim().to_owned()))
                        .collect::<Vec<_>>(),
                ),
                "OTEL_EXPORTER_PROMETHEUS_PORT" => text
                    .parse::<u16>()
                    .map_or_else(|_| Value::from(text.to_owned()), Value::from),
                _ => Value::from(text.to_owned()),
            };
            super::set_path(&mut telemetry, path, value);
        }
        let mut root = Dict::new();
        if !telemetry.is_empty() {
            root.insert("telemetry".to_owned(), Value::from(telemetry));
        }
        Ok(Profile::Default.collect(root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(variables: &[(&str, &str)]) -> TelemetryConfig {
        let variables = variables
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()));
        figment::Figment::new()
            .merge(OtelEnv::from_variables(variables))
            .extract_inner::<TelemetryConfig>("telemetry")
            .unwrap_or_default()
    }

    #[test]
    fn porch_variables_set_the_telemetry_keys() {
        let config = from(&[
            ("OTEL_SERVICE_NAME", "function-runner"),
            ("OTEL_PROPAGATORS", "tracecontext, baggage"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
            ("OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0"),
            ("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"),
            ("OTEL_UNRELATED", "x"),
        ]);
        assert_eq!(config.service_name, "function-runner");
        assert_eq!(config.propagators, ["tracecontext", "baggage"]);
        assert_eq!(config.traces.exporter, TracesExporter::Otlp);
        assert_eq!(
            config.traces.endpoint.as_deref(),
            Some("http://collector:4318")
        );
        assert_eq!(config.traces.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(config.metrics.exporter, MetricsExporter::Prometheus);
        assert_eq!(
            (config.metrics.host.as_str(), config.metrics.port),
            ("0.0.0.0", 9464)
        );
        assert!(config.problems().is_empty(), "{:?}", config.problems());
    }

    #[test]
    fn off_unless_configured_and_empty_variables_are_unset() {
        let config = from(&[("OTEL_TRACES_EXPORTER", ""), ("OTEL_METRICS_EXPORTER", " ")]);
        assert_eq!(config, TelemetryConfig::default());
        assert_eq!(config.traces.exporter, TracesExporter::None);
        assert_eq!(config.metrics.exporter, MetricsExporter::None);
    }
}
