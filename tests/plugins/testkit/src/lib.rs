//! Test-only evaluator plugin. Images it answers (anything else is declined):
//! - `testkit/echo`: returns its input, and the instance name as log;
//! - `testkit/panic`: panics inside `evaluate`;
//! - `testkit/sleep:<ms>`: waits, honouring cancellation;
//! - `testkit/log`: emits a `tracing` event and echoes;
//! - `testkit/telemetry`: through the host handle, adds 1 to its counter `calls` (label
//!   `kind=telemetry`), records 0.25 in its histogram `work_seconds`, sets its gauge `level` to
//!   7, tries a measurement the runner must drop (a name Prometheus cannot take), and opens the
//!   span `testkit.work` under the call's trace (attributes `testkit.items` = 3,
//!   `testkit.note` = "hello"), whose W3C context it echoes as log (`TRACEPARENT=...`);
//! - any image a FunctionConfig routes here: echoes, with the instance name and the route (JSON)
//!   as log, so tests see what the runner told the evaluator;
//! - warm-up hints are logged as `testkit warm-up <image> <route JSON>`.
//!
//! `panic_on_build: true` makes building the instance panic.

use std::time::Duration;

use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator, Plugin, Route,
    Telemetry, export_plugin,
};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestkitConfig {
    #[serde(default)]
    panic_on_build: bool,
}

pub struct Testkit {
    instance: String,
    telemetry: Telemetry,
}

impl Testkit {
    fn record_telemetry(&self, context: &CallContext<'_>) -> String {
        self.telemetry
            .counter_add("calls", 1.0, &[("kind", "telemetry")]);
        self.telemetry.histogram_record("work_seconds", 0.25, &[]);
        self.telemetry.gauge_set("level", 7.0, &[]);
        self.telemetry.counter_add("Not A Name", 1.0, &[]);
        let span = self
            .telemetry
            .start_span(context.trace_context().as_ref(), "testkit.work");
        span.set_attribute("testkit.items", 3_i64);
        span.set_attribute("testkit.note", "hello");
        span.trace_context()
            .map(|context| format!("TRACEPARENT={}", context.traceparent))
            .unwrap_or_default()
    }
}

impl Evaluator for Testkit {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        if let Some(route) = context.route() {
            let route = serde_json::to_string(&route).unwrap_or_default();
            return Ok(EvalResponse::new(
                resource_list.to_vec(),
                format!("{} {route}", self.instance).into_bytes(),
            ));
        }
        match image {
            "testkit/echo" => Ok(EvalResponse::new(
                resource_list.to_vec(),
                self.instance.clone().into_bytes(),
            )),
            "testkit/panic" => panic!("testkit was asked to panic"),
            "testkit/telemetry" => Ok(EvalResponse::new(
                resource_list.to_vec(),
                self.record_telemetry(context).into_bytes(),
            )),
            "testkit/log" => {
                tracing::warn!(instance = %self.instance, "testkit log event");
                Ok(EvalResponse::new(resource_list.to_vec(), Vec::new()))
            }
            other => match other
                .strip_prefix("testkit/sleep:")
                .and_then(|ms| ms.parse().ok())
            {
                Some(ms) => match context.wait_cancelled(Duration::from_millis(ms)) {
                    Some(reason) => Err(reason.to_error(image)),
                    None => Ok(EvalResponse::new(resource_list.to_vec(), Vec::new())),
                },
                None => Err(EvalError::not_found(image)),
            },
        }
    }

    fn warm_up(&self, image: &str, route: Option<&Route>) {
        let route = serde_json::to_string(&route).unwrap_or_default();
        tracing::warn!("testkit warm-up {image} {route}");
    }
}

pub struct TestkitPlugin;

impl Plugin for TestkitPlugin {
    const NAME: &'static str = "testkit";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "test-only: echoes, sleeps, logs or panics on request";
    type Config = TestkitConfig;
    type Evaluator = Testkit;

    fn build(config: TestkitConfig, context: &BuildContext) -> Result<Testkit, ConfigError> {
        if config.panic_on_build {
            panic!("testkit was asked to panic while building");
        }
        Ok(Testkit {
            instance: context.instance_name().to_owned(),
            telemetry: context.telemetry(),
        })
    }
}

export_plugin!(TestkitPlugin);
