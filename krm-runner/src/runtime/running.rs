//! The calls whose evaluators are running, process-wide: what shutdown waits for and cancels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use krm_plugin_api::CancelReason;
use krm_plugin_api::process::{self, CallInFlight};
use krm_plugin_loader::HostCallContext;

/// Calls whose evaluators have not returned yet (their processes may still run).
static RUNNING_CALLS: Mutex<Option<RunningCalls>> = Mutex::new(None);

#[derive(Default)]
struct RunningCalls {
    next_id: u64,
    contexts: HashMap<u64, Arc<HostCallContext>>,
}

fn running_calls() -> std::sync::MutexGuard<'static, Option<RunningCalls>> {
    RUNNING_CALLS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call on its blocking thread, registered until its evaluators return: shutdown waits for
/// these, a forced exit cancels them, and the orphan sweep leaves alone the processes they
/// may own.
pub(super) struct RunningCall {
    id: u64,
    _orphans: CallInFlight,
}

/// Counts a call that is not an EvaluateFunction (a typed-function sequence) among the calls
/// shutdown waits for and cancels when its grace period ends, until the guard is dropped.
pub fn track_call(context: &Arc<HostCallContext>) -> impl Drop + Send + 'static {
    RunningCall::register(context)
}

impl RunningCall {
    pub(super) fn register(context: &Arc<HostCallContext>) -> Self {
        let orphans = process::call_in_flight();
        let mut running = running_calls();
        let running = running.get_or_insert_with(RunningCalls::default);
        running.next_id += 1;
        running.contexts.insert(running.next_id, context.clone());
        Self {
            id: running.next_id,
            _orphans: orphans,
        }
    }
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        if let Some(running) = running_calls().as_mut() {
            running.contexts.remove(&self.id);
        }
    }
}

/// How many calls' evaluators are still running.
pub fn running_call_count() -> usize {
    running_calls()
        .as_ref()
        .map_or(0, |running| running.contexts.len())
}

/// Cancels every running call; evaluators kill their processes from the cancellation
/// callbacks, on this thread, before this returns.
pub fn cancel_running_calls(reason: CancelReason) {
    let contexts: Vec<_> = running_calls()
        .as_ref()
        .map(|running| running.contexts.values().cloned().collect())
        .unwrap_or_default();
    for context in contexts {
        context.cancel(reason);
    }
}
