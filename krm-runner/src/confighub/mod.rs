//! ConfigHub's typed functions in the runner: served over HTTP and gRPC ([`serving`]), with the
//! functions the evaluator instances contribute. The `do`, `doseq`, `list` and `listpaths`
//! commands are in `commands::confighub`.

pub mod serving;

use std::collections::BTreeMap;
use std::sync::Arc;

use krm_function_executor::Executor;
use krm_plugin_api::TypedFunctionSet;
use krm_plugin_loader::EvaluatorInstance;

use crate::contributed;
use crate::runtime::Runtime;

/// The runtime's enabled instances, by name: each may contribute typed functions.
pub fn contributors(runtime: &Runtime) -> BTreeMap<String, Arc<EvaluatorInstance>> {
    runtime
        .instances()
        .iter()
        .filter(|report| !report.disabled)
        .filter_map(|report| Some((report.name.clone(), runtime.instance(&report.name)?.clone())))
        .collect()
}

/// Adds the contributions of the runtime's instances to `executor`; see
/// [`contributed::add_sets`].
pub fn add_contributed(executor: &mut Executor, runtime: &Runtime) -> Vec<String> {
    contributed::add_sets(
        executor,
        contributors(runtime).into_iter().map(|(name, instance)| {
            let set: Arc<dyn TypedFunctionSet> = instance;
            (name, set)
        }),
    )
}
