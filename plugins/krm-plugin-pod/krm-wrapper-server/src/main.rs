//! `wrapper-server`: serves one KRM function over Porch's evaluator gRPC API inside a function
//! pod.
//!
//! ```text
//! wrapper-server [--port 9446] [--max-request-body-size 6291456] [--verbosity 2] -- ENTRYPOINT...
//! wrapper-server install DIR
//! ```

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use krm_runner_proto::serving;
use krm_wrapper_server::flags::{self, Flag};
use krm_wrapper_server::{install, process, server, telemetry};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tracing_subscriber::EnvFilter;

const USAGE: &str = "\
usage: wrapper-server [--port N] [--max-request-body-size BYTES] [--verbosity N] -- ENTRYPOINT [ARGS...]
       wrapper-server install DIR

Serves evaluator.FunctionEvaluator/EvaluateFunction and grpc.health.v1.Health on every interface;
each call runs ENTRYPOINT with the ResourceList on stdin.

  --port N                        listen port (default 9446)
  --max-request-body-size BYTES   largest request and response message (default 6291456)
  --verbosity N                   log verbosity: 0-2 info, 3-4 debug, 5 trace (default 2)

install DIR copies this binary and the grpc-health-probe beside it into DIR (created if needed),
mode 0555: the init container's job in a function pod, with no shell or cp needed.
";

const ACCEPTED: &[Flag] = &[
    Flag::value("port"),
    Flag::value("max-request-body-size"),
    Flag::value("verbosity"),
    Flag::boolean("help"),
    Flag::boolean("h"),
];

/// Exit code of a command-line error, as Go's flag package.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match flags::parse(&args, ACCEPTED) {
        Ok(parsed) => parsed,
        Err(error) => return usage_error(&error),
    };
    if parsed.is_set("help") || parsed.is_set("h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match parsed.positional.as_slice() {
        [] => {}
        [command, dir] if command == "install" && parsed.after_dash.is_none() => {
            return run_install(PathBuf::from(dir));
        }
        [command, ..] if command == "install" => {
            return usage_error("install takes exactly one argument, the directory");
        }
        [extra, ..] => {
            return usage_error(&format!(
                "unexpected argument {extra:?}: the function's entrypoint goes after `--`"
            ));
        }
    }
    let port = match parsed.get("port").unwrap_or("9446").parse::<u16>() {
        Ok(port) => port,
        Err(_) => return usage_error("--port must be a port number (0-65535)"),
    };
    let max_message_bytes = match parsed
        .get("max-request-body-size")
        .unwrap_or("6291456")
        .parse::<usize>()
    {
        Ok(bytes) if bytes > 0 => bytes,
        _ => return usage_error("--max-request-body-size must be a positive number of bytes"),
    };
    let Ok(verbosity) = parsed.get("verbosity").unwrap_or("2").parse::<i32>() else {
        return usage_error("--verbosity must be a number");
    };
    let entrypoint = parsed.after_dash.unwrap_or_default();
    if entrypoint.is_empty() || entrypoint[0].is_empty() {
        return usage_error(
            "no function entrypoint: give the function's command after `--`, \
             e.g. `wrapper-server --port 9446 -- /usr/local/bin/function`",
        );
    }
    init_logging(verbosity);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fatal(&format!("cannot start the async runtime: {error}")),
    };
    let config = server::Config {
        entrypoint,
        max_message_bytes,
    };
    match runtime.block_on(serve(config, port)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fatal(&error),
    }
}

/// How long calls in flight get to finish after SIGTERM before they are killed: Kubernetes'
/// default termination grace period.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

async fn serve(config: server::Config, port: u16) -> Result<(), String> {
    if let Err(error) = telemetry::start() {
        tracing::error!("serving without traces: {error}");
    }
    let listener = server::bind(port)
        .await
        .map_err(|e| format!("failed to listen on port {port}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("failed to listen on port {port}: {e}"))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    if let Err(error) = process::adopt_orphans() {
        tracing::warn!(
            %error,
            "cannot become the reaper of orphaned processes: a function's processes that \
             leave its process group may survive its call"
        );
    }
    tracing::info!(
        address = %local,
        entrypoint = ?config.entrypoint,
        max_message_bytes = config.max_message_bytes,
        "listening"
    );
    let (stopping_tx, mut stopping_rx) = watch::channel(false);
    let stop = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        tracing::info!("shutting down: no new calls; waiting for calls in flight");
        let _ = stopping_tx.send(true);
        // A second signal ends everything now, function processes included.
        tokio::spawn(async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
            tracing::warn!("second signal: killing calls in flight and exiting");
            process::kill_all();
            process::kill_orphans_now();
            std::process::exit(1);
        });
    };
    let stopping = async move {
        let _ = stopping_rx.wait_for(|stopping| *stopping).await;
    };
    let grace_over = || {
        tracing::warn!("grace period over: killing calls in flight");
        process::kill_all();
    };
    serving::drain_within(
        server::serve(config, listener, stop),
        stopping,
        process::calls_in_flight,
        SHUTDOWN_GRACE,
        grace_over,
    )
    .await
    .map_err(|e| format!("server failed: {e}"))?;
    process::kill_orphans_now();
    tokio::task::spawn_blocking(telemetry::shutdown)
        .await
        .map_err(|e| format!("exporting the last spans failed: {e}"))?;
    tracing::info!("stopped");
    Ok(())
}

fn run_install(dir: PathBuf) -> ExitCode {
    let wrapper = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => return fatal(&format!("cannot locate this executable: {error}")),
    };
    match install::install(&wrapper, &dir) {
        Ok(installed) => {
            for path in installed {
                println!("installed {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => fatal(&format!("install into {} failed: {error}", dir.display())),
    }
}

/// Porch's `--verbosity` (klog levels) as a tracing filter.
fn init_logging(verbosity: i32) {
    let directive = match verbosity {
        ..=2 => "info",
        3 | 4 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(directive))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("wrapper-server: {message}\n\n{USAGE}");
    ExitCode::from(EXIT_USAGE)
}

fn fatal(message: &str) -> ExitCode {
    eprintln!("unexpected error: {message}");
    ExitCode::FAILURE
}
