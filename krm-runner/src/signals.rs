//! Termination signals.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Completes on the next SIGTERM or SIGINT. The handlers are installed at the call, not when
/// the future is first polled: a signal that arrives in between is caught, not fatal.
pub fn terminated() -> impl Future<Output = ()> {
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}
