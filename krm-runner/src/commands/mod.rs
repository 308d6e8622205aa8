//! The commands, one module each, and what they share: the configuration and its problems, the
//! plugins started for a command, the async runtime it runs on and its exit status.

pub mod cache;
pub mod config;
pub mod confighub;
pub mod eval;
pub mod function;
pub mod functions;
pub mod plugins;
pub mod serve;

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{self, Flags};
use crate::config::{self as configuration, Config, Sources};
use crate::logging;
use crate::runtime::{Purpose, Runtime};

/// A command's exit status: `Err` when it stopped before doing its work, its problems reported.
pub type Exit = Result<u8, u8>;

/// Exit code for configuration and start-up problems (as Go's flag package uses for usage).
pub const EXIT_CONFIG: u8 = 2;

/// The executable that runs `fn` itself and hands every other command line on.
pub const FUNCTION_EXECUTABLE: &str = "krm-runner";

/// The executable that runs every command, next to [`FUNCTION_EXECUTABLE`].
pub const SERVER_EXECUTABLE: &str = "krm-runner-server";

/// Makes this process the reaper of the orphans of the functions it runs (by `adopt`, with or
/// without a sweep while it serves), so that it can end those that leave their process group.
pub fn adopt_orphans(adopt: fn() -> std::io::Result<()>) {
    if let Err(error) = adopt() {
        tracing::warn!(
            %error,
            "cannot become the reaper of orphaned processes: a function's processes that \
             leave its process group may survive its call"
        );
    }
}

/// The threads that run a command's async tasks.
pub enum Workers {
    /// One per core: serving.
    Many,
    /// The command's own thread: a command that makes one call needs no more, and starting
    /// workers would cost it more than its call.
    One,
}

/// Runs a command on a fresh async runtime; its result is the exit status (a
/// [`BadInvocation`] exits 2, as a usage error does).
pub fn run_async(
    workers: Workers,
    command: impl std::future::Future<Output = anyhow::Result<i32>>,
) -> u8 {
    let mut builder = match workers {
        Workers::Many => tokio::runtime::Builder::new_multi_thread(),
        Workers::One => tokio::runtime::Builder::new_current_thread(),
    };
    let tokio = match builder.enable_all().build() {
        Ok(tokio) => tokio,
        Err(error) => return report(&[format!("cannot start the async runtime: {error}")]),
    };
    let outcome = tokio.block_on(command);
    // Blocking threads may still be cleaning up cancelled calls; don't wait for them.
    tokio.shutdown_timeout(Duration::from_millis(100));
    exit_code(outcome)
}

/// A command's exit status: its own, 2 for a [`BadInvocation`], 1 for any other error.
pub fn exit_code(outcome: anyhow::Result<i32>) -> u8 {
    match outcome {
        Ok(code) => code as u8,
        Err(error) if error.is::<BadInvocation>() => report(&[causes(&error)]),
        Err(error) => {
            eprintln!("krm-runner: {}", causes(&error));
            1
        }
    }
}

/// `error` and its causes, each once: a library that wraps an error in one saying the same
/// (a refused connection: "tcp connect error" twice) does not make the reader read it twice.
fn causes(error: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if said.last() != Some(&text) {
            said.push(text);
        }
    }
    said.join(": ")
}

/// The command's arguments or input are unusable (exit status 2, like a usage error).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInvocation(String);

impl BadInvocation {
    pub fn error(message: impl Into<String>) -> anyhow::Error {
        Self(message.into()).into()
    }
}

/// The merged configuration and everything wrong with it, host-level.
pub struct Configured {
    pub figment: figment::Figment,
    /// The usable part, over the embedded default.
    pub config: Config,
    pub problems: Vec<String>,
}

impl Configured {
    /// The configuration when it has no problems; otherwise the exit status, every problem
    /// reported.
    pub fn without_problems(self) -> Result<Config, u8> {
        if self.problems.is_empty() {
            Ok(self.config)
        } else {
            Err(report(&self.problems))
        }
    }

    /// The runtime `purpose` asks for, started by `start`, or the exit status after every
    /// problem is reported: the configuration's and the plugins'. With configuration problems
    /// the plugins are still checked, so that every problem is reported at once; they then
    /// build without side effects.
    pub fn start_runtime(
        &self,
        purpose: Purpose,
        start: fn(&Config, Purpose) -> Result<Runtime, Vec<String>>,
    ) -> Result<Arc<Runtime>, u8> {
        let mut problems = self.problems.clone();
        let purpose = if problems.is_empty() {
            purpose
        } else {
            Purpose::Check
        };
        match start(&self.config, purpose) {
            Ok(runtime) if problems.is_empty() => Ok(Arc::new(runtime)),
            Ok(_) => Err(report(&problems)),
            Err(more) => {
                for problem in more {
                    if !problems.contains(&problem) {
                        problems.push(problem);
                    }
                }
                Err(report(&problems))
            }
        }
    }
}

/// The configuration the layers and `flags` make, with the log set up as it says and its
/// warnings logged, and every problem it has (the typed executors' among them); the exit status
/// when not even the embedded default extracts.
pub fn configure(flags: &Flags) -> Result<Configured, u8> {
    let mut configured = configure_layers(flags)?;
    let typed = configured.config.typed_executor_problems();
    configured.problems.extend(typed);
    Ok(configured)
}

/// [`configure`] without the typed executors' problems, which a function call does not meet.
fn configure_layers(flags: &Flags) -> Result<Configured, u8> {
    // The flags' meaning depends on the configured instances, which the layers below them say.
    let (without_flags, mut problems) = configuration::layered(&sources(flags));
    let (flag_layer, warnings) =
        cli::flag_layer(flags, &configuration::instance_names(&without_flags));
    let figment = configuration::with_flags(without_flags, flag_layer);
    let (config, more) = configuration::extract(&figment);
    problems.extend(more);
    let Some(config) = config else {
        return Err(report(&problems));
    };
    start_logging(&config, &warnings);
    Ok(Configured {
        figment,
        config,
        problems,
    })
}

/// [`configure`] for a one-shot function call, which needs no record of where each value came
/// from: with nothing layered over the embedded default and no flag setting a key, the
/// configuration is the embedded default, read as is.
pub fn configure_call(flags: &Flags) -> Result<(Config, Vec<String>), u8> {
    if let Some(config) = configuration::embedded_alone(&sources(flags)) {
        let instances = config.evaluators.keys().cloned().collect();
        let (flag_layer, warnings) = cli::flag_layer(flags, &instances);
        if flag_layer.is_empty() && warnings.is_empty() {
            start_logging(&config, &warnings);
            return Ok((config, Vec::new()));
        }
    }
    configure_layers(flags).map(|configured| (configured.config, configured.problems))
}

fn sources(flags: &Flags) -> Sources {
    Sources {
        config_file: flags.config_file.clone(),
        skip_system_file: false,
    }
}

/// Sets up the log as `config` says and logs the configuration's `warnings`.
fn start_logging(config: &Config, warnings: &[String]) {
    logging::init(&config.log_level, config.log_format);
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    for name in config.unknown_disabled() {
        tracing::warn!("--disable-runtimes: no evaluator instance named {name:?}; ignored");
    }
}

/// Writes `problems` to stderr, one a line; the exit status for them.
pub fn report(problems: &[String]) -> u8 {
    let mut stderr = std::io::stderr().lock();
    for problem in problems {
        let _ = writeln!(stderr, "krm-runner: {problem}");
    }
    EXIT_CONFIG
}

/// Prints `rows` (the header first) in columns as wide as their widest cell, `gap` between them.
pub fn print_columns<const N: usize>(rows: &[[String; N]], gap: &str) {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            line.push_str(&format!("{cell:<width$}{gap}"));
        }
        println!("{}", line.trim_end());
    }
}
