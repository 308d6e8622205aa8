//! Running a KRM function as a process, shared by everything that does: the `exec` evaluator
//! (through the plugin SDK, which re-exports this crate), the pods' wrapper server and the
//! runner itself. No plugin ABI here, so a static server binary can use it alone.
//!
//! - [`process`]: spawn with output bounds, process-group kill, the orphan sweep.
//! - [`results`]: the structured results a function printed, for error messages.
//! - [`quoted`]: echoing caller-supplied text in messages with a bounded size.
//! - [`TraceContext`]: the W3C trace context handed to the function's environment.

pub mod process;
mod quoted;
pub mod results;
mod trace;

pub use quoted::{QUOTED_CHARS, Quoted, quoted};
pub use trace::TraceContext;
