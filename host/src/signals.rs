//! Termination signals.

use tokio::signal::unix::{SignalKind, signal};

/// Completes on the next SIGTERM or SIGINT.
pub async fn terminated() {
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler installs");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler installs");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
