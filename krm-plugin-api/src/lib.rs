//! # Writing a krm-runner evaluator plugin
//!
//! krm-runner answers each KRM function call by asking a chain of *evaluators*. Every evaluator
//! is an instance of a *plugin*: a `cdylib` the runner loads at start-up. To add an execution
//! strategy (a cache, a remote service, a sandbox), write a plugin; the runner needs no rebuild.
//!
//! 1. Make a library crate with `crate-type = ["cdylib"]` and depend on `krm-plugin-api` (and
//!    `serde` for your config). The crate's library name decides the file: name it
//!    `krm_plugin_<name>` so `plugin: <name>` finds `libkrm_plugin_<name>.so`.
//! 2. Implement [`Evaluator`]: take an image name and a ResourceList, return a ResourceList and
//!    a log, or an [`EvalError`]. Say which images you serve in [`Evaluator::serves`], and why
//!    you decline the others: the SDK answers a call for those NOT_FOUND with that reason, so the
//!    chain falls through to the next evaluator (and the caller learns why nothing served), and
//!    [`Evaluator::probe`] tells the same ahead of a call. Watch the [`CallContext`]: when the
//!    caller cancels or its deadline passes, stop and clean up. To contribute ConfigHub-style typed
//!    functions too, return a [`TypedFunctionSet`] from [`Evaluator::typed_functions`]
//!    (`krm_function_executor::plugin::PluginFunctions` is one).
//! 3. Implement [`Plugin`]: a name, a version, a one-line description, a serde config type and a
//!    `build` function. Config errors name the field ([`ConfigError::field`]); serde's own
//!    errors get their field path added for you.
//! 4. Call [`export_plugin!`] once at the crate root.
//! 5. Put the library in one of the runner's `plugin_dirs` and add an instance:
//!    ```yaml
//!    evaluators:
//!      mine: {plugin: <name>, config: {...}}
//!      default: {plugin: multi, config: {chain: [mine, exec]}}
//!    ```
//!
//! What the runner guarantees: `evaluate` runs on a blocking thread, many calls at once; a panic
//! is caught and answered as an `Internal` error; `tracing` events you emit appear in the
//! runner's log; [`BuildContext::evaluator`] reaches other instances by name. Your plugin links
//! its own copies of its dependencies (tokio, tracing, ...): start your own runtime if you need
//! one. Plugins and runner must agree on [`ABI_VERSION`]; a mismatched plugin is refused at
//! start-up with a message naming both versions. A plugin meant to run `isolated` (its calls in
//! worker processes under a memory limit) installs [`AbortOnFailedAllocation`] as its global
//! allocator, so that a failed allocation ends the worker instead of reaching code that does not
//! check for it.
//!
//! To change a ResourceList without reformatting what you did not touch, turn on the `yaml`
//! feature and edit through its `yaml` module (the builtin functions' lossless editor).
//!
//! Test a plugin in its own `cargo test` with the `testing` feature ([`testing`]): it builds
//! the plugin and calls it through this same ABI path, without a `.so` or a runner. The
//! krm-runner tree's `plugin-template/` is a complete plugin to copy, with its own workspace,
//! tests and a walk-through; the `multi` and `exec` plugins are complete, short examples.

#![deny(missing_docs)]

mod abi;
mod allocator;
mod call;
mod decline;
// The runner's side of a call, for krm-plugin-loader and the test kit: plugin authors never
// call it.
#[cfg(feature = "host")]
#[allow(missing_docs)]
pub mod host;
mod logging;
mod plugin;
mod signature;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
/// Lossless YAML editing, as the builtin functions edit (feature `yaml`): parse a
/// ResourceList once ([`yaml::Doc::parse`]), queue changes at the spans of the nodes they touch
/// ([`yaml::Editor`]) and write the text once; everything else stays byte-identical, comments,
/// quoting and key order included. Parse errors are typed ([`yaml::ParseError`], with line and
/// column), and a [`yaml::Stop`] requested on cancellation ends a long parse.
#[cfg(feature = "yaml")]
pub use krm_yaml_edit as yaml;

pub use allocator::AbortOnFailedAllocation;
pub use call::{
    CallContext, CancelReason, ErrorKind, EvalError, EvalResponse, FunctionConfigExecutor,
    FunctionConfigRoute, Resolution,
};
pub use decline::{Answer, Chain, Probe, ProbeOutcome};
pub use krm_function_process::{QUOTED_CHARS, Quoted, TraceContext, process, quoted, results};
pub use plugin::{
    BuildContext, ConfigError, ConfigProblem, DEFAULT_MAX_MESSAGE_BYTES, Evaluator,
    EvaluatorHandle, Plugin, TypedFunctionSet,
};
pub use signature::{
    CacheIdentity, Example, FunctionSignature, NameMatch, Parameter, ParameterType, pick_function,
};
pub use telemetry::{AttributeValue, Span, Telemetry};

/// The plugin ABI this crate speaks. A runner refuses plugins built for another one.
#[cfg(not(krm_plugin_api_previous))]
pub const ABI_VERSION: u32 = 3;
/// Test-only: builds this crate as it would have looked one ABI ago, so the runner's refusal of
/// an out-of-date plugin can be tested (`--cfg krm_plugin_api_previous`).
#[cfg(krm_plugin_api_previous)]
pub const ABI_VERSION: u32 = 2;

/// This crate's version, as plugins report it.
pub const PLUGIN_API_VERSION: &str = env!("CARGO_PKG_VERSION");

const INTERFACE_VERSION: abi_stable::sabi_types::VersionStrings =
    abi_stable::package_version_strings!();

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

#[doc(hidden)]
pub mod __private {
    pub use crate::plugin::{config_schema_json, info_json, library_header};
    pub use abi_stable::library::LibHeader;
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_name_matches_abi_stable() {
        // Must equal the literal in `export_plugin!`.
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
