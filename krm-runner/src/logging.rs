//! The runner's log: `tracing` to stderr, text or JSON.

use std::io::IsTerminal;

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

/// How log lines are written (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// A level name (`info`), Porch's klog verbosity (`0`..`5`), or a tracing filter directive.
pub fn filter(level: &str) -> Result<EnvFilter, String> {
    let directive = match level.trim() {
        "0" | "1" | "2" => "info",
        "3" | "4" => "debug",
        "5" => "trace",
        other => other,
    };
    EnvFilter::try_new(directive)
        .map_err(|e| format!("{level:?} is not a log level or filter: {e}"))
}

pub fn init(level: &str, format: LogFormat) {
    let filter = filter(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
