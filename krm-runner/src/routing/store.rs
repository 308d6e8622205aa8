//! The FunctionConfigs in force: those read from files and those watched in the cluster,
//! merged into one routing table. Files are re-read while the runner serves; a change that
//! does not load cleanly is refused whole and the last good routing stays.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use krm_runner_function_config::{
    Conflict, FunctionConfigLoadError, ObjectId, RoutingTable, Sourced, load_paths,
};

use super::Router;
use crate::config::FunctionConfigs;
use crate::telemetry::metrics;

pub struct Store {
    router: Arc<Router>,
    default_prefix: String,
    functions_dir: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: Vec<Sourced>,
    /// Cluster objects by `namespace/name`.
    cluster: BTreeMap<String, Sourced>,
    conflicts: Vec<Conflict>,
}

impl Store {
    /// Reads the files once; every problem is reported, one line each.
    pub fn load(
        config: &FunctionConfigs,
        default_prefix: &str,
        router: Arc<Router>,
    ) -> Result<Arc<Self>, Vec<String>> {
        let files = read_files(config)?;
        let store = Arc::new(Self {
            router,
            default_prefix: default_prefix.to_owned(),
            functions_dir: config.functions_dir.clone(),
            state: Mutex::new(State {
                files,
                ..State::default()
            }),
        });
        store.rebuild(&mut store.lock());
        Ok(store)
    }

    /// Says so when the default FunctionConfig folder does not exist, once a runtime has
    /// started without problems (they come first, one line each). A missing configured path is
    /// refused with the other problems; the default one is skipped, so that a runner without
    /// the shipped FunctionConfigs still starts, but said: without it, routing by
    /// FunctionConfig silently does nothing.
    pub fn warn_of_missing_default(config: &FunctionConfigs) {
        if !config.paths_are_default {
            return;
        }
        for path in config.file_paths() {
            if !path.exists() {
                let looked_in = std::env::current_dir()
                    .map(|dir| format!(" (looked in {})", dir.display()))
                    .unwrap_or_default();
                tracing::warn!(
                    "function_configs.paths: the default {} does not exist{looked_in}, and no \
                     FunctionConfigs are installed beside the plugins: no FunctionConfig routes \
                     calls from files; set function_configs.paths, or install with \
                     deploy/install.sh",
                    path.display()
                );
            }
        }
    }

    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Whether any FunctionConfig is in force (read from the files; a cluster's come later).
    pub fn has_function_configs(&self) -> bool {
        !self.lock().files.is_empty()
    }

    /// Re-reads the files every `interval`, applying what changed.
    pub async fn watch_files(self: Arc<Self>, config: FunctionConfigs, interval: Duration) {
        let mut last_refusal = None;
        loop {
            tokio::time::sleep(interval).await;
            let store = self.clone();
            let config = config.clone();
            let Ok(outcome) = tokio::task::spawn_blocking(move || read_files(&config)).await else {
                continue;
            };
            match outcome {
                Ok(files) => {
                    last_refusal = None;
                    let mut state = store.lock();
                    if state.files != files {
                        tracing::info!(
                            objects = files.len(),
                            "function_configs: files changed; routing updated"
                        );
                        state.files = files;
                        store.rebuild(&mut state);
                        metrics::function_configs_reloaded(0);
                    }
                }
                Err(problems) => {
                    if last_refusal.as_ref() != Some(&problems) {
                        metrics::function_configs_reloaded(problems.len());
                        for problem in &problems {
                            tracing::error!(
                                "function_configs: {problem}; keeping the last good routing"
                            );
                        }
                        last_refusal = Some(problems);
                    }
                }
            }
        }
    }

    /// Applies a valid cluster object (added or changed).
    pub fn put_cluster_object(&self, key: String, object: Sourced) {
        let mut state = self.lock();
        if state.cluster.get(&key) != Some(&object) {
            state.cluster.insert(key, object);
            self.rebuild(&mut state);
        }
    }

    /// Forgets a cluster object (deleted, or no longer valid).
    pub fn remove_cluster_object(&self, key: &str) {
        let mut state = self.lock();
        if state.cluster.remove(key).is_some() {
            self.rebuild(&mut state);
        }
    }

    /// Keeps only the cluster objects in `keys` (after a full re-list).
    pub fn retain_cluster_objects(&self, keys: &[String]) {
        let mut state = self.lock();
        let before = state.cluster.len();
        state.cluster.retain(|key, _| keys.contains(key));
        if state.cluster.len() != before {
            self.rebuild(&mut state);
        }
    }

    /// How many objects the files hold.
    pub fn file_objects(&self) -> usize {
        self.lock().files.len()
    }

    /// Objects claiming the same image, one line each.
    pub fn conflicts(&self) -> Vec<String> {
        self.lock()
            .conflicts
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Why `object` is not in force, if it lost a conflict.
    pub fn conflict_of(&self, object: &ObjectId) -> Option<String> {
        self.lock()
            .conflicts
            .iter()
            .find(|conflict| &conflict.ignored == object)
            .map(ToString::to_string)
    }

    fn rebuild(&self, state: &mut State) {
        let objects: Vec<Sourced> = state
            .files
            .iter()
            .chain(state.cluster.values())
            .cloned()
            .collect();
        let (table, conflicts) =
            RoutingTable::build(objects, &self.default_prefix, &self.functions_dir);
        for conflict in conflicts.iter().filter(|c| !state.conflicts.contains(c)) {
            tracing::warn!("function_configs: {conflict}");
        }
        state.conflicts = conflicts;
        self.router.replace_table(table);
        self.report_routes();
    }

    /// Publishes how many FunctionConfigs in force have each executor section (a metric).
    pub fn report_routes(&self) {
        let table = self.router.table();
        let with = |section: fn(&Sourced) -> bool| table.objects().filter(|o| section(o)).count();
        metrics::function_config_routes([
            (
                "goExecutor",
                with(|o| o.object().spec.go_executor.is_some()),
            ),
            (
                "wasmExecutor",
                with(|o| o.object().spec.wasm_executor.is_some()),
            ),
            (
                "binaryExecutor",
                with(|o| o.object().spec.binary_executor.is_some()),
            ),
            (
                "podExecutor",
                with(|o| o.object().spec.pod_executor.is_some()),
            ),
        ]);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Loads every file, or reports every problem.
fn read_files(config: &FunctionConfigs) -> Result<Vec<Sourced>, Vec<String>> {
    let (objects, mut errors) = load_paths(&config.file_paths());
    if config.paths_are_default {
        errors.retain(|error| !matches!(error, FunctionConfigLoadError::Missing { .. }));
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(errors.iter().map(ToString::to_string).collect())
    }
}
