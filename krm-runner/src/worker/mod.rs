//! The code a caller sends runs in worker processes when the runner serves: the calls of
//! instances configured `isolated` ([`plugin`]) and ConfigHub's typed functions ([`typed`]).
//! A worker is this executable started as `krm-runner-server __worker`; `krm_worker` supervises
//! it, and this module gives it its roles.

pub mod plugin;
pub mod typed;

use std::ffi::OsString;
use std::time::{Duration, Instant};

use krm_plugin_api::{CallContext, CancelReason, ErrorKind, EvalError};
use krm_worker::{Limits, Role, WorkerCommand, WorkerError};
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// The first argument that makes this executable a worker.
pub const WORKER_ARGUMENT: &str = "__worker";

/// The variables a worker keeps of the runner's environment: a plugin finds its layout-check
/// markers (`HOME`, `XDG_CACHE_HOME`) as the runner does; nothing else is handed on.
const KEPT_VARIABLES: [&str; 3] = ["PATH", "HOME", "XDG_CACHE_HOME"];

/// The roles a worker can take, as its `Init` header names them.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RoleSpec {
    Plugin(plugin::PluginSpec),
    Typed(typed::TypedSpec),
}

/// Runs this process as a worker (`krm-runner-server __worker`); its exit status.
pub fn main() -> u8 {
    let status = krm_worker::serve(|role, parts, channel| {
        let spec: RoleSpec =
            serde_json::from_value(role).map_err(|error| format!("unknown role: {error}"))?;
        let role: Box<dyn Role> = match spec {
            RoleSpec::Plugin(spec) => Box::new(plugin::PluginRole::start(spec)?),
            RoleSpec::Typed(spec) => Box::new(typed::TypedRole::start(spec, parts, channel)?),
        };
        Ok(role)
    });
    u8::try_from(status).unwrap_or(1)
}

/// How to start a worker of `role`.
fn command(role: &RoleSpec, parts: Vec<Vec<u8>>) -> std::io::Result<WorkerCommand> {
    Ok(WorkerCommand {
        program: std::env::current_exe()?,
        args: vec![OsString::from(WORKER_ARGUMENT)],
        env: KEPT_VARIABLES
            .iter()
            .filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?)))
            .collect(),
        // Serializing plain data to a JSON value cannot fail.
        role: serde_json::to_value(role).unwrap_or_default(),
        role_parts: parts,
    })
}

/// The pools' limits from the configuration.
fn limits(config: &Config) -> Limits {
    let workers = &config.workers;
    Limits {
        memory_bytes: workers.memory_limit_mib << 20,
        cpu_seconds_per_call: workers.cpu_seconds_per_call,
        calls_per_worker: workers.calls_per_worker,
        idle: workers.idle,
        max: workers.max,
        // A request, a ResourceList and a log each fit in a message; the headroom covers a
        // JSON request wrapping a message-sized unit.
        message_bytes: config.max_message_bytes.saturating_mul(2),
        queue_wait: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(workers.idle_timeout_seconds),
    }
}

/// The time left before `deadline`, as a call header carries it (an instant does not cross
/// processes).
fn remaining_ms(deadline: Option<Instant>) -> Option<u64> {
    deadline.map(|deadline| {
        u64::try_from(
            deadline
                .saturating_duration_since(Instant::now())
                .as_millis(),
        )
        .unwrap_or(u64::MAX)
    })
}

/// The deadline `remaining_ms` stands for, in the worker.
fn deadline_in(remaining_ms: Option<u64>) -> Option<Instant> {
    remaining_ms.and_then(|ms| Instant::now().checked_add(Duration::from_millis(ms)))
}

/// A worker's failure as the call's error, of its [`error_kind`]; a cancelled call answers its
/// cancellation.
fn call_error(error: WorkerError, context: &CallContext<'_>, image: &str, who: &str) -> EvalError {
    if let WorkerError::Cancelled = error {
        let reason = context
            .cancel_reason()
            .unwrap_or(CancelReason::CallerCancelled);
        return reason.to_error(image);
    }
    EvalError::new(
        error_kind(&error),
        format!("{who} for {}: {}", krm_plugin_api::quoted(image), error),
    )
}

/// The kind of error a worker's failure is: a limit passed is RESOURCE_EXHAUSTED, a worker
/// that cannot start UNAVAILABLE, a crash INTERNAL.
fn error_kind(error: &WorkerError) -> ErrorKind {
    match error {
        WorkerError::OutOfMemory { .. }
        | WorkerError::CpuLimit { .. }
        | WorkerError::TooLarge(_)
        | WorkerError::Busy { .. } => ErrorKind::ResourceExhausted,
        WorkerError::Cancelled => ErrorKind::Cancelled,
        WorkerError::Start { .. } => ErrorKind::Unavailable,
        WorkerError::Died { .. } | WorkerError::Protocol(_) => ErrorKind::Internal,
    }
}
