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

/// For a command that only prints (a listing, the configuration): a reader that stops early
/// (`krm-runner plugins | head`) ends the process quietly, as it ends `ls`, instead of failing
/// a print. Not for commands that write to child processes or serve, where a closed pipe is
/// an error to answer, not a reason to stop.
pub fn quiet_on_closed_stdout() {
    // SAFETY: setting SIGPIPE's disposition to its default, before any thread that could be
    // writing exists in this command; no handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
