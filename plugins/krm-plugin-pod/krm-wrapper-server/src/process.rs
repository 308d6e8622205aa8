//! Running the function once per call, on top of [`krm_function_process::process`]: the process
//! group is killed when the call is cancelled (its future dropped), when its deadline passes,
//! and after the function exits; processes that left the group are swept up after the call
//! (see [`process::adopt_orphans`]).

use std::io;
use std::process::Command;

use krm_function_process::process::{self, Killer};
pub use krm_function_process::process::{
    Exited, OutputLimits, adopt_orphans, calls_in_flight, kill_all, kill_orphans_now,
};
use tokio::sync::oneshot;

/// How a call's process ended.
#[derive(Debug)]
pub enum Outcome {
    /// The process could not be started.
    NotStarted(io::Error),
    /// The process exited (or was killed for writing too much).
    Exited(Exited),
    /// The deadline passed; the process group was killed.
    DeadlineExceeded,
}

/// Runs `entrypoint` with `input` on stdin. Dropping the returned future (the caller went away)
/// kills the process group.
pub async fn run(
    entrypoint: &[String],
    environment: &[(String, String)],
    input: Vec<u8>,
    deadline: Option<tokio::time::Instant>,
    limits: OutputLimits,
) -> Outcome {
    let Some((program, args)) = entrypoint.split_first() else {
        return Outcome::NotStarted(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no entrypoint configured",
        ));
    };
    // Environment and working directory are inherited (the wrapper runs inside the function's
    // own container), plus the call's own variables.
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(environment.iter().map(|(k, v)| (k, v)));
    let in_flight = process::call_in_flight();
    let child = match process::spawn(command, limits) {
        Ok(child) => child,
        Err(error) => return Outcome::NotStarted(error),
    };
    let killer = child.killer();
    let kill_on_drop = KillOnDrop(killer.clone());
    let (sender, receiver) = oneshot::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait(&input));
        drop(in_flight);
    });
    let exited = match deadline {
        Some(deadline) => tokio::select! {
            exited = receiver => exited,
            () = tokio::time::sleep_until(deadline) => {
                killer.kill();
                kill_on_drop.disarm();
                return Outcome::DeadlineExceeded;
            }
        },
        None => receiver.await,
    };
    kill_on_drop.disarm();
    match exited {
        Ok(exited) => Outcome::Exited(exited),
        Err(_) => Outcome::NotStarted(io::Error::other("the supervising thread failed")),
    }
}

/// Kills the process group when a call is dropped before its process finished.
struct KillOnDrop(Killer);

impl KillOnDrop {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.0.kill();
    }
}
