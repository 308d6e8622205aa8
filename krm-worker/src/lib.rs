//! Supervised worker processes: the runner's own executable, started again to run the code a
//! caller sends (Starlark scripts, yq programs, CEL expressions, patterns), so that a failed
//! allocation, a runaway loop or a crash ends that process and the one call it was serving,
//! never the runner.
//!
//! - [`Pool`] (the runner's side): workers started ahead of calls, each under hard
//!   [`Limits`] (address space, CPU time per call, no inherited descriptors), one call at a
//!   time, killed when the call is cancelled, replaced when they die and after a number of
//!   calls.
//! - [`serve`] (the worker's side): takes its role from the first message, then answers calls
//!   until its input ends.
//! - [`Message`]: what crosses the pipes between them, a JSON header and byte parts, each
//!   bounded.
//!
//! What a worker does with a call is its role's business (the runner's `worker` module): this
//! crate only moves messages, enforces the limits and says why a worker died.

mod limits;
mod message;
mod pool;
mod serve;

pub use limits::Limits;
pub use message::{Kind, Message, MessageError};
pub use pool::{Killer, Pool, WorkerCommand, WorkerError};
pub use serve::{Channel, Role, serve};
