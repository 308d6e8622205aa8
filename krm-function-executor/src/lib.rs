//! ConfigHub's function model inside krm-runner: typed functions that read (readonly), change
//! (mutating) or judge (validating) a unit of configuration, a path registry that turns an
//! attribute ("the replicas of workload controllers") into paths per resource type, and an
//! executor that runs a sequence of invocations over one unit: multi-document YAML
//! (Kubernetes/YAML), or a Java `.properties` file seen through its YAML model
//! (AppConfig/Properties, [`toolchain::properties`]).
//!
//! - [`api`]: the wire types, with the JSON field names of ConfigHub's `function/api`;
//!   [`go_json`] writes them as Go's encoding/json does.
//! - [`signature::TypedSignature`]: krm-runner's [`krm_plugin_api::FunctionSignature`]
//!   extended with ConfigHub's facets, converting losslessly to and from ConfigHub's form.
//! - [`path`]: the associative path syntax (`?key:param=value`, `*?key:param`, `@key:param`,
//!   `*@:param`, `|segment`, `*`, `~1`) and its resolution over a resource.
//! - [`registry::PathRegistry`]: attribute -> resource type -> paths; every registered
//!   attribute yields a `get-X`/`set-X` pair ([`functions::path_visitor`]).
//! - [`executor::Executor`]: argument checking, filters, stop-on-error, combined outputs and
//!   per-resource per-path mutations.
//!
//! Edits go through the builtin plugin's lossless YAML editor, so comments, key order and
//! quoting of everything a function does not change are kept.

pub mod api;
pub mod args;
pub mod declared;
pub mod executor;
pub mod functions;
pub mod go_json;
pub mod mutations;
pub mod path;
pub mod plugin;
mod quantity;
pub mod registry;
pub mod resource;
pub mod signature;
pub mod toolchain;

// The lossless YAML parser and editor the builtin plugin edits with too.
use krm_yaml_edit as yaml;

pub use executor::{Executor, ExecutorError};
pub use signature::TypedSignature;
pub use toolchain::Toolchain;
