//! `krm-runner-server`: every `krm-runner` command (serving among them); `krm-runner` runs
//! the command lines it does not run itself through this executable.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(krm_runner::run(std::env::args_os().collect()))
}
