//! `krm-runner`: runs `krm-runner fn ...` itself, and every other command line through
//! `krm-runner-server`, which replaces this process (see the library's documentation).

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    match krm_runner::FunctionCall::parse(&args) {
        Some(call) => krm_runner::run_function(&call),
        None => krm_runner::exec_server(&args),
    }
}
