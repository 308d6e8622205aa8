//! `FunctionConfig` (`config.porch.kpt.dev/v1alpha1`): Porch's resource saying, per function
//! image, which executor runs it — built in (`goExecutor`), a WebAssembly module
//! (`wasmExecutor`, krm-runner's extension), a local binary (`binaryExecutor`) or a pod
//! (`podExecutor`). This crate holds what the runner and the plugins share about it:
//!
//! - the types ([`FunctionConfig`] and its parts; plugins deserialize [`PodExecutor`],
//!   [`BinaryExecutor`], [`WasmExecutor`] and [`GoExecutor`] from JSON), from which the CRD in
//!   `deploy/kubernetes/crds/functionconfigs.yaml` is generated;
//! - [`validate`], reporting every broken rule at once;
//! - [`load_paths`], reading objects from YAML files and directories;
//! - [`version`], tags as semantic versions and Porch's tag constraints;
//! - [`RoutingTable`], matching a request image to an object and listing the executors to try.
//!
//! Objects from the cluster enter through [`Sourced::from_cluster`], which validates them.
//! [`config_file`] reads every configuration file of the runner and its plugins within bounds;
//! [`private_folder`] checks the folders whose files the runner trusts as its own; with the
//! `oci` feature, [`registry_answer`] reads what the registry clients of the runner and the
//! plugins share.

pub mod config_file;
pub mod docker_config;
mod load;
pub mod private_folder;
#[cfg(feature = "oci")]
pub mod registry_answer;
mod route;
mod source;
mod types;
mod validate;
pub mod version;

pub use load::{FunctionConfigLoadError, load_paths};
pub use route::{
    Conflict, ImageRef, LeftOut, Matched, NoMatch, PlannedExecutor, RouteOutcome, RoutingTable,
    WasmModule,
};
pub use source::{InvalidObject, ObjectId, Source, Sourced};
pub use types::{
    BinaryExecutor, Condition, ConditionStatus, ContainerOverrides, DEFAULT_TIME_TO_LIVE,
    ExecutorStatus, FunctionConfig, FunctionConfigSpec, FunctionConfigStatus, GoExecutor,
    MAX_CONDITION_MESSAGE, PodExecutor, ResultCaching, TemplateOverrides, Time, WasmExecutor,
};
pub use validate::{FieldError, InvalidCacheTtl, InvalidDuration, MAX_CACHE_TTL, validate};
