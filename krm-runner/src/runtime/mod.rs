//! Loads the configured plugins, builds their instances and runs calls on the served one: where
//! plugin libraries are found ([`discovery`]), the instance graph ([`instances`]), one call's
//! run ([`calls`]) and the process-wide table of running calls ([`running`]).

mod calls;
mod discovery;
mod instances;
mod running;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use krm_plugin_api::{
    Answer, CacheIdentity, EvalError, EvalResponse, FunctionConfigExecutor, FunctionConfigRoute,
    FunctionSignature, ProbeOutcome,
};
use krm_plugin_loader::{EvaluatorInstance, HostCallContext};
use krm_runner_function_config::version::Constraint;

use self::calls::evaluate_on;
pub use self::calls::{Call, CancelOnDrop, evaluate_here, requested_constraint};
pub use self::discovery::{locate_plugin, search_dirs};
pub use self::instances::function_instance;
use self::instances::{Instances, chain_positions, find_cycle, functions_of, lock};
pub use self::running::{cancel_running_calls, running_call_count, track_call};
use crate::cache::{self, Cacheable, Identity, ResultCache};
use crate::config::Config;
use crate::routing::{Plan, Router, Store};
use crate::telemetry::metrics;
use crate::telemetry::traces::CallTrace;
use crate::trust::{Decision, Denied, Policy};

/// A running chain of evaluator instances, and the FunctionConfigs routing calls into it.
pub struct Runtime {
    served: Arc<EvaluatorInstance>,
    instances: Vec<InstanceReport>,
    built: BTreeMap<String, Arc<EvaluatorInstance>>,
    store: Arc<Store>,
    policy: Arc<Policy>,
    /// The result cache, when serving with it on.
    cache: Option<Arc<ResultCache>>,
    /// What builds the other instances when a call first reaches them, for a runtime started
    /// [`Runtime::for_one_call`].
    _on_first_use: Option<Arc<Mutex<Instances>>>,
}

/// What `krm-runner plugins` shows for one instance.
#[derive(Debug, Clone)]
pub struct InstanceReport {
    pub name: String,
    pub plugin_file: Option<PathBuf>,
    pub plugin_name: String,
    pub plugin_version: String,
    pub abi_version: u32,
    pub description: String,
    /// Instances it delegates to, in lookup order.
    pub delegates: Vec<String>,
    /// Its place in the served chain (0 = the served instance), if it is reachable.
    pub position: Option<usize>,
    pub disabled: bool,
}

/// What the runtime is started for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Serving calls: plugins start what they need (pods, background tasks).
    Serve,
    /// Serving calls as a long-running server: as [`Purpose::Serve`], and the calls of the
    /// instances configured `isolated` run in worker processes (see `crate::worker`).
    ServeIsolated,
    /// Only checking the configuration (`config check`, or a configuration with host-level
    /// problems): plugins build without side effects, told by the `validate_only` setting.
    Check,
}

impl Runtime {
    /// Loads and builds everything, reporting every problem, one line each: the plugins', all
    /// of them, and the FunctionConfig files'. `config check` and start-up both come here.
    pub fn start(config: &Config, purpose: Purpose) -> Result<Self, Vec<String>> {
        let mut instances = Instances::new(config, purpose);
        let enabled = instances.enabled();
        // Every library loads before any instance builds, so that a broken file is reported
        // even when an instance before it fails to build.
        for name in &enabled {
            instances.load(name);
        }
        for name in &enabled {
            instances.build(name);
        }
        let Instances {
            disabled,
            services,
            built,
            mut reports,
            mut problems,
            ..
        } = instances;
        for name in &disabled {
            if services.slots.contains_key(name) {
                reports.push(InstanceReport {
                    name: name.clone(),
                    plugin_file: None,
                    plugin_name: config.evaluators[name].plugin.clone(),
                    plugin_version: String::new(),
                    abi_version: 0,
                    description: String::new(),
                    delegates: Vec::new(),
                    position: None,
                    disabled: true,
                });
            }
        }
        let lookups = std::mem::take(
            &mut *services
                .lookups
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if let Some(cycle) = find_cycle(&lookups) {
            problems.push(format!(
                "evaluators: delegation loops: {}",
                cycle.join(" -> ")
            ));
        }
        let router = Arc::new(Router::new(&config.function_configs.executors, |name| {
            built.get(name).cloned()
        }));
        let store = Store::load(
            &config.function_configs,
            &config.default_image_prefix,
            router.clone(),
        )
        .map_err(|file_problems| problems.extend(in_function_config_paths(file_problems)));
        let policy = config
            .policy()
            .map_err(|policy_problems| problems.extend(policy_problems));
        let served = built.get(&config.serve).cloned();
        let (Ok(store), Ok(policy), Some(served), true) =
            (store, policy, served, problems.is_empty())
        else {
            // An instance that failed to build has said why; otherwise `serve` names none.
            if problems.is_empty() {
                problems.extend(config.served_instance_problem());
            }
            return Err(problems);
        };
        Store::warn_of_missing_default(&config.function_configs);
        let positions = chain_positions(&config.serve, &lookups);
        for report in &mut reports {
            report.delegates = lookups.get(&report.name).cloned().unwrap_or_default();
            report.position = positions.get(&report.name).copied();
        }
        reports.sort_by_key(|r| (r.position.unwrap_or(usize::MAX), r.name.clone()));
        for (executor, name) in router.missing_instances() {
            let skipped = match executor {
                // Its functions may be another listed instance's.
                FunctionConfigExecutor::GoExecutor => {
                    "sections naming a function no other instance listed implements"
                }
                _ => "sections",
            };
            tracing::warn!(
                "function_configs.executors.{}: no evaluator instance named {name:?}; \
                 FunctionConfigs' {} {skipped} are skipped",
                executor.field(),
                executor.field()
            );
        }
        // A process making one call, or checking, has nothing to answer again.
        let cache = match purpose {
            Purpose::ServeIsolated => ResultCache::new(&config.cache),
            Purpose::Serve | Purpose::Check => None,
        };
        Ok(Self {
            served,
            instances: reports,
            built,
            store,
            policy: Arc::new(policy),
            cache,
            _on_first_use: None,
        })
    }

    /// The runtime for a process that makes one call (`krm-runner eval`). Only the served
    /// instance builds now; each instance it delegates to builds when the call first reaches
    /// it, so a call the chain's first instance serves loads no other plugin, and a problem
    /// with an instance the call never reaches is not this call's. FunctionConfigs route calls
    /// by the functions the executors' instances implement, so with any in force everything
    /// starts as [`Runtime::start`] starts it.
    pub fn for_one_call(config: &Config) -> Result<Self, Vec<String>> {
        // Routing is consulted only when the store holds FunctionConfigs, and then it is
        // rebuilt with every instance below.
        let router = Arc::new(Router::new(&config.function_configs.executors, |_| None));
        let store = Store::load(
            &config.function_configs,
            &config.default_image_prefix,
            router,
        )
        .map_err(|problems| in_function_config_paths(problems).collect::<Vec<_>>())?;
        if store.has_function_configs() {
            return Self::start(config, Purpose::Serve);
        }
        if let Some(problem) = config.served_instance_problem() {
            return Err(vec![problem]);
        }
        Store::warn_of_missing_default(&config.function_configs);
        let policy = config.policy()?;
        Self::start_served_alone(config, store, policy)
    }

    fn start_served_alone(
        config: &Config,
        store: Arc<Store>,
        policy: Policy,
    ) -> Result<Self, Vec<String>> {
        let instances = Arc::new(Mutex::new(Instances::new(config, Purpose::Serve)));
        let mut building = lock(&instances);
        for name in building.enabled() {
            let instances = Arc::downgrade(&instances);
            let slot = building.services.slots[&name].clone();
            slot.fill_on_first_use(Box::new(move || {
                let instances = instances.upgrade().ok_or("the runner is stopping")?;
                let mut instances = lock(&instances);
                let known = instances.problems.len();
                instances.build(&name);
                match instances.built.get(&name) {
                    Some(instance) => Ok(instance.clone()),
                    None => Err(instances.problems[known..].join("; ")),
                }
            }));
        }
        building.build(&config.serve);
        let (served, problems) = (
            building.built.get(&config.serve).cloned(),
            std::mem::take(&mut building.problems),
        );
        let reports = building.reports.clone();
        let built = building.built.clone();
        drop(building);
        match served {
            Some(served) if problems.is_empty() => Ok(Self {
                served,
                instances: reports,
                built,
                store,
                policy: Arc::new(policy),
                cache: None,
                _on_first_use: Some(instances),
            }),
            _ => Err(problems),
        }
    }

    /// The FunctionConfigs in force.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// A built instance by name.
    pub fn instance(&self, name: &str) -> Option<&Arc<EvaluatorInstance>> {
        self.built.get(name)
    }

    pub fn instances(&self) -> &[InstanceReport] {
        &self.instances
    }

    /// The instances the served one reaches, in chain order.
    pub fn served_chain(&self) -> Vec<&str> {
        self.instances
            .iter()
            .filter(|i| i.position.is_some())
            .map(|i| i.name.as_str())
            .collect()
    }

    /// Every function some instance implements itself, with the instance's name.
    pub fn functions(&self) -> Vec<(String, FunctionSignature)> {
        functions_of(&self.built)
    }

    /// The trust policy in force.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Whether a call for `image` may run: its tag constraint (the context's) read, then the
    /// trust policy's decision ([`crate::trust`]), counted in the metrics. The one door to
    /// [`Runtime::evaluate`], which takes only what this lets through, so that no evaluator
    /// sees a call the policy did not allow.
    pub async fn admit(&self, context: &HostCallContext, image: &str) -> Result<Admitted, Refused> {
        let constraint = requested_constraint(image, context.tag()).map_err(Refused::Invalid)?;
        match self
            .policy
            .admit(image, constraint.as_ref(), context.deadline())
            .await
        {
            Ok(allowed) => {
                metrics::policy_decision(&allowed.decision);
                Ok(Admitted {
                    run: allowed.image,
                    constraint,
                    decision: allowed.decision,
                })
            }
            Err(denied) => {
                metrics::policy_decision(&denied.decision());
                Err(Refused::Denied(denied))
            }
        }
    }

    /// What a call for `image` would do, decided as [`Runtime::evaluate`] decides but without
    /// running anything: each evaluator on the way says whether it would serve or why not.
    pub fn probe(&self, image: &str) -> ProbeOutcome {
        let plan = self.store.router().plan(image, None);
        let mut declined = Vec::new();
        for step in plan.steps {
            let mut resolution = step.instance.probe(image, Some(&step.route));
            declined.append(&mut resolution.declined);
            if resolution.answer.is_some() {
                return ProbeOutcome {
                    declined,
                    answer: resolution.answer,
                };
            }
        }
        let mut resolution = self.served.probe(image, None);
        declined.append(&mut resolution.declined);
        ProbeOutcome {
            declined,
            answer: resolution.answer,
        }
    }

    /// The result cache, when this runtime serves with one.
    pub fn cache(&self) -> Option<&Arc<ResultCache>> {
        self.cache.as_ref()
    }

    /// Runs one call [`Runtime::admit`] allowed: on the evaluators the image's FunctionConfig
    /// names, then (when none serves it) on the served instance; see [`evaluate_on`]. They get
    /// the image the policy pinned, when it pinned one. A call the result cache may answer
    /// goes through it; the second value says what it did.
    pub async fn evaluate(
        &self,
        context: Arc<HostCallContext>,
        trace: &CallTrace,
        admitted: Admitted,
        resource_list: Vec<u8>,
    ) -> (Result<EvalResponse, EvalError>, cache::Outcome) {
        let Admitted {
            run: image,
            constraint,
            ..
        } = admitted;
        let routing = trace.child("route");
        let plan = self.store.router().plan(&image, constraint.as_ref());
        if routing.is_recording() {
            let routed: Vec<String> = plan
                .steps
                .iter()
                .map(|step| step.instance.name().to_owned())
                .collect();
            routing.set_list("krm.route.evaluators", &routed);
            routing.set("krm.route.served_chain", self.served.name().to_owned());
        }
        routing.end(None);
        let call = |plan: Plan, context: Arc<HostCallContext>| Call {
            plan,
            served: self.served.clone(),
            context,
            trace: trace.clone(),
        };
        let Some(cache) = &self.cache else {
            let call = call(plan, context);
            return (
                evaluate_on(call, image, resource_list).await,
                cache::Outcome::Bypass,
            );
        };
        let decision = self.cache_decision(cache, &plan, &image, context.tag(), &resource_list);
        let Some((cacheable, named)) = decision else {
            ResultCache::bypassed(&image);
            let call = call(plan, context);
            return (
                evaluate_on(call, image, resource_list).await,
                cache::Outcome::Bypass,
            );
        };
        let run = || {
            evaluate_on(
                call(plan.clone(), context.clone()),
                image.clone(),
                resource_list.clone(),
            )
        };
        cache
            .answer(&context, &image, cacheable, run, || named.code())
            .await
    }

    /// Whether the result cache may answer a call for `image`: the instance that would serve
    /// it (found as [`Runtime::probe`] finds it) says whether the function is pure and what
    /// code runs; an instance that cannot tell before the call leaves it uncached. `None`:
    /// run it uncached.
    fn cache_decision<'a>(
        &'a self,
        cache: &ResultCache,
        plan: &'a Plan,
        image: &'a str,
        tag: &str,
        request: &[u8],
    ) -> Option<(Cacheable, Named<'a>)> {
        let routed = plan
            .steps
            .iter()
            .map(|step| (&step.instance, step.image.as_str(), Some(&step.route)));
        let candidates = routed.chain(std::iter::once((&self.served, image, None)));
        for (instance, asked, route) in candidates {
            let answer = instance.probe(asked, route).answer;
            let (name, surely) = match answer {
                None => continue,
                Some(Answer::MayServe(name)) => (name, false),
                Some(Answer::Serves(name)) => (name, true),
            };
            let (Some(serving), Some(report)) = (
                self.built.get(&name),
                self.instances.iter().find(|report| report.name == name),
            ) else {
                return None;
            };
            let named = Named {
                instance: serving,
                image: asked,
                route,
                surely,
            };
            let marked = route.and_then(marked_ttl);
            let (identity, durable) = named.identity()?;
            let route = route
                .and_then(|route: &FunctionConfigRoute| serde_json::to_string(route).ok())
                .unwrap_or_default();
            let decision = cache.decide(
                &Identity {
                    instance: &name,
                    plugin: &report.plugin_name,
                    plugin_version: &report.plugin_version,
                    code: &identity.code,
                    route: &route,
                    image: asked,
                    tag,
                    request,
                },
                identity.pure,
                durable,
                marked,
            );
            return match decision {
                cache::Decision::Cache(cacheable) => Some((cacheable, named)),
                cache::Decision::Bypass => None,
            };
        }
        None
    }
}

/// The instance that would serve a call, as the result cache asks it what code runs: before
/// the call, and again after it.
struct Named<'a> {
    instance: &'a EvaluatorInstance,
    image: &'a str,
    route: Option<&'a FunctionConfigRoute>,
    /// Whether it surely serves the image (its probe said so).
    surely: bool,
}

impl Named<'_> {
    /// Its code identity, and whether it named one. An instance that cannot tell whether it
    /// serves claims the call by naming the code it would run; one that surely serves and
    /// names none is known by its plugin's name and version alone. `None`: not cacheable
    /// (also when it says it cannot tell what code runs).
    fn identity(&self) -> Option<(CacheIdentity, bool)> {
        match self.instance.cache_identity(self.image, self.route) {
            Some(identity) if identity.unnamed => None,
            Some(identity) => Some((identity, true)),
            None if self.surely => Some((CacheIdentity::default(), false)),
            None => None,
        }
    }

    /// The code it names now.
    fn code(&self) -> Option<String> {
        self.identity().map(|(identity, _)| identity.code)
    }
}

/// The time-to-live the route's executor section marks its calls cacheable with
/// (`cache.timeToLive`); `None` when it marks none. Validation refused unusable values.
fn marked_ttl(route: &FunctionConfigRoute) -> Option<Duration> {
    let cache = route.settings.get("cache")?;
    let caching: krm_runner_function_config::ResultCaching =
        krm_runner_function_config::config_file::from_json_value(cache.clone()).ok()?;
    caching.ttl().ok()
}

/// A call [`Runtime::admit`] let through: the image its evaluators get, and the decision.
#[derive(Debug)]
pub struct Admitted {
    run: String,
    constraint: Option<Constraint>,
    pub decision: Decision,
}

impl Admitted {
    /// The image the evaluators run: the requested one, or the digest the policy pinned.
    pub fn image(&self) -> &str {
        &self.run
    }
}

/// A call [`Runtime::admit`] refused.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The tag constraint is unusable (INVALID_ARGUMENT).
    #[error(transparent)]
    Invalid(EvalError),
    /// The trust policy refused it (PERMISSION_DENIED; UNAVAILABLE when the registry could not
    /// be asked).
    #[error(transparent)]
    Denied(Denied),
}

impl Refused {
    /// The gRPC status code the caller gets.
    pub fn grpc_code(&self) -> i32 {
        match self {
            Refused::Invalid(error) => error.kind.grpc_code(),
            Refused::Denied(denied) if denied.refusal.is_registry() => {
                krm_plugin_api::ErrorKind::Unavailable.grpc_code()
            }
            // PERMISSION_DENIED, which no evaluator answers and so no ErrorKind names.
            Refused::Denied(_) => 7,
        }
    }

    /// The decision, when the policy made one.
    pub fn decision(&self) -> Option<Decision> {
        match self {
            Refused::Invalid(_) => None,
            Refused::Denied(denied) => Some(denied.decision()),
        }
    }
}

/// The FunctionConfig files' problems, as configuration problems of the field naming them.
fn in_function_config_paths(problems: Vec<String>) -> impl Iterator<Item = String> {
    problems
        .into_iter()
        .map(|problem| format!("function_configs.paths: {problem}"))
}
