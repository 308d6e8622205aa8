//! Test-only evaluator plugin. Images it answers (anything else is declined):
//! - `testkit/echo`: returns its input, and the instance name as log;
//! - `testkit/panic`: panics inside `evaluate`;
//! - `testkit/abort`: aborts the process it runs in;
//! - `testkit/sleep:<ms>`: waits, honouring cancellation;
//! - `testkit/log`: emits a `tracing` event and echoes;
//! - `testkit/telemetry`: through the host handle, adds 1 to its counter `calls` (label
//!   `kind=telemetry`), records 0.25 in its histogram `work_seconds`, sets its gauge `level` to
//!   7, tries a measurement the runner must drop (a name Prometheus cannot take), and opens the
//!   span `testkit.work` under the call's trace (attributes `testkit.items` = 3,
//!   `testkit.note` = "hello"), whose W3C context it echoes as log (`TRACEPARENT=...`);
//! - `testkit/pure-sleep:<ms>`: declared pure (the runner may cache it); adds 1 to its counter
//!   `pure_runs` (label `image`), waits honouring cancellation, then echoes;
//! - `testkit/pure-fail`: declared pure; adds 1 to `pure_runs` and fails;
//! - any image a FunctionConfig routes here: echoes, with the instance name and the route (JSON)
//!   as log, so tests see what the runner told the evaluator;
//! - warm-up hints are logged as `testkit warm-up <image> <route JSON>`.
//!
//!
//! Typed functions it contributes (ConfigHub's model, through the plugin ABI):
//! - `list-names [suffix]`: readonly, an AttributeValueList of each resource's name + suffix;
//! - `stamp VALUE`: mutating, sets annotation `testkit.example.com/stamp` (through the builtin
//!   `set-annotation`, as a plugin may reuse the executor's functions);
//! - `sleep MILLIS`: waits, stopping when the call is cancelled;
//! - `explode`: panics;
//! - `get-replicas`: clashes with the builtin of that name; answers `testkit`.
//!
//! `panic_on_build: true` makes building the instance panic.

use std::sync::Arc;
use std::time::Duration;

use krm_function_executor::api::{AttributeValue, DataType, OutputType, ResourceInfo};
use krm_function_executor::args::{ArgValue, Arguments};
use krm_function_executor::functions::definition::{
    Definition, FunctionKind, KUBERNETES, Options, no_parameters, signature,
};
use krm_function_executor::functions::resources::identified;
use krm_function_executor::functions::{
    Call, FunctionError, Outcome, Output, Stopped, TypedFunction,
};
use krm_function_executor::plugin::PluginFunctions;
use krm_function_executor::registry::PathRegistry;
use krm_function_executor::signature::ParameterBuilder;
use krm_function_executor::{Executor, Toolchain, TypedSignature};
use krm_plugin_api::{
    BuildContext, CacheIdentity, CallContext, ConfigError, EvalError, EvalResponse, Evaluator,
    FunctionConfigRoute, Plugin, Telemetry, TypedFunctionSet, export_plugin,
};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestkitConfig {
    #[serde(default)]
    panic_on_build: bool,
}

pub struct Testkit {
    instance: String,
    typed: PluginFunctions,
    telemetry: Telemetry,
}

/// The images of the pure function that sleeps.
const PURE_SLEEP: &str = "testkit/pure-sleep:";

impl Testkit {
    /// Counts a run of a pure function, so that tests see how often the cache let it run.
    fn count_pure_run(&self, image: &str) {
        self.telemetry
            .counter_add("pure_runs", 1.0, &[("image", image)]);
    }

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
            // What no unwinding contains: only a process boundary does (`isolated`).
            "testkit/abort" => std::process::abort(),
            "testkit/telemetry" => Ok(EvalResponse::new(
                resource_list.to_vec(),
                self.record_telemetry(context).into_bytes(),
            )),
            "testkit/log" => {
                tracing::warn!(instance = %self.instance, "testkit log event");
                Ok(EvalResponse::new(resource_list.to_vec(), Vec::new()))
            }
            "testkit/pure-fail" => {
                self.count_pure_run(image);
                Err(EvalError::failed("testkit/pure-fail fails, as asked"))
            }
            other if other.starts_with(PURE_SLEEP) => {
                self.count_pure_run(image);
                let ms = other[PURE_SLEEP.len()..].parse().unwrap_or(0);
                match context.wait_cancelled(Duration::from_millis(ms)) {
                    Some(reason) => Err(reason.to_error(image)),
                    None => Ok(EvalResponse::new(resource_list.to_vec(), Vec::new())),
                }
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

    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let pure =
            route.is_none() && (image.starts_with(PURE_SLEEP) || image == "testkit/pure-fail");
        pure.then(|| CacheIdentity {
            pure: true,
            code: image.to_owned(),
            unnamed: false,
        })
    }

    fn warm_up(&self, image: &str, route: Option<&FunctionConfigRoute>) {
        let route = serde_json::to_string(&route).unwrap_or_default();
        tracing::warn!("testkit warm-up {image} {route}");
    }

    fn typed_functions(&self) -> Option<&dyn TypedFunctionSet> {
        Some(&self.typed)
    }
}

fn attribute(resource: &ResourceInfo, value: serde_json::Value) -> AttributeValue {
    AttributeValue {
        resource: resource.clone(),
        path: "metadata.name".to_owned(),
        in_live_state: false,
        attribute_name: String::new(),
        data_type: DataType::String,
        info: None,
        value,
        comment: String::new(),
    }
}

fn list_names(call: &Call) -> Result<Outcome, FunctionError> {
    let suffix = call.arguments.str("suffix").unwrap_or_default();
    let names = identified(call)?
        .into_iter()
        .map(|(_, info)| {
            let name = format!("{}{suffix}", info.resource_name_without_scope);
            attribute(info, serde_json::Value::from(name))
        })
        .collect();
    Ok(Outcome::output(Output::Attributes(names)))
}

fn sleep(call: &Call) -> Result<Outcome, FunctionError> {
    let millis = call
        .arguments
        .get("millis")
        .and_then(ArgValue::as_int)
        .unwrap_or(0);
    match call
        .cancellation
        .wait_cancelled(Duration::from_millis(millis.unsigned_abs()))
    {
        Some(_) => Err(Stopped.into()),
        None => Ok(Outcome::default()),
    }
}

fn explode(_: &Call) -> Result<Outcome, FunctionError> {
    panic!("testkit's explode was asked to panic")
}

fn clashing_get_replicas(call: &Call) -> Result<Outcome, FunctionError> {
    let values = identified(call)?
        .into_iter()
        .map(|(_, info)| attribute(info, serde_json::Value::from("testkit")))
        .collect();
    Ok(Outcome::output(Output::Attributes(values)))
}

/// `stamp VALUE`: the builtin `set-annotation` with a fixed key.
struct Stamp {
    signature: TypedSignature,
    set_annotation: Arc<dyn TypedFunction>,
}

impl TypedFunction for Stamp {
    fn signature(&self) -> &TypedSignature {
        &self.signature
    }

    fn run(&self, call: &Call) -> Result<Outcome, FunctionError> {
        let value = call.arguments.str("value").unwrap_or_default();
        let arguments = Arguments(vec![
            (
                "annotation-key".to_owned(),
                ArgValue::String("testkit.example.com/stamp".to_owned()),
            ),
            (
                "annotation-value".to_owned(),
                ArgValue::String(value.to_owned()),
            ),
        ]);
        self.set_annotation.run(&Call {
            arguments: &arguments,
            ..*call
        })
    }
}

static LIST_NAMES: Definition = Definition {
    name: "list-names",
    description: "testkit: the name of every resource, with a suffix",
    parameters: |_| {
        vec![
            ParameterBuilder::new("suffix", DataType::String, "appended to each name")
                .optional()
                .pattern("^[a-z0-9-]*$"),
        ]
    },
    kind: FunctionKind::Readonly {
        result: "names",
        description: "resource names",
        output: OutputType::AttributeValueList,
    },
    toolchains: KUBERNETES,
    run: list_names,
    options: Options::DEFAULT,
};

static SLEEP: Definition = Definition {
    name: "sleep",
    description: "testkit: waits, unless cancelled",
    parameters: |_| {
        vec![
            ParameterBuilder::new("millis", DataType::Int, "how long").range(Some(0), Some(60_000)),
        ]
    },
    kind: FunctionKind::Quiet,
    toolchains: KUBERNETES,
    run: sleep,
    options: Options::DEFAULT,
};

static EXPLODE: Definition = Definition {
    name: "explode",
    description: "testkit: panics",
    parameters: no_parameters,
    kind: FunctionKind::Quiet,
    toolchains: KUBERNETES,
    run: explode,
    options: Options::DEFAULT,
};

static CLASHING_GET_REPLICAS: Definition = Definition {
    name: "get-replicas",
    description: "testkit: clashes with the builtin get-replicas",
    parameters: no_parameters,
    kind: FunctionKind::Readonly {
        result: "replicas",
        description: "always testkit",
        output: OutputType::AttributeValueList,
    },
    toolchains: KUBERNETES,
    run: clashing_get_replicas,
    options: Options::DEFAULT,
};

fn typed_functions() -> PluginFunctions {
    let builtin = Executor::kubernetes();
    let set_annotation = builtin
        .function("set-annotation")
        .expect("the executor has set-annotation")
        .clone();
    let toolchain = Toolchain::KubernetesYaml;
    let mut functions: Vec<Arc<dyn TypedFunction>> = [&LIST_NAMES, &SLEEP, &EXPLODE]
        .into_iter()
        .map(|definition| definition.function(toolchain))
        .collect();
    // Stamp keeps the builtin it calls: a function with state implements TypedFunction itself.
    functions.insert(
        1,
        Arc::new(Stamp {
            signature: signature(
                "stamp",
                "testkit: annotates every resource with testkit.example.com/stamp",
                vec![
                    ParameterBuilder::new("value", DataType::String, "the stamp")
                        .pattern("^[a-z0-9-]+$"),
                ],
                None,
                true,
            ),
            set_annotation,
        }),
    );
    functions.push(CLASHING_GET_REPLICAS.function(toolchain));
    PluginFunctions::with_registry(PathRegistry::kubernetes(), functions)
        .expect("testkit's typed functions have distinct names")
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
            typed: typed_functions(),
            telemetry: context.telemetry(),
        })
    }
}

export_plugin!(TestkitPlugin);
