//! `krm-runner`: a Porch-compatible KRM function runner whose evaluators are plugins.

mod bench;
mod catalog;
mod cli;
mod config;
mod eval;
mod logging;
mod routing;
mod runtime;
mod server;
mod signals;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cli::{Cli, Command};
use config::{Config, Sources};
use runtime::{Purpose, Runtime};

/// Exit code for configuration and start-up problems (as Go's flag package uses for usage).
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    let sources = Sources {
        config_file: cli.flags.config_file.clone(),
        skip_system_file: false,
    };
    let loaded = load_config(&cli, &sources);
    let mut problems = loaded.problems;
    let Some(config) = loaded.config else {
        return report(&problems);
    };
    logging::init(&config.log_level, config.log_format);
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    for name in config.unknown_disabled() {
        tracing::warn!("--disable-runtimes: no evaluator instance named {name:?}; ignored");
    }
    let checking = match &cli.command {
        Some(Command::Config { action: None }) => {
            if !problems.is_empty() {
                return report(&problems);
            }
            print_config(&loaded.figment, &config);
            return ExitCode::SUCCESS;
        }
        Some(Command::Config {
            action: Some(cli::ConfigAction::Check),
        }) => true,
        _ => false,
    };
    // The plugins are checked even when the runner's own configuration has problems, so that
    // every problem is reported at once; they then build without side effects.
    let purpose = if checking || !problems.is_empty() {
        Purpose::Check
    } else {
        Purpose::Serve
    };
    let runtime = match Runtime::start(&config, purpose) {
        Ok(runtime) if problems.is_empty() => Arc::new(runtime),
        Ok(_) => return report(&problems),
        Err(more) => {
            for problem in more {
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
            }
            return report(&problems);
        }
    };
    if checking {
        return report_check(&runtime);
    }
    let tokio = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(tokio) => tokio,
        Err(error) => return report(&[format!("cannot start the async runtime: {error}")]),
    };
    let outcome = tokio.block_on(async {
        match &cli.command {
            None | Some(Command::Serve) => serve(runtime, &config).await.map(|()| 0),
            Some(Command::Eval(args)) => eval::run(&runtime, args).await,
            Some(Command::Plugins) => {
                print_plugins(&runtime);
                Ok(0)
            }
            Some(Command::Bench(args)) => bench::run(&config, args).await.map(|()| 0),
            Some(Command::Functions {
                resolve: Some(image),
                ..
            }) => {
                print_resolution(&runtime, &config, image);
                Ok(0)
            }
            Some(Command::Functions { name, .. }) => print_functions(&runtime, name.as_deref()),
            Some(Command::Function { name }) => {
                eval::run_function(&runtime, &catalog::Catalog::new(runtime.functions()), name)
                    .await
            }
            Some(Command::Config { .. }) => unreachable!("handled before serving"),
        }
    });
    // Blocking threads may still be cleaning up cancelled calls; don't wait for them.
    tokio.shutdown_timeout(Duration::from_millis(100));
    match outcome {
        Ok(code) => ExitCode::from(code as u8),
        Err(error) => {
            eprintln!("krm-runner: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The merged configuration and everything wrong with it, host-level.
struct Loaded {
    figment: figment::Figment,
    /// The usable part, over the embedded default; `None` when not even that extracts.
    config: Option<Config>,
    warnings: Vec<String>,
    problems: Vec<String>,
}

fn load_config(cli: &Cli, sources: &Sources) -> Loaded {
    // The flags' meaning depends on the configured instances: the layers are read twice, and
    // the problems reported are the second reading's.
    let (without_flags, _) = config::layered(sources, Default::default());
    let (flags, warnings) = cli::flag_layer(&cli.flags, &config::instance_names(&without_flags));
    let (figment, mut problems) = config::layered(sources, flags);
    let (config, more) = config::extract(&figment);
    problems.extend(more);
    Loaded {
        figment,
        config,
        warnings,
        problems,
    }
}

fn report(problems: &[String]) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    for problem in problems {
        let _ = writeln!(stderr, "krm-runner: {problem}");
    }
    ExitCode::from(EXIT_CONFIG)
}

async fn serve(runtime: Arc<Runtime>, config: &Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|error| anyhow::anyhow!("listen: cannot bind {}: {error}", config.listen))?;
    let address = listener.local_addr()?;
    let chain = runtime.served_chain();
    routing::start_sources(runtime.store(), &config.function_configs)
        .await
        .map_err(|problem| anyhow::anyhow!(problem))?;
    tracing::info!(%address, serve = %config.serve, chain = ?chain, "serving");
    server::serve(
        runtime,
        listener,
        config.max_message_bytes,
        Duration::from_secs(config.shutdown_grace_seconds),
    )
    .await
}

fn print_plugins(runtime: &Runtime) {
    println!(
        "{:<12} {:<6} {:<10} {:<9} {:<4} {:<22} FILE",
        "INSTANCE", "CHAIN", "PLUGIN", "VERSION", "ABI", "DELEGATES TO"
    );
    for instance in runtime.instances() {
        let position = match (instance.disabled, instance.position) {
            (true, _) => "off".to_owned(),
            (false, Some(position)) => position.to_string(),
            (false, None) => "-".to_owned(),
        };
        let file = instance
            .plugin_file
            .as_ref()
            .map_or_else(|| "(disabled)".to_owned(), |p| p.display().to_string());
        println!(
            "{:<12} {:<6} {:<10} {:<9} {:<4} {:<22} {}",
            instance.name,
            position,
            instance.plugin_name,
            instance.plugin_version,
            instance.abi_version,
            instance.delegates.join(","),
            file
        );
    }
    let mut described = std::collections::BTreeMap::new();
    for instance in runtime.instances().iter().filter(|i| !i.disabled) {
        described.insert(&instance.plugin_name, &instance.description);
    }
    println!();
    for (plugin, description) in described {
        println!("{plugin}: {description}");
    }
}

fn print_functions(runtime: &Runtime, name: Option<&str>) -> anyhow::Result<i32> {
    let catalog = catalog::Catalog::new(runtime.functions());
    match name {
        None => print!("{}", catalog.table()),
        Some(name) => match catalog.find(name) {
            Some((instance, signature)) => {
                print!("{}", catalog::Catalog::describe(instance, signature))
            }
            None => anyhow::bail!(
                "no evaluator implements a function named {name:?} (known: {})",
                catalog.names().join(", ")
            ),
        },
    }
    Ok(0)
}

/// `krm-runner config check`, once the configuration has passed what start-up checks: the
/// conflicts between FunctionConfigs too, which serving only logs.
fn report_check(runtime: &Runtime) -> ExitCode {
    let conflicts: Vec<String> = runtime
        .store()
        .conflicts()
        .into_iter()
        .map(|conflict| format!("function_configs.paths: {conflict}"))
        .collect();
    if !conflicts.is_empty() {
        return report(&conflicts);
    }
    println!(
        "configuration OK; {} FunctionConfigs OK",
        runtime.store().file_objects()
    );
    ExitCode::SUCCESS
}

/// `krm-runner functions --resolve IMAGE`: which FunctionConfig matches, which evaluator
/// would serve, and why each executor before it is skipped.
fn print_resolution(runtime: &Runtime, config: &Config, image: &str) {
    let explanation = runtime.store().router().explain(image);
    println!("image:           {image}");
    let mut serving = None;
    match &explanation.matched {
        Ok(object) => println!("matched:         {object}"),
        Err(reason) => println!("matched:         none ({reason})"),
    }
    for (executor, outcome) in &explanation.executors {
        let line = match outcome {
            Ok(runs) if serving.is_none() => {
                serving = Some(runs.clone());
                format!("serves: {runs}")
            }
            Ok(runs) => format!("next if declined: {runs}"),
            Err(reason) => format!("skipped: {reason}"),
        };
        println!("{:<16} {line}", format!("{}:", executor.field()));
    }
    match serving {
        Some(_) => {}
        None => {
            let chain = runtime.served_chain();
            println!(
                "serves:          the served chain {:?} ({})",
                config.serve,
                chain.join(", ")
            );
        }
    }
}

fn print_config(figment: &figment::Figment, config: &Config) {
    match yaml_serde::to_string(config) {
        Ok(yaml) => print!("{yaml}"),
        Err(error) => eprintln!("krm-runner: cannot print the configuration: {error}"),
    }
    println!("# where each value came from:");
    for (key, value, source) in config::provenance(figment) {
        println!("# {key} = {value}  <- {source}");
    }
}
