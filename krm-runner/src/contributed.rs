//! ConfigHub's Kubernetes/YAML executor as the runner serves it: the builtin typed functions,
//! plus those every built evaluator instance contributes through the plugin ABI. The runner
//! (`confighub`) and the typed-function workers (`worker::typed`) both build it by these rules.
//!
//! Names: a plugin's function answers to `INSTANCE/NAME` always, and to the bare `NAME` when
//! neither a builtin typed function nor another instance's function has it. A clash is
//! reported at start-up, naming both sides; the builtin keeps its name, and clashing plugins
//! keep only their qualified names.

use std::collections::BTreeMap;
use std::sync::Arc;

use krm_function_executor::Executor;
use krm_function_executor::functions::TypedFunction;
use krm_function_executor::plugin::{RemoteFunction, contributed};
use krm_plugin_api::TypedFunctionSet;

/// Adds the contributions of `sets` (instance name, its typed functions) to `executor` (the
/// builtin functions); the problems and clashes, one line each.
pub fn add_sets(
    executor: &mut Executor,
    sets: impl IntoIterator<Item = (String, Arc<dyn TypedFunctionSet>)>,
) -> Vec<String> {
    let mut reports = Vec::new();
    // Bare name -> the instances contributing it, with the function.
    let mut claims: BTreeMap<String, Vec<(String, Arc<RemoteFunction>)>> = BTreeMap::new();
    for (name, set) in sets {
        let (functions, problems) = contributed(set);
        for problem in problems {
            reports.push(format!("evaluators.{name}: {problem}; left out"));
        }
        for function in functions {
            let qualified = format!("{name}/{}", function.remote_name());
            match executor.register(Arc::new(function.renamed(&qualified))) {
                Ok(()) => claims
                    .entry(function.remote_name().to_owned())
                    .or_default()
                    .push((name.clone(), function)),
                Err(error) => {
                    reports.push(format!("evaluators.{name}: {error}; left out"));
                }
            }
        }
    }
    for (name, claimants) in claims {
        if executor.function(&name).is_some() {
            for (instance, _) in &claimants {
                reports.push(format!(
                    "evaluators.{instance}: typed function {name:?} clashes with the builtin \
                     typed function {name:?}: the builtin keeps {name:?}, {instance}'s answers \
                     to {:?}",
                    format!("{instance}/{name}")
                ));
            }
            continue;
        }
        match claimants.as_slice() {
            [(_, function)] => {
                let bare: Arc<dyn TypedFunction> = function.clone();
                // The name was checked free just above.
                let _ = executor.register(bare);
            }
            many => {
                let instances: Vec<&str> = many.iter().map(|(i, _)| i.as_str()).collect();
                let qualified: Vec<String> =
                    instances.iter().map(|i| format!("{i}/{name}")).collect();
                reports.push(format!(
                    "evaluators.{}: typed function {name:?} is contributed by each of them: \
                     none answers to {name:?}; call {}",
                    instances.join(", evaluators."),
                    qualified.join(" or ")
                ));
            }
        }
    }
    reports
}
