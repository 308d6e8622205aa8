//! Testing a plugin in its own `cargo test`, without a `.so` or a runner: the plugin is built
//! and called through the same ABI path the runner uses (config deserialised and checked by
//! the SDK, panics contained, errors and responses crossing the ABI types), with a call
//! context whose deadline, cancellation, route and tag constraint the test controls, and a
//! host whose settings and other evaluator instances the test chooses.
//!
//! Enable it for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! krm-plugin-api = { path = "...", features = ["testing"] }
//! ```
//!
//! ```
//! use krm_plugin_api::testing::PluginTester;
//! # use krm_plugin_api::{BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator, Plugin};
//! # #[derive(serde::Deserialize, schemars::JsonSchema)]
//! # struct Config { greeting: String }
//! # struct Hello(String);
//! # impl Evaluator for Hello {
//! #     fn evaluate(&self, _: &CallContext<'_>, image: &str, input: &[u8]) -> Result<EvalResponse, EvalError> {
//! #         if image != "hello" { return Err(EvalError::declined_because(image, "only hello")); }
//! #         Ok(EvalResponse::new(input.to_vec(), self.0.clone().into_bytes()))
//! #     }
//! # }
//! # struct HelloPlugin;
//! # impl Plugin for HelloPlugin {
//! #     const NAME: &'static str = "hello";
//! #     const VERSION: &'static str = "1.0.0";
//! #     const DESCRIPTION: &'static str = "answers image `hello`";
//! #     type Config = Config;
//! #     type Evaluator = Hello;
//! #     fn build(config: Config, _: &BuildContext) -> Result<Hello, ConfigError> { Ok(Hello(config.greeting)) }
//! # }
//!
//! let evaluator = PluginTester::new()
//!     .build::<HelloPlugin>("hello", serde_json::json!({"greeting": "hi"}))
//!     .unwrap();
//! let response = evaluator.evaluate("hello", b"items: []\n").unwrap();
//! assert_eq!(response.log, b"hi");
//! assert_eq!(response.served_by.as_deref(), Some("hello"));
//!
//! let typo = PluginTester::new().build::<HelloPlugin>("hello", serde_json::json!({"greting": "hi"}));
//! assert!(typo.err().unwrap().to_string().contains("greeting"));
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::host::{EvaluatorInstance, EvaluatorSlot, HostCallContext, HostServices, PluginModule};
use crate::{
    CancelReason, ConfigError, EvalError, EvalResponse, FunctionConfigRoute, FunctionSignature,
    Plugin, ProbeOutcome, Resolution,
};

/// The host a plugin under test is built by: runner settings and the instances built so far
/// (which later instances reach with [`crate::BuildContext::evaluator`]).
#[derive(Default)]
pub struct PluginTester {
    host: Arc<TestHost>,
}

#[derive(Default)]
struct TestHost {
    settings: Mutex<HashMap<String, String>>,
    slots: Mutex<HashMap<String, Arc<EvaluatorSlot>>>,
}

impl HostServices for TestHost {
    fn setting(&self, key: &str) -> Option<String> {
        lock(&self.settings).get(key).cloned()
    }

    fn evaluator(&self, _asking: &str, name: &str) -> Option<Arc<EvaluatorSlot>> {
        lock(&self.slots).get(name).cloned()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PluginTester {
    /// A host with no settings and no instances.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a runner-wide setting (`default_image_prefix`, `max_message_bytes`,
    /// `validate_only`) for the instances built from now on.
    pub fn setting(self, key: &str, value: &str) -> Self {
        lock(&self.host.settings).insert(key.to_owned(), value.to_owned());
        self
    }

    /// Builds an instance named `instance` of plugin `P` from its `config:` section, as the
    /// runner would. Instances built earlier by this tester are reachable from it by name.
    pub fn build<P: Plugin>(
        &self,
        instance: &str,
        config: serde_json::Value,
    ) -> Result<TestEvaluator, ConfigError> {
        let module = PluginModule::linked_in::<P>();
        let built =
            Arc::new(module.build(P::NAME, instance, &config.to_string(), self.host.clone())?);
        let slot = EvaluatorSlot::new(instance);
        slot.fill(built.clone());
        lock(&self.host.slots).insert(instance.to_owned(), slot);
        Ok(TestEvaluator { instance: built })
    }
}

/// A built instance under test.
pub struct TestEvaluator {
    instance: Arc<EvaluatorInstance>,
}

impl TestEvaluator {
    /// Runs one call with no deadline, no route and no tag constraint.
    pub fn evaluate(&self, image: &str, resource_list: &[u8]) -> Result<EvalResponse, EvalError> {
        self.call(image).run(resource_list)
    }

    /// A call whose context the test sets up before running it.
    pub fn call<'a>(&'a self, image: &'a str) -> TestCall<'a> {
        TestCall {
            evaluator: self,
            image,
            deadline: None,
            cancel: None,
            route: None,
            tag: String::new(),
        }
    }

    /// The functions the instance declares (see [`crate::Evaluator::functions`]).
    pub fn functions(&self) -> Vec<FunctionSignature> {
        self.instance.functions()
    }

    /// What a call for `image` would do (see [`crate::Evaluator::probe`]).
    pub fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> ProbeOutcome {
        self.instance.probe(image, route)
    }

    /// What the instance would run for `image` under the tag constraint `tag`.
    pub fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        self.instance.resolve(image, tag, route)
    }

    /// Runs every example the instance's functions declare
    /// ([`FunctionSignature::examples`]) and compares each output with the one declared (as
    /// YAML values, so layout does not matter). Panics naming every example that differs.
    pub fn check_examples(&self) {
        let mut failures = Vec::new();
        let mut checked = 0;
        for function in self.functions() {
            for example in &function.examples {
                checked += 1;
                let image = function.images.first().unwrap_or(&function.name);
                let outcome = self.evaluate(image, example.input.as_bytes());
                let problem = match outcome {
                    Err(error) => Some(format!("failed: {error}")),
                    Ok(response) => same_yaml(&example.output, &response.resource_list)
                        .err()
                        .map(|actual| {
                            format!("expected\n{}\ngot\n{actual}", example.output.trim_end())
                        }),
                };
                if let Some(problem) = problem {
                    failures.push(format!(
                        "{} example {:?}: {problem}",
                        function.name, example.description
                    ));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {checked} examples differ:\n{}",
            failures.len(),
            failures.join("\n\n")
        );
    }
}

/// `Err(actual text)` unless both parse as YAML to the same value.
fn same_yaml(expected: &str, actual: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(actual).into_owned();
    let parse = |text: &str| yaml_serde::from_str::<serde_json::Value>(text).ok();
    match (parse(expected), parse(&text)) {
        (Some(expected), Some(actual)) if expected == actual => Ok(()),
        _ => Err(text),
    }
}

/// One call being set up; [`TestCall::run`] runs it on the current thread.
pub struct TestCall<'a> {
    evaluator: &'a TestEvaluator,
    image: &'a str,
    deadline: Option<Duration>,
    cancel: Option<(Duration, CancelReason)>,
    route: Option<FunctionConfigRoute>,
    tag: String,
}

impl TestCall<'_> {
    /// The caller's deadline, `after` from the start of the call; when it passes the call is
    /// cancelled with [`CancelReason::DeadlineExceeded`], as the runner does.
    pub fn deadline(mut self, after: Duration) -> Self {
        self.deadline = Some(after);
        self
    }

    /// Cancels the call `after` from its start, for `reason`; with [`Duration::ZERO`], before
    /// the evaluator is called.
    pub fn cancel_after(mut self, after: Duration, reason: CancelReason) -> Self {
        self.cancel = Some((after, reason));
        self
    }

    /// The FunctionConfig route that chose this evaluator.
    pub fn route(mut self, route: FunctionConfigRoute) -> Self {
        self.route = Some(route);
        self
    }

    /// The tag constraint the caller asked for (see [`crate::CallContext::requested_tag`]).
    pub fn tag(mut self, constraint: &str) -> Self {
        self.tag = constraint.to_owned();
        self
    }

    /// Runs the call. The response names the instance that served, as the runner's does.
    pub fn run(self, resource_list: &[u8]) -> Result<EvalResponse, EvalError> {
        let deadline = self.deadline.map(|after| Instant::now() + after);
        let context = HostCallContext::with_tag(deadline, self.tag);
        if let Some((Duration::ZERO, reason)) = self.cancel {
            context.cancel(reason);
        }
        let timers = [
            self.deadline
                .map(|after| (after, CancelReason::DeadlineExceeded)),
            self.cancel,
        ];
        let done = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let cancellers: Vec<_> = timers
            .into_iter()
            .flatten()
            .map(|(after, reason)| {
                let (context, done) = (context.clone(), done.clone());
                std::thread::spawn(move || {
                    let (finished, changed) = &*done;
                    let finished = lock(finished);
                    let (finished, _) = changed
                        .wait_timeout_while(finished, after, |finished| !*finished)
                        .unwrap_or_else(PoisonError::into_inner);
                    if !*finished {
                        context.cancel(reason);
                    }
                })
            })
            .collect();
        let outcome = self.evaluator.instance.evaluate(
            &context,
            self.route.as_ref(),
            self.image,
            resource_list,
        );
        *lock(&done.0) = true;
        done.1.notify_all();
        for canceller in cancellers {
            let _ = canceller.join();
        }
        outcome
    }
}
