//! The instance graph: plugin libraries loaded and evaluator instances built as they are asked
//! for, each instance's delegates, and the host services the instances call back into.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use krm_plugin_api::{FunctionSignature, NameMatch, TraceContext};
use krm_plugin_loader::{
    EvaluatorInstance, EvaluatorSlot, HostServices, HostSpan, LayoutChecks, Measurement,
    PluginLibrary,
};

use super::discovery::{locate_plugin, search_dirs};
use super::{InstanceReport, Purpose};
use crate::config::Config;
use crate::function_index::{FunctionIndex, asking_order};

pub(super) struct Services {
    settings: HashMap<&'static str, String>,
    pub(super) slots: HashMap<String, Arc<EvaluatorSlot>>,
    pub(super) lookups: Mutex<BTreeMap<String, Vec<String>>>,
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

/// Plugin libraries loaded and evaluator instances built as they are asked for, with every
/// problem met on the way.
pub(super) struct Instances {
    config: Arc<Config>,
    purpose: Purpose,
    dirs: Vec<PathBuf>,
    layout_checks: LayoutChecks,
    pub(super) disabled: BTreeSet<String>,
    libraries: HashMap<PathBuf, Arc<PluginLibrary>>,
    /// Each instance's library, once loaded; `None` when it could not be.
    loaded: BTreeMap<String, Option<Arc<PluginLibrary>>>,
    pub(super) services: Arc<Services>,
    /// Instances asked to build so far (built or not), so that each builds once.
    attempted: BTreeSet<String>,
    pub(super) built: BTreeMap<String, Arc<EvaluatorInstance>>,
    pub(super) reports: Vec<InstanceReport>,
    pub(super) problems: Vec<String>,
}

impl Instances {
    pub(super) fn new(config: &Config, purpose: Purpose) -> Self {
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
    pub(super) fn enabled(&self) -> Vec<String> {
        self.config
            .evaluators
            .keys()
            .filter(|name| !self.disabled.contains(*name))
            .cloned()
            .collect()
    }

    /// Loads the library of instance `name` (each file once, however many instances use it).
    pub(super) fn load(&mut self, name: &str) -> Option<Arc<PluginLibrary>> {
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
    pub(super) fn build(&mut self, name: &str) {
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
    pub(super) fn build_with_delegates(&mut self, name: &str) {
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
pub(super) fn functions_of<'i>(
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

/// The instance that runs `krm-runner fn NAME`, picked as [`FunctionIndex::find`] picks it, but
/// building only the instances it takes to know, in [`asking_order`], each with its
/// delegates: up to the first that has a function of that short name (asked for that one
/// function, not its list). An image name, or a name nothing implements, needs them all.
/// An image reference (a name with `/` or `:`) no instance lists goes to the served instance
/// (`serve`), as a gRPC call for that image does: its evaluators may serve images they cannot
/// list (modules and images pulled from a registry). `Ok(Err(catalog))` when none implements
/// it.
pub fn function_instance(
    config: &Config,
    name: &str,
) -> Result<Result<Arc<EvaluatorInstance>, FunctionIndex>, Vec<String>> {
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
    if by_image.is_none() && name.contains(['/', ':']) {
        instances.build_with_delegates(&config.serve);
        if !instances.problems.is_empty() {
            return Err(instances.problems);
        }
        by_image = instances.built.get(&config.serve).cloned();
    }
    Ok(by_image.ok_or_else(|| {
        FunctionIndex::new(functions_of(
            enabled
                .iter()
                .filter_map(|name| Some((name, instances.built.get(name)?))),
        ))
    }))
}

pub(super) fn lock(instances: &Mutex<Instances>) -> std::sync::MutexGuard<'_, Instances> {
    instances.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn find_cycle(edges: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
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
pub(super) fn chain_positions(
    root: &str,
    edges: &BTreeMap<String, Vec<String>>,
) -> HashMap<String, usize> {
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
