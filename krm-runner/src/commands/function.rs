//! `krm-runner fn NAME`: be the KRM function NAME, as kpt's `--exec` and Kptfile `exec:` steps
//! run one: a ResourceList on stdin, one on stdout.

use std::sync::Arc;

use anyhow::Context;
use krm_plugin_loader::{EvaluatorInstance, HostCallContext};

use super::eval::{config_map, read_bounded, resource_list, write_outcome};
use super::{BadInvocation, Exit, adopt_orphans, configure_call, exit_code, report};
use crate::allocator;
use crate::cli::FunctionCall;
use crate::function_index::FunctionIndex;
use crate::routing::Plan;
use crate::runtime::{self, Call, evaluate_here};
use crate::telemetry::traces::CallTrace;

/// The function the call names, found by starting only the instances it takes to find it (see
/// `runtime::function_instance`), runs on stdin.
pub fn run(call: &FunctionCall) -> Exit {
    let (config, problems) = configure_call(&call.flags)?;
    if !problems.is_empty() {
        return Err(report(&problems));
    }
    allocator::keep_freed_heap();
    let name = if call.function.skip_trust_policy {
        call.function.name.clone()
    } else {
        let policy = config.policy().map_err(|problems| report(&problems))?;
        match policy.admit_blocking(&call.function.name) {
            Ok(allowed) => allowed.image,
            Err(denied) => {
                eprintln!("krm-runner fn: {denied}");
                return Ok(1);
            }
        }
    };
    let name = &name;
    let instance =
        runtime::function_instance(&config, name).map_err(|problems| report(&problems))?;
    adopt_orphans(krm_plugin_api::process::adopt_orphans_for_one_call);
    let outcome = run_function(
        instance,
        name,
        &call.function.data,
        config.max_message_bytes,
    );
    krm_plugin_api::process::kill_orphans_now();
    Ok(exit_code(outcome))
}

/// `krm-runner fn NAME [-- key=value ...]`: a KRM function in the spec's sense, served by the
/// instance that implements NAME. Without `key=value` pairs the input is passed through
/// untouched.
fn run_function(
    instance: Result<Arc<EvaluatorInstance>, FunctionIndex>,
    name: &str,
    data: &[String],
    max_bytes: usize,
) -> anyhow::Result<i32> {
    let instance = instance.map_err(|index| BadInvocation::error(index.not_found(name)))?;
    let input = read_bounded(std::io::stdin(), "stdin", max_bytes)?;
    allocator::populate_heap_for(input.len());
    let input = if data.is_empty() {
        input
    } else {
        let with_config = || {
            let text = String::from_utf8(input).context("the input is not UTF-8 text")?;
            let config = config_map(data)?;
            resource_list(text, Some(&config))
        };
        with_config()
            .map_err(|error| BadInvocation::error(format!("{error:#}")))?
            .into_bytes()
    };
    let call = Call {
        plan: Plan::default(),
        served: instance,
        context: HostCallContext::new(None),
        trace: CallTrace::default(),
    };
    let exit = write_outcome(evaluate_here(&call, name, &input), "krm-runner fn")?;
    if exit != 0 && data.is_empty() && !mentions_resource_list(&input) {
        eprintln!(
            "krm-runner fn: the input is not a ResourceList; plain resource documents are wrapped \
             in one when the function's config is given after `--` (`krm-runner fn {name} -- \
             key=value`)"
        );
    }
    Ok(exit)
}

/// Whether `input` could be a ResourceList at all: a failed call on input that is not gets a
/// pointer to `-- key=value`, which wraps plain documents.
fn mentions_resource_list(input: &[u8]) -> bool {
    input
        .windows(b"ResourceList".len())
        .any(|window| window == b"ResourceList")
}
