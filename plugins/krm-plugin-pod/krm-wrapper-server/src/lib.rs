//! krm-runner's wrapper server: the process that fronts one KRM function inside a function pod,
//! compatible with Porch's `func/wrapper-server` (same flags, wire API and error messages), plus
//! a gRPC health probe with `grpc-health-probe`'s command line and a `install` step that copies
//! both into a shared volume without a shell.

pub mod addr;
pub mod flags;
pub mod install;
pub mod probe;
pub mod process;
pub mod resource_list;
pub mod server;
pub mod telemetry;
