//! `krm-runner`: a Porch-compatible KRM function runner whose evaluators are plugins.
//!
//! Its commands ship as two executables built from this library. `krm-runner` (`src/main.rs`)
//! runs `fn` itself, the command kpt starts once per function call, and hands every other
//! command line to `krm-runner-server` beside it (`src/bin/krm-runner-server.rs`), which runs
//! them all. The first holds only what a function call reaches, so that a call does not pay
//! for loading the server, its clients and ConfigHub's typed functions.
//!
//! This file reads the command line and hands it to its command (`commands/`). Besides the
//! commands, the library offers what the benchmark harness (`krm-runner-bench`) measures in
//! process: the configuration, and the runtime that loads the plugins and builds their
//! instances.

mod allocator;
mod cache;
mod cli;
mod commands;
mod config;
mod confighub;
mod contributed;
mod function_index;
mod logging;
mod routing;
mod runtime;
mod server;
mod signals;
mod telemetry;
pub mod trust;
mod worker;

use std::ffi::OsString;

use cli::{Cli, Command};
pub use cli::{Flags, FunctionCall};
use commands::confighub::Typed;
pub use commands::{FUNCTION_EXECUTABLE, SERVER_EXECUTABLE};
pub use config::{Config, EvaluatorConfig};
pub use runtime::{Purpose, Runtime};

/// Runs the command line `args` (the program's name first), any command; the process's exit
/// status. Usage errors exit 2, as Go's flag package does.
pub fn run(args: Vec<OsString>) -> u8 {
    if args
        .get(1)
        .is_some_and(|first| first == worker::WORKER_ARGUMENT)
    {
        return worker::main();
    }
    let Cli { flags, command } = Cli::parse_from_args(args);
    let command = command.unwrap_or(Command::Serve);
    if command.only_prints() {
        signals::quiet_on_closed_stdout();
    }
    let exit = match command {
        Command::Serve => commands::serve::run(&flags),
        Command::Eval(args) => commands::eval::run(&flags, &args),
        Command::Function(function) => commands::function::run(&FunctionCall { flags, function }),
        Command::Plugins { config_schema } => {
            commands::plugins::run(&flags, config_schema.as_deref())
        }
        Command::Config { action } => commands::config::run(&flags, action.as_ref()),
        Command::Functions {
            name,
            resolve,
            tag,
            status,
        } => commands::functions::run(
            &flags,
            name.as_deref(),
            resolve.as_deref(),
            tag.as_deref(),
            status,
        ),
        Command::Do(args) => commands::confighub::run(&flags, Typed::Do(&args)),
        Command::Doseq(args) => commands::confighub::run(&flags, Typed::Doseq(&args)),
        Command::List(toolchain) => commands::confighub::run(&flags, Typed::List(&toolchain)),
        Command::Listpaths(toolchain) => {
            commands::confighub::run(&flags, Typed::Listpaths(&toolchain))
        }
        Command::Cache(args) => commands::cache::run(&flags, &args),
    };
    exit.unwrap_or_else(|code| code)
}

/// `krm-runner fn`: the function the call names, found by starting only the instances it takes
/// to find it, runs on stdin.
pub fn run_function(call: &FunctionCall) -> u8 {
    commands::function::run(call).unwrap_or_else(|code| code)
}

/// Replaces this process with `krm-runner-server` (next to this one, symbolic links
/// resolved) running the command line `args`; returns only when that cannot start.
pub fn exec_server(args: &[OsString]) -> u8 {
    use std::os::unix::process::CommandExt;
    let server = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(SERVER_EXECUTABLE),
        Err(error) => {
            return commands::report(&[format!(
                "cannot find {SERVER_EXECUTABLE}: this executable's own path is unknown: {error}"
            )]);
        }
    };
    let mut command = std::process::Command::new(&server);
    if let Some((program, rest)) = args.split_first() {
        // Usage lines name the program as it was called.
        command.arg0(program).args(rest);
    }
    let error = command.exec();
    commands::report(&[format!(
        "cannot run {}: {error} (it is installed next to {FUNCTION_EXECUTABLE}, which runs \
         every command but `fn` through it)",
        server.display()
    )])
}

/// The configuration `flags` make with their layers, for a program built on this library; the
/// exit status once every problem is reported otherwise.
pub fn configuration(flags: &Flags) -> Result<Config, u8> {
    commands::configure(flags)?.without_problems()
}
