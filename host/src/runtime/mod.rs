//! Loads the configured plugins, builds their instances and runs calls on the served one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use krm_plugin_api::process::{self, CallInFlight};
use krm_plugin_api::{
    CancelReason, Chain, ErrorKind, EvalError, EvalResponse, FunctionConfigExecutor,
    FunctionSignature, Measurement, NameMatch, ProbeOutcome, TraceContext,
};
use krm_plugin_loader::{
    EvaluatorInstance, EvaluatorSlot, HostCallContext, HostServices, HostSpan, LayoutChecks,
    PluginLibrary,
};
use krm_runner_function_config::ImageRef;
use krm_runner_function_config::version::Constraint;

use crate::catalog::{Catalog, asking_order};
use crate::config::Config;
use crate::routing::{Plan, Router, Store};
use crate::telemetry::traces::CallTrace;

/// A running chain of evaluator instances, and the FunctionConfigs routing calls into it.
pub struct Runtime {
    served: Arc<EvaluatorInstance>,
    instances: Vec<InstanceReport>,
    built: BTreeMap<String, Arc<EvaluatorInstance>>,
    store: Arc<Store>,
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

/// The plugin library file a `plugin:` value names.
pub fn library_file_name(plugin: &str) -> String {
    format!("libkrm_plugin_{}.so", plugin.replace('-', "_"))
}

pub(crate) fn locate_plugin(plugin: &str, dirs: &[PathBuf]) -> Result<PathBuf, String> {
    if plugin.contains('/') || plugin.ends_with(".so") {
        let path = PathBuf::from(plugin);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{plugin} does not exist"))
        };
    }
    let file = library_file_name(plugin);
    dirs.iter()
        .map(|dir| dir.join(&file))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            let searched = dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>();
            format!(
                "{plugin} not found in plugin_dirs [{}] (looked for {file})",
                searched.join(", ")
            )
        })
}

/// `plugin_dirs`, then the places an installed or freshly built runner keeps its plugins,
/// relative to the running executable (symbolic links resolved, so a link on PATH to a build
/// folder works): its own folder (a cargo build folder, or an image's `/home/nonroot`), then
/// `<prefix>/lib/krm-runner` for `<prefix>/bin/krm-runner` (what `deploy/install.sh` lays out).
pub fn search_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = config.plugin_dirs.clone();
    if let Ok(exe) = std::env::current_exe() {
        dirs.extend(installed_plugin_dirs(&exe));
    }
    dirs
}

/// The plugin folders that belong with the executable at `exe`.
fn installed_plugin_dirs(exe: &Path) -> Vec<PathBuf> {
    let Some(own) = exe.parent() else {
        return Vec::new();
    };
    let mut dirs = vec![own.to_owned()];
    if let Some(prefix) = own.parent() {
        dirs.push(prefix.join("lib").join(INSTALLED_PLUGIN_FOLDER));
    }
    dirs
}

/// The folder under `<prefix>/lib` holding an installed runner's plugins.
const INSTALLED_PLUGIN_FOLDER: &str = "krm-runner";

struct Services {
    settings: HashMap<&'static str, String>,
    slots: HashMap<String, Arc<EvaluatorSlot>>,
    lookups: Mutex<BTreeMap<String, Vec<String>>>,
}

impl HostServices for Services {
    fn setting(&self, key: &str) -> Option<String> {
        self.settings.get(key).cloned()
    }

    fn evaluator(&self, asking: &str, name: &str) -> Option<Arc<EvaluatorSlot>> {
        let slot = self.slots.get(name)?.clone();
        self.lookups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(asking.to_owned())
            .or_default()
            .push(name.to_owned());
        Some(slot)
    }

    fn record(&self, plugin: &str, instance: &str, measurement: &Measurement<'_>) {
        crate::telemetry::metrics::plugin_measurement(plugin, instance, measurement);
    }

    fn start_span(
        &self,
        plugin: &str,
        instance: &str,
        parent: Option<&TraceContext>,
        name: &str,
    ) -> Option<Box<dyn HostSpan>> {
        crate::telemetry::traces::plugin_span(plugin, instance, parent, name)
    }
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

/// Plugin libraries loaded and evaluator instances built as they are asked for, with every
/// problem met on the way.
struct Instances {
    config: Arc<Config>,
    purpose: Purpose,
    dirs: Vec<PathBuf>,
    layout_checks: LayoutChecks,
    disabled: BTreeSet<String>,
    libraries: HashMap<PathBuf, Arc<PluginLibrary>>,
    /// Each instance's library, once loaded; `None` when it could not be.
    loaded: BTreeMap<String, Option<Arc<PluginLibrary>>>,
    services: Arc<Services>,
    /// Instances asked to build so far (built or not), so that each builds once.
    attempted: BTreeSet<String>,
    built: BTreeMap<String, Arc<EvaluatorInstance>>,
    reports: Vec<InstanceReport>,
    problems: Vec<String>,
}

impl Instances {
    fn new(config: &Config, purpose: Purpose) -> Self {
        let services = Arc::new(Services {
            settings: HashMap::from([
                ("default_image_prefix", config.default_image_prefix.clone()),
                ("max_message_bytes", config.max_message_bytes.to_string()),
                ("validate_only", (purpose == Purpose::Check).to_string()),
            ]),
            slots: config
                .evaluators
                .keys()
                .map(|name| (name.clone(), EvaluatorSlot::new(name.clone())))
                .collect(),
            lookups: Mutex::default(),
        });
        let disabled: BTreeSet<String> = config.disabled.iter().cloned().collect();
        for name in &disabled {
            if let Some(slot) = services.slots.get(name) {
                slot.disable();
            }
        }
        Self {
            config: Arc::new(config.clone()),
            purpose,
            dirs: search_dirs(config),
            layout_checks: LayoutChecks::in_user_cache(),
            disabled,
            libraries: HashMap::new(),
            loaded: BTreeMap::new(),
            services,
            attempted: BTreeSet::new(),
            built: BTreeMap::new(),
            reports: Vec::new(),
            problems: Vec::new(),
        }
    }

    /// The configured instances that are not disabled, in name order.
    fn enabled(&self) -> Vec<String> {
        self.config
            .evaluators
            .keys()
            .filter(|name| !self.disabled.contains(*name))
            .cloned()
            .collect()
    }

    /// Loads the library of instance `name` (each file once, however many instances use it).
    fn load(&mut self, name: &str) -> Option<Arc<PluginLibrary>> {
        if let Some(loaded) = self.loaded.get(name) {
            return loaded.clone();
        }
        let plugin = &self.config.evaluators[name].plugin;
        let library = match locate_plugin(plugin, &self.dirs) {
            Ok(path) => {
                let key = std::fs::canonicalize(&path).unwrap_or(path.clone());
                match self.libraries.get(&key) {
                    Some(library) => Some(library.clone()),
                    None => match PluginLibrary::load(&path, &self.layout_checks) {
                        Ok(library) => {
                            let layout_check = if library.layout_check_remembered() {
                                "remembered"
                            } else {
                                "done"
                            };
                            tracing::debug!(
                                plugin = %path.display(),
                                layout_check = %layout_check,
                                "plugin loaded"
                            );
                            let library = Arc::new(library);
                            self.libraries.insert(key, library.clone());
                            Some(library)
                        }
                        Err(error) => {
                            self.problems
                                .push(format!("evaluators.{name}.plugin: {error}"));
                            None
                        }
                    },
                }
            }
            Err(problem) => {
                self.problems
                    .push(format!("evaluators.{name}.plugin: {problem}"));
                None
            }
        };
        self.loaded.insert(name.to_owned(), library.clone());
        library
    }

    /// Builds instance `name` from its loaded library, once.
    fn build(&mut self, name: &str) {
        if !self.attempted.insert(name.to_owned()) {
            return;
        }
        let Some(library) = self.load(name) else {
            return;
        };
        let config_json = self.config.evaluators[name].config.to_string();
        match library.build(name, &config_json, self.services.clone()) {
            Ok(instance) => match self.isolated(name, Arc::new(instance), &library, config_json) {
                Ok(instance) => {
                    self.services.slots[name].fill(instance.clone());
                    self.built.insert(name.to_owned(), instance);
                }
                Err(problem) => self
                    .problems
                    .push(format!("evaluators.{name}.isolated: {problem}")),
            },
            Err(error) => self.problems.extend(
                error
                    .problems()
                    .iter()
                    .map(|problem| format!("evaluators.{name}.config: {problem}")),
            ),
        }
        let info = library.info();
        self.reports.push(InstanceReport {
            name: name.to_owned(),
            plugin_file: Some(library.path().to_owned()),
            plugin_name: info.name.clone(),
            plugin_version: info.version.clone(),
            abi_version: info.abi_version,
            description: info.description.clone(),
            delegates: Vec::new(),
            position: None,
            disabled: false,
        });
    }

    /// `instance` as the runner serves it: itself, or, when it is `isolated` and this runtime
    /// serves as a server, an instance that runs its calls in workers building the same.
    fn isolated(
        &self,
        name: &str,
        instance: Arc<EvaluatorInstance>,
        library: &PluginLibrary,
        config_json: String,
    ) -> Result<Arc<EvaluatorInstance>, String> {
        if self.purpose != Purpose::ServeIsolated || !self.config.evaluators[name].isolated {
            return Ok(instance);
        }
        let settings = self
            .services
            .settings
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.clone()))
            .collect();
        crate::worker::plugin::isolate(
            instance,
            library.path().to_owned(),
            config_json,
            settings,
            &self.config,
        )
    }

    /// Builds instance `name` and every instance it looked up while building, and theirs.
    fn build_with_delegates(&mut self, name: &str) {
        let mut pending = vec![name.to_owned()];
        while let Some(name) = pending.pop() {
            if self.attempted.contains(&name) || self.disabled.contains(&name) {
                continue;
            }
            self.build(&name);
            let lookups = self
                .services
                .lookups
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            pending.extend(lookups.get(&name).into_iter().flatten().cloned());
        }
    }
}

/// Every function the given instances implement themselves, with the instance's name, in the
/// order given.
fn functions_of<'i>(
    instances: impl IntoIterator<Item = (&'i String, &'i Arc<EvaluatorInstance>)>,
) -> Vec<(String, FunctionSignature)> {
    instances
        .into_iter()
        .flat_map(|(name, instance)| {
            instance
                .functions()
                .into_iter()
                .map(move |f| (name.clone(), f))
        })
        .collect()
}

/// The instance that runs `krm-runner fn NAME`, picked as [`Catalog::find`] picks it, but
/// building only the instances it takes to know, in [`asking_order`], each with its
/// delegates: up to the first that has a function of that short name (asked for that one
/// function, not its list). An image name, or a name nothing implements, needs them all.
/// `Ok(Err(catalog))` when none implements it.
pub fn function_instance(
    config: &Config,
    name: &str,
) -> Result<Result<Arc<EvaluatorInstance>, Catalog>, Vec<String>> {
    let mut instances = Instances::new(config, Purpose::Serve);
    let mut by_image = None;
    let enabled = instances.enabled();
    for candidate in asking_order(&enabled, name, String::as_str) {
        instances.build_with_delegates(candidate);
        if !instances.problems.is_empty() {
            return Err(instances.problems);
        }
        let Some(instance) = instances.built.get(candidate) else {
            continue;
        };
        match instance.function(name).and_then(|f| f.matched_by(name)) {
            Some(NameMatch::ShortName) => return Ok(Ok(instance.clone())),
            Some(NameMatch::Image) if by_image.is_none() => by_image = Some(instance.clone()),
            _ => {}
        }
    }
    Ok(by_image.ok_or_else(|| {
        Catalog::new(functions_of(
            enabled
                .iter()
                .filter_map(|name| Some((name, instances.built.get(name)?))),
        ))
    }))
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
        let served = built.get(&config.serve).cloned();
        let (Ok(store), Some(served), true) = (store, served, problems.is_empty()) else {
            // An instance that failed to build has said why; otherwise `serve` names none.
            if problems.is_empty() {
                problems.extend(config.served_instance_problem());
            }
            return Err(problems);
        };
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
        Ok(Self {
            served,
            instances: reports,
            built,
            store,
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
        Self::start_served_alone(config, store)
    }

    fn start_served_alone(config: &Config, store: Arc<Store>) -> Result<Self, Vec<String>> {
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

    /// Runs one call: on the evaluators the image's FunctionConfig names, then (when none
    /// serves it) on the served instance; see [`evaluate_on`]. A call carrying a tag constraint
    /// (the context's) must name an untagged image, and the constraint must parse.
    pub async fn evaluate(
        &self,
        context: Arc<HostCallContext>,
        trace: &CallTrace,
        image: String,
        resource_list: Vec<u8>,
    ) -> Result<EvalResponse, EvalError> {
        let constraint = requested_constraint(&image, context.tag())?;
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
        let call = Call {
            plan,
            served: self.served.clone(),
            context,
            trace: trace.clone(),
        };
        evaluate_on(call, image, resource_list).await
    }
}

/// The call's tag constraint, read: `None` without one; INVALID_ARGUMENT when it does not parse
/// or the image already names a tag or digest.
pub fn requested_constraint(image: &str, tag: &str) -> Result<Option<Constraint>, EvalError> {
    if tag.is_empty() {
        return Ok(None);
    }
    let constraint = Constraint::parse(tag)
        .map_err(|error| EvalError::invalid_input(format!("tag of {image:?}: {error}")))?;
    let reference = ImageRef::parse(image, "");
    if !reference.tag.is_empty() || reference.digest.is_some() {
        return Err(EvalError::invalid_input(format!(
            "image {image:?} already names a version; the tag constraint {tag:?} applies to \
             untagged images only"
        )));
    }
    Ok(Some(constraint))
}

/// Runs one call on a blocking thread, so that slow evaluators never stall the async workers.
/// When the deadline passes, the context is cancelled (evaluators kill their work from the
/// cancellation callback, before this returns) and the answer is DEADLINE_EXCEEDED at once:
/// waiting for the evaluator's own return could let the caller's deadline pass first.
async fn evaluate_on(
    call: Call,
    image: String,
    resource_list: Vec<u8>,
) -> Result<EvalResponse, EvalError> {
    let context = call.context.clone();
    let label = image.clone();
    let running = RunningCall::register(&context);
    // The call's log span (naming its trace, when traced) goes with it to the blocking thread.
    let span = tracing::Span::current();
    let call = tokio::task::spawn_blocking(move || {
        let _running = running;
        let _entered = span.enter();
        let outcome = run_plan(&call, &image, &resource_list);
        if resource_list.len() >= LARGE_CALL_BYTES {
            release_free_memory();
        }
        outcome
    });
    await_call(call, &context, &label).await
}

/// Runs a call without a deadline on this thread, for a process that makes that one call
/// (`krm-runner fn`): it needs no async runtime, and no thread besides its own.
pub fn evaluate_here(
    call: &Call,
    image: &str,
    resource_list: &[u8],
) -> Result<EvalResponse, EvalError> {
    debug_assert!(call.context.deadline().is_none(), "nothing would keep it");
    run_plan(call, image, resource_list)
}

/// One call's evaluators: the routed ones, then the served instance.
pub struct Call {
    pub plan: Plan,
    pub served: Arc<EvaluatorInstance>,
    pub context: Arc<HostCallContext>,
    pub trace: CallTrace,
}

/// Runs `instance` under a span of its own, which the evaluator receives as the call's trace
/// context.
fn evaluate_traced(
    instance: &EvaluatorInstance,
    call: &Call,
    route: Option<&krm_plugin_api::FunctionConfigRoute>,
    image: &str,
    resource_list: &[u8],
) -> Result<EvalResponse, EvalError> {
    let span = call.trace.child("evaluate");
    span.lend_to(&call.context);
    let outcome = instance.evaluate(&call.context, route, image, resource_list);
    if span.is_recording() {
        span.set("krm.evaluator", instance.name().to_owned());
        span.set(
            "krm.function.image",
            krm_plugin_api::quoted(image).bounded().into_owned(),
        );
        let (answer, error) = match &outcome {
            Ok(_) => ("served", None),
            Err(error) if error.kind == ErrorKind::NotFound => ("declined", None),
            Err(_) => ("failed", Some("failed")),
        };
        span.set("krm.outcome", answer);
        span.end(error);
    }
    outcome
}

/// Tries the routed evaluators in order (one that declines passes the call on), then the
/// served instance; the answer lists every instance that declined, and a NOT_FOUND answer why
/// each did.
fn run_plan(call: &Call, image: &str, resource_list: &[u8]) -> Result<EvalResponse, EvalError> {
    let Call {
        plan,
        served,
        context,
        ..
    } = call;
    let mut chain = Chain::default();
    for reason in &plan.unsatisfied {
        chain.add_reason(reason.clone());
    }
    for step in &plan.steps {
        let outcome = evaluate_traced(
            &step.instance,
            call,
            Some(&step.route),
            &step.image,
            resource_list,
        );
        let served_here = outcome.is_ok();
        if let ControlFlow::Break(answer) = chain.answer(step.instance.name(), &step.image, outcome)
        {
            if step.resolved && served_here {
                context.set_resolved(&step.image);
            }
            return answer;
        }
    }
    let outcome = evaluate_traced(served, call, None, image, resource_list);
    if let ControlFlow::Break(answer) = chain.answer(served.name(), image, outcome) {
        return answer;
    }
    // A constraint nobody named in a reason (no evaluator knows the image) is still said.
    let tag = context.tag();
    if !tag.is_empty() && !chain.reasons().iter().any(|reason| reason.contains(tag)) {
        chain.add_reason(format!(
            "no evaluator has a version satisfying tag constraint {}",
            krm_plugin_api::quoted(tag)
        ));
    }
    Err(chain.all_declined(image))
}

/// Calls at least this large leave big freed blocks behind in the allocator.
pub const LARGE_CALL_BYTES: usize = 1 << 20;

/// Hands freed memory back to the system. glibc keeps freed blocks in per-thread arenas, so
/// after a few multi-megabyte ResourceLists on different blocking threads an idle runner would
/// hold hundreds of MiB it no longer uses. (Plugins share the process's allocator.)
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heap structures.
    unsafe {
        libc::malloc_trim(0);
    }
}

async fn await_call(
    call: tokio::task::JoinHandle<Result<EvalResponse, EvalError>>,
    context: &HostCallContext,
    image: &str,
) -> Result<EvalResponse, EvalError> {
    let deadline = context.deadline().map(tokio::time::Instant::from_std);
    let joined = tokio::select! {
        joined = call => joined,
        () = sleep_until(deadline) => {
            context.cancel(CancelReason::DeadlineExceeded);
            return Err(CancelReason::DeadlineExceeded.to_error(image));
        }
    };
    joined.unwrap_or_else(|error| {
        Err(EvalError::internal(format!(
            "evaluator task failed: {error}"
        )))
    })
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Calls whose evaluators have not returned yet (their processes may still run).
static RUNNING_CALLS: Mutex<Option<RunningCalls>> = Mutex::new(None);

#[derive(Default)]
struct RunningCalls {
    next_id: u64,
    contexts: HashMap<u64, Arc<HostCallContext>>,
}

/// The FunctionConfig files' problems, as configuration problems of the field naming them.
fn in_function_config_paths(problems: Vec<String>) -> impl Iterator<Item = String> {
    problems
        .into_iter()
        .map(|problem| format!("function_configs.paths: {problem}"))
}

fn lock(instances: &Mutex<Instances>) -> std::sync::MutexGuard<'_, Instances> {
    instances.lock().unwrap_or_else(PoisonError::into_inner)
}

fn running_calls() -> std::sync::MutexGuard<'static, Option<RunningCalls>> {
    RUNNING_CALLS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call on its blocking thread, registered until its evaluators return: shutdown waits for
/// these, a forced exit cancels them, and the orphan sweep leaves alone the processes they
/// may own.
struct RunningCall {
    id: u64,
    _orphans: CallInFlight,
}

/// Counts a call that is not an EvaluateFunction (a typed-function sequence) among the calls
/// shutdown waits for and cancels when its grace period ends, until the guard is dropped.
pub fn track_call(context: &Arc<HostCallContext>) -> impl Drop + Send + 'static {
    RunningCall::register(context)
}

impl RunningCall {
    fn register(context: &Arc<HostCallContext>) -> Self {
        let orphans = process::call_in_flight();
        let mut running = running_calls();
        let running = running.get_or_insert_with(RunningCalls::default);
        running.next_id += 1;
        running.contexts.insert(running.next_id, context.clone());
        Self {
            id: running.next_id,
            _orphans: orphans,
        }
    }
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        if let Some(running) = running_calls().as_mut() {
            running.contexts.remove(&self.id);
        }
    }
}

/// How many calls' evaluators are still running.
pub fn running_call_count() -> usize {
    running_calls()
        .as_ref()
        .map_or(0, |running| running.contexts.len())
}

/// Cancels every running call; evaluators kill their processes from the cancellation
/// callbacks, on this thread, before this returns.
pub fn cancel_running_calls(reason: CancelReason) {
    let contexts: Vec<_> = running_calls()
        .as_ref()
        .map(|running| running.contexts.values().cloned().collect())
        .unwrap_or_default();
    for context in contexts {
        context.cancel(reason);
    }
}

/// Cancels a call's context if the future awaiting it is dropped (the client went away).
pub struct CancelOnDrop {
    context: Arc<HostCallContext>,
}

impl CancelOnDrop {
    pub fn new(context: Arc<HostCallContext>) -> Self {
        Self { context }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let expired = self.context.deadline().is_some_and(|d| d <= Instant::now());
        self.context.cancel(if expired {
            CancelReason::DeadlineExceeded
        } else {
            CancelReason::CallerCancelled
        });
    }
}

fn find_cycle(edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// Depth-first order from the served instance: the order in which a call meets each instance.
fn chain_positions(root: &str, edges: &BTreeMap<String, Vec<String>>) -> HashMap<String, usize> {
    let mut positions = HashMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(node) = stack.pop() {
        if positions.contains_key(&node) {
            continue;
        }
        positions.insert(node.clone(), positions.len());
        for next in edges.get(&node).into_iter().flatten().rev() {
            stack.push(next.clone());
        }
    }
    positions
}
