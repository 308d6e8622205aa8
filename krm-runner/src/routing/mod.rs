//! FunctionConfig routing: the image's FunctionConfig names the evaluator that runs it (the
//! PIP's flow: goExecutor, then binaryExecutor, then podExecutor, each for its tags, with
//! krm-runner's wasmExecutor between goExecutor and binaryExecutor); images no FunctionConfig
//! claims go to the served chain.

mod ahead;
mod cluster;
mod status;
mod store;

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use krm_plugin_api::{FunctionConfigExecutor, FunctionConfigRoute};
use krm_plugin_loader::EvaluatorInstance;
use krm_runner_function_config::version::Constraint;
use krm_runner_function_config::{self as fc, RoutingTable};

pub use ahead::{Report, State};
pub use store::Store;

/// Starts what keeps the routing current while serving: the file reload, the cluster watch,
/// and (once both sources are read) the warm-up.
pub async fn start_sources(
    store: &Arc<Store>,
    config: &crate::config::FunctionConfigs,
    policy: Arc<crate::trust::Policy>,
) -> Result<(), String> {
    if !config.paths.is_empty() {
        let interval = std::time::Duration::from_secs_f64(config.reload_interval_seconds);
        tokio::spawn(store.clone().watch_files(config.clone(), interval));
    }
    let (synced, status) = if config.cluster.enabled {
        let client = cluster::client(&config.cluster).await?;
        let status = Arc::new(cluster::StatusWriter::new(
            client,
            config.cluster.namespace.clone(),
        ));
        let (synced, read) = tokio::sync::oneshot::channel();
        tokio::spawn(cluster::watch(store.clone(), status.clone(), synced));
        (Some(read), Some(status))
    } else {
        (None, None)
    };
    let router = store.router().clone();
    let warm_up = config.warm_up;
    let interval = std::time::Duration::from_secs_f64(config.resolve_interval_seconds.max(1.0));
    tokio::spawn(async move {
        // Porch warms up before its store has read the FunctionConfigs; this waits.
        if let Some(read) = synced {
            let _ = read.await;
        }
        if warm_up {
            router.warm_up();
        }
        let warmed = Arc::new(ahead::Warmed::default());
        loop {
            // A change signalled before this round starts (the files' first reading, too) is
            // in the table it works out: no second round for it.
            tokio::select! {
                biased;
                () = router.changed.notified() => {}
                () = std::future::ready(()) => {}
            }
            let (resolver, warmed) = (router.clone(), warmed.clone());
            let round = tokio::task::spawn_blocking(move || {
                resolver.resolve_ahead(warm_up.then_some(&*warmed))
            });
            if let Ok(mut reports) = round.await {
                ahead::judge(&policy, &mut reports).await;
                ahead::log_failures(&reports);
                if let Some(status) = &status {
                    status.write_round(&router, &reports).await;
                }
                router.set_reports(reports);
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = router.changed.notified() => {}
            }
        }
    });
    Ok(())
}

/// The evaluator instances standing for the executors, and the routing table in force.
pub struct Router {
    /// Per executor (indexed by [`FunctionConfigExecutor`]), the instances configured for it in
    /// order: goExecutor may name several, the others at most one.
    executors: [Vec<Standing>; 4],
    table: RwLock<Arc<RoutingTable>>,
    /// Signalled when the table is replaced, for the ahead-of-time round.
    changed: tokio::sync::Notify,
    /// The last ahead-of-time round's reports.
    reports: RwLock<Arc<Vec<Report>>>,
}

/// An instance configured for an executor.
struct Standing {
    name: String,
    /// `None` when no instance of that name is running.
    instance: Option<Arc<EvaluatorInstance>>,
    /// For goExecutor, the functions it implements, by the names a goExecutor id may give.
    functions: Vec<String>,
}

/// One evaluator to try, and why.
#[derive(Clone)]
pub struct RoutedEvaluator {
    pub instance: Arc<EvaluatorInstance>,
    pub route: FunctionConfigRoute,
    /// The image to hand it: the requested one, or, when the runner resolved the call's
    /// constraint against the executor's tags, the image with the chosen tag.
    pub image: String,
    /// Whether `image` is such a resolution (the runner reports it; evaluators report theirs).
    pub resolved: bool,
}

/// What a call will try, in order, before the served chain.
#[derive(Default, Clone)]
pub struct Plan {
    pub steps: Vec<RoutedEvaluator>,
    /// For a call with a tag constraint: the matched FunctionConfig's executors none of whose
    /// tags satisfies it, each with its reason (for the NOT_FOUND answer).
    pub unsatisfied: Vec<String>,
}

/// How an image is routed, for `krm-runner functions --resolve`.
pub struct Explanation {
    /// The FunctionConfig that matched, or why none did.
    pub matched: Result<String, String>,
    /// Each executor in order: the instance that would run, or why it is skipped.
    pub executors: Vec<(FunctionConfigExecutor, Result<String, String>)>,
}

impl Router {
    /// `instance` finds a built instance by name; an empty name means "no instance".
    pub fn new(
        names: &crate::config::ExecutorInstances,
        instance: impl Fn(&str) -> Option<Arc<EvaluatorInstance>>,
    ) -> Self {
        let stand = |name: &str, functions: &dyn Fn(&EvaluatorInstance) -> Vec<String>| {
            let found = instance(name);
            Standing {
                name: name.to_owned(),
                functions: found.as_deref().map(functions).unwrap_or_default(),
                instance: found,
            }
        };
        let one = |name: &String| {
            (!name.is_empty())
                .then(|| stand(name, &|_| Vec::new()))
                .into_iter()
                .collect()
        };
        let go = names
            .go_executor
            .0
            .iter()
            .map(|name| stand(name, &go_ids))
            .collect();
        Self {
            executors: [
                go,
                one(&names.wasm_executor),
                one(&names.binary_executor),
                one(&names.pod_executor),
            ],
            table: RwLock::new(Arc::new(
                RoutingTable::build(Vec::new(), "", Path::new("")).0,
            )),
            changed: tokio::sync::Notify::new(),
            reports: RwLock::default(),
        }
    }

    /// The evaluator instances configured for `executor`, in order, comma-separated (empty:
    /// none).
    pub fn instance_name(&self, executor: FunctionConfigExecutor) -> String {
        let names: Vec<_> = self
            .standing(executor)
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        names.join(", ")
    }

    fn standing(&self, executor: FunctionConfigExecutor) -> &[Standing] {
        &self.executors[executor as usize]
    }

    /// Executor names configured but not built: their sections are skipped (goExecutor's
    /// only for the functions no other of its instances implements).
    pub fn missing_instances(&self) -> Vec<(FunctionConfigExecutor, &str)> {
        [
            FunctionConfigExecutor::GoExecutor,
            FunctionConfigExecutor::WasmExecutor,
            FunctionConfigExecutor::BinaryExecutor,
            FunctionConfigExecutor::PodExecutor,
        ]
        .into_iter()
        .flat_map(|executor| {
            self.standing(executor)
                .iter()
                .filter(|standing| standing.instance.is_none())
                .map(move |standing| (executor, standing.name.as_str()))
        })
        .collect()
    }

    /// The instance standing for `executor` (wasmExecutor, binaryExecutor or podExecutor), or
    /// why none is.
    fn only_instance(
        &self,
        executor: FunctionConfigExecutor,
    ) -> Result<(&str, &Arc<EvaluatorInstance>), String> {
        let Some(standing) = self.standing(executor).first() else {
            return Err(format!(
                "no instance stands for {} (function_configs.executors)",
                executor.field()
            ));
        };
        match &standing.instance {
            Some(instance) => Ok((&standing.name, instance)),
            None => Err(format!(
                "no evaluator instance named {:?} is running",
                standing.name
            )),
        }
    }

    /// The first goExecutor instance implementing the function `function_id`, or why none does.
    fn go_instance(&self, function_id: &str) -> Result<(&str, &Arc<EvaluatorInstance>), String> {
        let standing = self.standing(FunctionConfigExecutor::GoExecutor);
        let running: Vec<_> = standing
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.instance.as_ref()?, &s.functions)))
            .collect();
        if let Some((name, instance, _)) = running
            .iter()
            .find(|(_, _, functions)| functions.iter().any(|f| f == function_id))
        {
            return Ok((name, instance));
        }
        let quoted = |names: Vec<&str>| {
            let names: Vec<_> = names.iter().map(|name| format!("{name:?}")).collect();
            names.join(", ")
        };
        match (standing, running.as_slice()) {
            ([], _) => Err(format!(
                "no instance stands for {} (function_configs.executors)",
                FunctionConfigExecutor::GoExecutor.field()
            )),
            (_, []) => Err(format!(
                "no evaluator instance named {} is running",
                quoted(standing.iter().map(|s| s.name.as_str()).collect())
            )),
            ([_], _) => Err(format!(
                "evaluator {} has no function {function_id:?} compiled in",
                quoted(running.iter().map(|(name, ..)| *name).collect())
            )),
            _ => Err(format!(
                "no function {function_id:?} is compiled into evaluators {}",
                quoted(running.iter().map(|(name, ..)| *name).collect())
            )),
        }
    }

    pub fn replace_table(&self, table: RoutingTable) {
        *self.table.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
        self.changed.notify_one();
    }

    fn set_reports(&self, reports: Vec<Report>) {
        *self.reports.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(reports);
    }

    pub fn table(&self) -> Arc<RoutingTable> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The evaluators a call for `image` (under the tag `constraint`, if any) tries before
    /// the served chain.
    pub fn plan(&self, image: &str, constraint: Option<&Constraint>) -> Plan {
        let fc::RouteOutcome::Matched(matched) = self.table().route_with(image, constraint) else {
            return Plan::default();
        };
        let steps = matched
            .plan
            .iter()
            .filter_map(|step| {
                let planned = Planned::new(&matched, step);
                let instance = self.runnable(&planned).ok()?;
                let resolved_tag = match step {
                    fc::PlannedExecutor::Go { tag, .. }
                    | fc::PlannedExecutor::Wasm { tag, .. }
                    | fc::PlannedExecutor::Binary { tag, .. } => constraint.and(tag.as_ref()),
                    fc::PlannedExecutor::Pod { .. } => None,
                };
                Some(RoutedEvaluator {
                    instance,
                    route: planned.route,
                    image: resolved_tag
                        .map_or_else(|| image.to_owned(), |tag| format!("{image}:{tag}")),
                    resolved: resolved_tag.is_some(),
                })
            })
            .collect();
        let unsatisfied = matched
            .left_out
            .iter()
            .filter(|left_out| matches!(left_out, fc::LeftOut::NoneSatisfies { .. }))
            .map(|left_out| format!("{} {left_out}", matched.object))
            .collect();
        Plan { steps, unsatisfied }
    }

    pub fn explain(&self, image: &str, constraint: Option<&Constraint>) -> Explanation {
        let matched = match self.table().route_with(image, constraint) {
            fc::RouteOutcome::NoMatch(reason) => {
                return Explanation {
                    matched: Err(reason.to_string()),
                    executors: Vec::new(),
                };
            }
            fc::RouteOutcome::Matched(matched) => matched,
        };
        // The crate's messages start with the executor's name, which the caller prints.
        let unlabelled = |executor: FunctionConfigExecutor, text: String| match executor {
            FunctionConfigExecutor::PodExecutor if text == executor.to_string() => {
                "the image in pods".to_owned()
            }
            _ => text
                .strip_prefix(&format!("{executor}: "))
                .map(str::to_owned)
                .unwrap_or(text),
        };
        let mut executors: Vec<_> = matched
            .plan
            .iter()
            .map(|step| {
                let planned = Planned::new(&matched, step);
                let mut what = unlabelled(step.executor(), step.to_string());
                if let (
                    Some(_),
                    fc::PlannedExecutor::Go { tag, .. }
                    | fc::PlannedExecutor::Wasm { tag, .. }
                    | fc::PlannedExecutor::Binary { tag, .. },
                ) = (constraint, step)
                {
                    what = match tag {
                        Some(tag) => format!("{what} as tag {tag:?}"),
                        None => format!("{what} untagged (a range of its tags overlaps)"),
                    };
                }
                let outcome = self
                    .runnable(&planned)
                    .map(|instance| format!("{what} on evaluator {:?}", instance.name()))
                    .map_err(|reason| format!("{what}: {reason}"));
                (planned.route.executor, outcome)
            })
            .chain(matched.left_out.iter().map(|left_out| {
                let executor = left_out.executor();
                (executor, Err(unlabelled(executor, left_out.to_string())))
            }))
            .collect();
        executors.sort_by_key(|(executor, _)| *executor as u8);
        Explanation {
            matched: Ok(matched.object.to_string()),
            executors,
        }
    }

    /// The instance that runs `planned`, or why it cannot.
    fn runnable(&self, planned: &Planned) -> Result<Arc<EvaluatorInstance>, String> {
        let (_, instance) = match planned.step {
            fc::PlannedExecutor::Go { function_id, .. } => self.go_instance(function_id)?,
            fc::PlannedExecutor::Wasm { module, .. } => {
                let found = self.only_instance(FunctionConfigExecutor::WasmExecutor)?;
                if let fc::WasmModule::File(path) = module
                    && !path.is_file()
                {
                    return Err(format!("module {} is missing", path.display()));
                }
                found
            }
            fc::PlannedExecutor::Binary { path, .. } => {
                let found = self.only_instance(FunctionConfigExecutor::BinaryExecutor)?;
                if !is_executable(path) {
                    return Err(format!(
                        "binary {} is missing or not executable",
                        path.display()
                    ));
                }
                found
            }
            fc::PlannedExecutor::Pod { .. } => {
                self.only_instance(FunctionConfigExecutor::PodExecutor)?
            }
        };
        Ok(instance.clone())
    }

    /// Asks the podExecutor instance to start pods for what the FunctionConfigs warm up.
    pub fn warm_up(&self) {
        let Ok((_, pod)) = self.only_instance(FunctionConfigExecutor::PodExecutor) else {
            return;
        };
        let table = self.table();
        for (image, settings) in table.warm_up_images() {
            // A first tag that is a range is resolved, then warmed, ahead of time.
            let tag = fc::ImageRef::parse(&image, "").tag;
            if fc::version::TagEntry::parse(&tag).is_ok_and(|entry| entry.concrete().is_none()) {
                continue;
            }
            let function_config = match table.route(&image) {
                fc::RouteOutcome::Matched(matched) => matched.object.to_string(),
                fc::RouteOutcome::NoMatch(_) => continue,
            };
            tracing::info!(image, function_config, "warming up");
            let route = FunctionConfigRoute {
                function_config,
                executor: FunctionConfigExecutor::PodExecutor,
                settings: to_json(&settings),
            };
            pod.warm_up(&image, Some(&route));
        }
    }
}

/// One step of a matched FunctionConfig's plan, as the evaluator will be told it.
struct Planned<'a> {
    step: &'a fc::PlannedExecutor,
    route: FunctionConfigRoute,
}

impl<'a> Planned<'a> {
    /// The executor's section of the spec, narrowed to the tag it runs (none when it runs the
    /// image untagged), with the builtin's id and the binary's and module's absolute paths
    /// filled in.
    fn new(matched: &fc::Matched, step: &'a fc::PlannedExecutor) -> Self {
        let settings = match step {
            fc::PlannedExecutor::Go { function_id, tag } => to_json(&fc::GoExecutor {
                tags: tag.iter().cloned().collect(),
                id: Some(function_id.clone()),
            }),
            fc::PlannedExecutor::Wasm { module, tag, cache } => {
                to_json(&wasm_settings(module, tag, cache.clone()))
            }
            fc::PlannedExecutor::Binary { path, tag, cache } => to_json(&fc::BinaryExecutor {
                tags: tag.iter().cloned().collect(),
                path: path.display().to_string(),
                cache: cache.clone(),
            }),
            fc::PlannedExecutor::Pod { settings } => to_json(&**settings),
        };
        Self {
            step,
            route: FunctionConfigRoute {
                function_config: matched.object.to_string(),
                executor: step.executor(),
                settings,
            },
        }
    }
}

/// A wasmExecutor section as its evaluator is told it: the module, a path absolute.
fn wasm_settings(
    module: &fc::WasmModule,
    tag: &Option<String>,
    cache: Option<fc::ResultCaching>,
) -> fc::WasmExecutor {
    let (path, image) = match module {
        fc::WasmModule::File(path) => (Some(path.display().to_string()), None),
        fc::WasmModule::Image(image) => (None, Some(image.clone())),
    };
    fc::WasmExecutor {
        tags: tag.iter().cloned().collect(),
        path,
        image,
        cache,
    }
}

/// The names a goExecutor id may give for the functions `instance` implements: a function's
/// name and its untagged images (a typed function answers to `confighub/NAME` too).
fn go_ids(instance: &EvaluatorInstance) -> Vec<String> {
    instance
        .functions()
        .into_iter()
        .flat_map(|f| {
            let untagged = f.images.into_iter().filter(|i| !i.contains([':', '@']));
            std::iter::once(f.name).chain(untagged)
        })
        .collect()
}

fn to_json(settings: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(settings).unwrap_or_default()
}

fn is_executable(path: &Path) -> bool {
    krm_plugin_api::process::check_executable(path).is_ok()
}
