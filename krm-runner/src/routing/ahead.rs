//! Ahead of time (the Kubeless build-pipeline idea): when the FunctionConfigs load or change,
//! and every `resolve_interval_seconds`, each executor's tags are worked out before any call
//! needs them: constraints resolved to concrete tags and digests (the pod evaluator lists the
//! registry, fetching image metadata), binaries and module files checked, built-in functions
//! looked up, and, with warm-up on, each wasmExecutor's module compiled (pulled first, when it
//! is an image) and a pod started for each podExecutor's first tag as resolved (Porch skips warm-up
//! for constraint tags). The outcome is logged and kept for `krm-runner functions --status`, so
//! a broken reference shows before a package is rendered.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use krm_plugin_api::{ErrorKind, FunctionConfigExecutor, FunctionConfigRoute};
use krm_plugin_loader::EvaluatorInstance;
use krm_runner_function_config::version::TagEntry;
use krm_runner_function_config::{self as fc, ObjectId};

use super::{Router, is_executable, to_json, wasm_settings};
use crate::trust::{Decision, Policy};

/// One tag entry of one executor of one FunctionConfig, worked out.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub object: ObjectId,
    /// The object's `metadata.generation` as worked out (cluster objects).
    pub generation: Option<i64>,
    /// The repository the FunctionConfig's image lives in (first prefix, or the default one).
    pub image: String,
    pub executor: FunctionConfigExecutor,
    /// The evaluator instance standing for the executor here (for goExecutor, the one
    /// implementing the function), or those configured for it when none runs it; empty: none.
    pub evaluator: String,
    /// The tag entry as written; `None` for a podExecutor listing no tags (any tag).
    pub tag: Option<String>,
    pub resolved: Option<String>,
    pub digest: Option<String>,
    pub state: State,
    /// The trust policy's decision about the tag as resolved ([`judge`]); `None` without a
    /// policy.
    pub policy: Option<Decision>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Ready,
    /// Nothing to check: no instance stands for the executor.
    Skipped(String),
    /// `reason` is a CamelCase word for the condition (NoVersion, BinaryMissing, ...).
    Failed {
        reason: &'static str,
        message: String,
    },
}

impl State {
    pub fn label(&self) -> &'static str {
        match self {
            State::Ready => "Ready",
            State::Skipped(_) => "Skipped",
            State::Failed { .. } => "Failed",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            State::Ready => "",
            State::Skipped(message) | State::Failed { message, .. } => message,
        }
    }
}

/// Asks the trust policy about each report's image as resolved (the resolved tag, else the tag
/// as written, else the repository alone), as a call for it would be decided; nothing without
/// a policy.
pub async fn judge(policy: &Policy, reports: &mut [Report]) {
    if policy.is_open() {
        return;
    }
    for report in reports {
        let image = match (&report.resolved, &report.tag) {
            (Some(tag), _) => format!("{}:{tag}", report.image),
            (None, Some(tag))
                if TagEntry::parse(tag).is_ok_and(|entry| entry.concrete().is_some()) =>
            {
                format!("{}:{tag}", report.image)
            }
            _ => report.image.clone(),
        };
        report.policy = Some(match policy.admit(&image, None, None).await {
            Ok(allowed) => allowed.decision,
            Err(denied) => Decision {
                rule: denied.rule,
                allowed: false,
                reason: denied.refusal.to_string(),
            },
        });
    }
}

/// Images warmed up already, so that a periodic round does not restart pods their TTL removed.
#[derive(Default)]
pub struct Warmed(Mutex<HashSet<String>>);

impl Router {
    /// Works out every executor tag of every FunctionConfig in force. Blocks (evaluators may
    /// ask registries): run it on a blocking thread. With `warm` given, starts a pod for each
    /// podExecutor's first tag as resolved, once per resolved image.
    pub fn resolve_ahead(&self, warm: Option<&Warmed>) -> Vec<Report> {
        let table = self.table();
        let mut reports = Vec::new();
        for sourced in table.objects() {
            let spec = &sourced.object().spec;
            let object = sourced.id();
            let image = table.repository_of(&spec.image);
            let generation = sourced.object().metadata.generation;
            let report =
                |executor, evaluator: &str, tag: Option<&str>, resolved, digest, state| Report {
                    object: object.clone(),
                    generation,
                    image: image.clone(),
                    executor,
                    evaluator: evaluator.to_owned(),
                    tag: tag.map(str::to_owned),
                    resolved,
                    digest,
                    state,
                    policy: None,
                };
            if let Some(go) = &spec.go_executor {
                let id = go.id.clone().unwrap_or_else(|| object.name.clone());
                let found = self.go_instance(&id);
                let any_running = self
                    .standing(FunctionConfigExecutor::GoExecutor)
                    .iter()
                    .any(|standing| standing.instance.is_some());
                let evaluator = match &found {
                    Ok((name, _)) => (*name).to_owned(),
                    Err(_) => self.instance_name(FunctionConfigExecutor::GoExecutor),
                };
                for tag in &go.tags {
                    let (resolved, state) = match &found {
                        Ok((_, instance)) => {
                            local_tag(tag, |constraint| instance.resolve(&image, constraint, None))
                        }
                        Err(_) if any_running => (
                            None,
                            State::Failed {
                                reason: "FunctionMissing",
                                message: format!("no built-in function {id:?} is compiled in"),
                            },
                        ),
                        Err(reason) => (None, State::Skipped(reason.clone())),
                    };
                    reports.push(report(
                        FunctionConfigExecutor::GoExecutor,
                        &evaluator,
                        Some(tag),
                        resolved,
                        None,
                        state,
                    ));
                }
            }
            if let Some(wasm) = &spec.wasm_executor
                && let Some(module) = wasm.module(table.functions_dir())
            {
                let evaluator = self.instance_name(FunctionConfigExecutor::WasmExecutor);
                let found = self.only_instance(FunctionConfigExecutor::WasmExecutor);
                for (index, tag) in wasm.tags.iter().enumerate() {
                    let (resolved, digest, state) = match (&found, &module) {
                        (Err(reason), _) => (None, None, State::Skipped(reason.clone())),
                        (Ok(_), fc::WasmModule::File(path)) if !path.is_file() => (
                            None,
                            None,
                            State::Failed {
                                reason: "ModuleMissing",
                                message: format!("module {} is missing", path.display()),
                            },
                        ),
                        (Ok((_, instance)), module) => {
                            let route = wasm_route(&object, module, None);
                            let (resolved, state) = local_tag(tag, |constraint| {
                                instance.resolve(&image, constraint, Some(&route))
                            });
                            if index == 0
                                && let Some(warmed) = warm
                            {
                                warm_module(warmed, instance, &image, &object, module, &resolved);
                            }
                            (resolved, None, state)
                        }
                    };
                    reports.push(report(
                        FunctionConfigExecutor::WasmExecutor,
                        &evaluator,
                        Some(tag),
                        resolved,
                        digest,
                        state,
                    ));
                }
            }
            if let Some(binary) = &spec.binary_executor {
                let path = table.functions_dir().join(&binary.path);
                let found = self.only_instance(FunctionConfigExecutor::BinaryExecutor);
                let evaluator = self.instance_name(FunctionConfigExecutor::BinaryExecutor);
                for tag in &binary.tags {
                    let (resolved, state) = if let Err(reason) = &found {
                        (None, State::Skipped(reason.clone()))
                    } else if !is_executable(&path) {
                        (
                            None,
                            State::Failed {
                                reason: "BinaryMissing",
                                message: format!(
                                    "binary {} is missing or not executable",
                                    path.display()
                                ),
                            },
                        )
                    } else {
                        local_tag(tag, |_| None)
                    };
                    reports.push(report(
                        FunctionConfigExecutor::BinaryExecutor,
                        &evaluator,
                        Some(tag),
                        resolved,
                        None,
                        state,
                    ));
                }
            }
            if let Some(pod) = &spec.pod_executor {
                let route = FunctionConfigRoute {
                    function_config: object.to_string(),
                    executor: FunctionConfigExecutor::PodExecutor,
                    settings: to_json(pod),
                };
                let evaluator = self.instance_name(FunctionConfigExecutor::PodExecutor);
                let untagged = |state| {
                    report(
                        FunctionConfigExecutor::PodExecutor,
                        &evaluator,
                        None,
                        None,
                        None,
                        state,
                    )
                };
                let instance = match self.only_instance(FunctionConfigExecutor::PodExecutor) {
                    Ok((_, instance)) => instance,
                    Err(reason) => {
                        reports.push(untagged(State::Skipped(reason)));
                        continue;
                    }
                };
                if pod.tags.is_empty() {
                    reports.push(untagged(State::Ready));
                }
                for (index, tag) in pod.tags.iter().enumerate() {
                    let entry = TagEntry::parse(tag).ok();
                    let literal = matches!(entry, Some(TagEntry::Literal(_)));
                    // Tags naming one version are warmed up by `Router::warm_up`; ranges here.
                    let range = entry
                        .as_ref()
                        .is_some_and(|entry| entry.concrete().is_none());
                    let answer = (!literal)
                        .then(|| instance.resolve(&image, tag, Some(&route)))
                        .flatten();
                    let (resolved, digest, state) = match answer {
                        Some(Ok(resolution)) => {
                            (Some(resolution.tag), resolution.digest, State::Ready)
                        }
                        Some(Err(error)) => (None, None, failure(error.kind, error.message)),
                        // Not resolvable here: the tag as written, when it names one.
                        None => (
                            TagEntry::parse(tag)
                                .ok()
                                .and_then(|entry| entry.concrete().map(str::to_owned)),
                            None,
                            State::Ready,
                        ),
                    };
                    if index == 0
                        && range
                        && let (Some(warmed), Some(resolved)) = (warm, &resolved)
                    {
                        let target = match resolved.as_str() {
                            "" => image.clone(),
                            resolved => format!("{image}:{resolved}"),
                        };
                        let first = warmed
                            .0
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert(target.clone());
                        if first {
                            tracing::info!(image = %target, function_config = %object, "warming up");
                            instance.warm_up(&target, Some(&route));
                        }
                    }
                    reports.push(report(
                        FunctionConfigExecutor::PodExecutor,
                        &evaluator,
                        Some(tag),
                        resolved,
                        digest,
                        state,
                    ));
                }
            }
        }
        reports
    }
}

/// The route a wasmExecutor's evaluator is told for `module` as the image's `tag`, to resolve
/// and warm up (`cache` concerns calls only).
fn wasm_route(
    object: &ObjectId,
    module: &fc::WasmModule,
    tag: Option<&str>,
) -> FunctionConfigRoute {
    FunctionConfigRoute {
        function_config: object.to_string(),
        executor: FunctionConfigExecutor::WasmExecutor,
        settings: to_json(&wasm_settings(module, &tag.map(str::to_owned), None)),
    }
}

/// Has the wasm evaluator compile `module` (pulled first, for an image) as it will run for the
/// executor's first tag as resolved, once per module and tag, as pods are started ahead of
/// calls.
fn warm_module(
    warmed: &Warmed,
    instance: &EvaluatorInstance,
    image: &str,
    object: &ObjectId,
    module: &fc::WasmModule,
    resolved: &Option<String>,
) {
    let target = match resolved.as_deref() {
        None | Some("") => image.to_owned(),
        Some(tag) => format!("{image}:{tag}"),
    };
    let first = warmed
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(format!("{module} {target}"));
    if first {
        tracing::info!(image = %target, module = %module, function_config = %object, "warming up");
        instance.warm_up(
            &target,
            Some(&wasm_route(object, module, resolved.as_deref())),
        );
    }
}

/// Logs the failed tags of `reports` (one round's, in FunctionConfig and executor order): one
/// line per executor of a FunctionConfig, with how many of its tags failed and the first
/// failure, so that a long tag list cannot flood the log.
pub fn log_failures(reports: &[Report]) {
    let failed = reports.iter().filter_map(|report| match &report.state {
        State::Failed { reason, message } => Some((report, *reason, message)),
        _ => None,
    });
    let mut groups: Vec<((&Report, &str, &String), usize)> = Vec::new();
    for failure in failed {
        match groups.last_mut() {
            Some(((first, ..), count))
                if first.object == failure.0.object && first.executor == failure.0.executor =>
            {
                *count += 1;
            }
            _ => groups.push((failure, 1)),
        }
    }
    for ((first, reason, message), failed_tags) in groups {
        let tag = first.tag.as_deref().unwrap_or_default();
        tracing::warn!(function_config = %first.object, executor = first.executor.field(), reason, tag, failed_tags, "{message}");
    }
}

/// A go, wasm or binary executor's tag: a tag it names exactly stands for itself; a constraint
/// is resolved by `resolve` when the evaluator can (the builtin, among the tags it reproduces;
/// the wasm evaluator, among a module image's tags in its registry).
fn local_tag(
    tag: &str,
    resolve: impl FnOnce(&str) -> Option<Result<krm_plugin_api::Resolution, krm_plugin_api::EvalError>>,
) -> (Option<String>, State) {
    match TagEntry::parse(tag) {
        Ok(entry) if entry.concrete().is_some() => (Some(tag.to_owned()), State::Ready),
        _ => match resolve(tag) {
            Some(Ok(resolution)) => (Some(resolution.tag), State::Ready),
            Some(Err(error)) => (None, failure(error.kind, error.message)),
            None => (None, State::Ready),
        },
    }
}

fn failure(kind: ErrorKind, message: String) -> State {
    State::Failed {
        reason: if kind == ErrorKind::NotFound {
            "NoVersion"
        } else {
            "ResolveFailed"
        },
        message,
    }
}
