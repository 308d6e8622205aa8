//! Observability: OpenTelemetry traces and Prometheus metrics, configured the OpenTelemetry way
//! (`OTEL_*` variables, as Porch's runner reads them) or by the `telemetry:` keys. Both are off
//! unless configured, and then cost one check per call.

pub mod metrics;
pub mod traces;

use std::sync::Arc;

use crate::cache::ResultCache;
use crate::config::TelemetryConfig;

/// Why telemetry could not start; the runner then does not serve.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{field}: cannot set up the span exporter: {reason}")]
    Exporter { field: &'static str, reason: String },
    #[error("{field}: cannot serve metrics on {address}")]
    Bind {
        field: &'static str,
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// Starts what `config` turns on, the metrics listener with `cache`'s admin route; inside the
/// async runtime that serves.
pub async fn start(
    config: &TelemetryConfig,
    cache: Option<Arc<ResultCache>>,
) -> Result<(), TelemetryError> {
    traces::start(config)?;
    if let Some(address) = metrics::start(&config.metrics, cache).await? {
        tracing::info!(%address, "serving metrics for Prometheus at /metrics");
    }
    Ok(())
}
