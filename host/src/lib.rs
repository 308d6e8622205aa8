//! `krm-runner`: a Porch-compatible KRM function runner whose evaluators are plugins.
//!
//! Its commands ship as two executables built from this library. `krm-runner` (`src/main.rs`)
//! runs `fn` itself, the command kpt starts once per function call, and hands every other
//! command line to `krm-runner-server` beside it (`src/bin/krm-runner-server.rs`), which runs
//! them all. The first holds only what a function call reaches, so that a call does not pay
//! for loading the server, its clients and ConfigHub's typed functions.

mod bench;
mod catalog;
mod cli;
mod config;
mod confighub;
mod confighub_serving;
mod contributed;
mod eval;
mod logging;
mod plugin_schema;
mod routing;
mod runtime;
mod server;
mod signals;
mod telemetry;
mod worker;

use std::ffi::OsString;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

pub use cli::FunctionCall;
use cli::{Cli, Command, Flags};
use config::{Config, Sources};
use krm_plugin_api::Answer;
use runtime::{Purpose, Runtime};

/// Exit code for configuration and start-up problems (as Go's flag package uses for usage).
const EXIT_CONFIG: u8 = 2;

/// The executable that runs `fn` itself and hands every other command line on.
const FUNCTION_EXECUTABLE: &str = "krm-runner";

/// The executable that runs every command, next to [`FUNCTION_EXECUTABLE`].
const SERVER_EXECUTABLE: &str = "krm-runner-server";

/// Runs the command line `args` (the program's name first), any command; the process's exit
/// status. Usage errors exit 2, as Go's flag package does.
pub fn run(args: Vec<OsString>) -> u8 {
    if args
        .get(1)
        .is_some_and(|first| first == worker::WORKER_ARGUMENT)
    {
        return worker::main();
    }
    let cli = match Cli::parse_from_args(args) {
        Cli {
            flags,
            command: Some(Command::Function(function)),
        } => return run_function(&FunctionCall { flags, function }),
        cli => cli,
    };
    let Configured {
        figment,
        config,
        mut problems,
    } = match configure(&cli.flags) {
        Ok(configured) => configured,
        Err(code) => return code,
    };
    problems.extend(config.typed_executor_problems());
    let checking = match &cli.command {
        Some(Command::Config { action: None }) => {
            if !problems.is_empty() {
                return report(&problems);
            }
            print_config(&figment, &config);
            return 0;
        }
        Some(Command::Config {
            action: Some(cli::ConfigAction::Check),
        }) => true,
        _ => false,
    };
    // ConfigHub's typed functions run in this process; the evaluator plugins start only when
    // their typed functions are needed.
    let typed = match &cli.command {
        Some(Command::Do(args)) => Some(confighub::Typed::Do(args)),
        Some(Command::Doseq(args)) => Some(confighub::Typed::Doseq(args)),
        Some(Command::List(toolchain)) => Some(confighub::Typed::List(toolchain)),
        Some(Command::Listpaths(toolchain)) => Some(confighub::Typed::Listpaths(toolchain)),
        _ => None,
    };
    if let Some(typed) = typed {
        if !problems.is_empty() {
            return report(&problems);
        }
        keep_freed_heap();
        return exit_code(typed.run(&config, &|| Runtime::start(&config, Purpose::Serve)));
    }
    if let Some(Command::Plugins {
        config_schema: Some(plugin),
    }) = &cli.command
    {
        return match plugin_schema::describe(&config, plugin) {
            Ok(text) => {
                print!("{text}");
                0
            }
            Err(problem) => report(&[problem]),
        };
    }
    if let Some(Command::Eval(
        args @ cli::EvalArgs {
            server: Some(address),
            ..
        },
    )) = &cli.command
    {
        if !problems.is_empty() {
            return report(&problems);
        }
        // The serving runner's plugins answer; none are loaded here.
        return run_async(
            Workers::One,
            eval::run_remote(address, args, config.max_message_bytes),
        );
    }
    // The plugins are checked even when the runner's own configuration has problems, so that
    // every problem is reported at once; they then build without side effects.
    let purpose = if checking || !problems.is_empty() {
        Purpose::Check
    } else if matches!(cli.command, None | Some(Command::Serve)) {
        Purpose::ServeIsolated
    } else {
        Purpose::Serve
    };
    // `eval` makes one call: only the instances it reaches start.
    let started = match (&cli.command, purpose) {
        (Some(Command::Eval(_)), Purpose::Serve) => Runtime::for_one_call(&config),
        _ => Runtime::start(&config, purpose),
    };
    let runtime = match started {
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
    let runs_functions = match cli.command {
        None | Some(Command::Serve) => {
            adopt_orphans(krm_plugin_api::process::adopt_orphans);
            true
        }
        Some(Command::Eval(_)) => {
            adopt_orphans(krm_plugin_api::process::adopt_orphans_for_one_call);
            true
        }
        _ => false,
    };
    let workers = match cli.command {
        None | Some(Command::Serve | Command::Bench(_)) => Workers::Many,
        _ => Workers::One,
    };
    let code = run_async(workers, async {
        match &cli.command {
            None | Some(Command::Serve) => serve(runtime, &config).await.map(|()| 0),
            Some(Command::Eval(args)) => {
                keep_freed_heap();
                eval::run(&runtime, args, config.max_message_bytes).await
            }
            Some(Command::Plugins { .. }) => {
                print_plugins(&runtime);
                Ok(0)
            }
            Some(Command::Bench(args)) => bench::run(&config, args).await.map(|()| 0),
            Some(Command::Functions {
                resolve: Some(image),
                tag,
                ..
            }) => print_resolution(&runtime, &config, image, tag.as_deref()),
            Some(Command::Functions { status: true, .. }) => print_status(&runtime).await,
            Some(Command::Functions { name, .. }) => print_functions(&runtime, name.as_deref()),
            Some(
                Command::Config { .. }
                | Command::Function(_)
                | Command::Do(_)
                | Command::Doseq(_)
                | Command::List(_)
                | Command::Listpaths(_),
            ) => unreachable!("handled before the plugins start"),
        }
    });
    if runs_functions {
        krm_plugin_api::process::kill_orphans_now();
    }
    code
}

/// `krm-runner fn`: the function the call names, found by starting only the instances it takes
/// to find it (see `runtime::function_instance`), runs on stdin.
pub fn run_function(call: &FunctionCall) -> u8 {
    let (config, problems) = match configure_call(&call.flags) {
        Ok(configured) => configured,
        Err(code) => return code,
    };
    if !problems.is_empty() {
        return report(&problems);
    }
    keep_freed_heap();
    let name = &call.function.name;
    let instance = match runtime::function_instance(&config, name) {
        Ok(instance) => instance,
        Err(problems) => return report(&problems),
    };
    adopt_orphans(krm_plugin_api::process::adopt_orphans_for_one_call);
    let outcome = eval::run_function(
        instance,
        name,
        &call.function.data,
        config.max_message_bytes,
    );
    krm_plugin_api::process::kill_orphans_now();
    exit_code(outcome)
}

/// Replaces this process with `krm-runner-server` (next to this one, symbolic links
/// resolved) running the command line `args`; returns only when that cannot start.
pub fn exec_server(args: &[OsString]) -> u8 {
    use std::os::unix::process::CommandExt;
    let server = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(SERVER_EXECUTABLE),
        Err(error) => {
            return report(&[format!(
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
    report(&[format!(
        "cannot run {}: {error} (it is installed next to {FUNCTION_EXECUTABLE}, which runs \
         every command but `fn` through it)",
        server.display()
    )])
}

/// For a process that runs one call and exits: glibc's allocator keeps the heap it frees (no
/// trimming) and serves large buffers from it (no mmap per buffer), so that each parse tree
/// and output of a sequence reuses the pages the last one touched instead of faulting in fresh
/// ones (5% of the CPU of `doseq` and of `fn` at 1,000 objects). A server keeps the defaults,
/// which give memory back.
fn keep_freed_heap() {
    const KEPT_FREE: libc::c_int = 256 << 20;
    // SAFETY: mallopt only sets glibc's allocator thresholds; it takes the allocator's lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGEST_FROM_THE_HEAP as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE);
    }
}

/// The largest allocation [`keep_freed_heap`] has glibc serve from the heap.
const LARGEST_FROM_THE_HEAP: usize = 32 << 20;

/// For a process that runs one call on `input_bytes` of input, after [`keep_freed_heap`]: the
/// heap the call will touch (parse tree, output and their copies: about ten times the input) is
/// filled by one `madvise` instead of a page fault per page, which costs this VM 1.1 µs a page
/// instead of about 2. The block is freed at once and, below [`LARGEST_FROM_THE_HEAP`], stays
/// in the heap for the call's own allocations. A small input touches too little to matter.
pub(crate) fn populate_heap_for(input_bytes: usize) {
    const WORTH_IT: usize = 64 << 10;
    const HEAP_PER_INPUT_BYTE: usize = 10;
    const PAGE: usize = 4096;
    if input_bytes < WORTH_IT {
        return;
    }
    let bytes = input_bytes
        .saturating_mul(HEAP_PER_INPUT_BYTE)
        .min(LARGEST_FROM_THE_HEAP - PAGE);
    // SAFETY: a plain allocation, freed below; only whole pages inside it are advised, and
    // MADV_POPULATE_WRITE only faults them in (on kernels before 5.14 it fails, harmlessly).
    unsafe {
        let block = libc::malloc(bytes);
        if block.is_null() {
            return;
        }
        let start = (block as usize).next_multiple_of(PAGE);
        let end = (block as usize + bytes) / PAGE * PAGE;
        if end > start {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            );
        }
        libc::free(block);
    }
}

/// Makes this process the reaper of the orphans of the functions it runs (by `adopt`, with or
/// without a sweep while it serves), so that it can end those that leave their process group.
fn adopt_orphans(adopt: fn() -> std::io::Result<()>) {
    if let Err(error) = adopt() {
        tracing::warn!(
            %error,
            "cannot become the reaper of orphaned processes: a function's processes that \
             leave its process group may survive its call"
        );
    }
}

/// The threads that run a command's async tasks.
enum Workers {
    /// One per core: serving.
    Many,
    /// The command's own thread: a command that makes one call needs no more, and starting
    /// workers would cost it more than its call.
    One,
}

/// Runs a command on a fresh async runtime; its result is the exit status (a
/// [`BadInvocation`] exits 2, as a usage error does).
fn run_async(
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
fn exit_code(outcome: anyhow::Result<i32>) -> u8 {
    match outcome {
        Ok(code) => code as u8,
        Err(error) if error.is::<BadInvocation>() => report(&[format!("{error:#}")]),
        Err(error) => {
            eprintln!("krm-runner: {error:#}");
            1
        }
    }
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
struct Configured {
    figment: figment::Figment,
    /// The usable part, over the embedded default.
    config: Config,
    problems: Vec<String>,
}

/// The configuration the layers and `flags` make, with the log set up as it says and its
/// warnings logged; the exit status when not even the embedded default extracts.
fn configure(flags: &Flags) -> Result<Configured, u8> {
    // The flags' meaning depends on the configured instances, which the layers below them say.
    let (without_flags, mut problems) = config::layered(&sources(flags));
    let (flag_layer, warnings) = cli::flag_layer(flags, &config::instance_names(&without_flags));
    let figment = config::with_flags(without_flags, flag_layer);
    let (config, more) = config::extract(&figment);
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
fn configure_call(flags: &Flags) -> Result<(Config, Vec<String>), u8> {
    if let Some(config) = config::embedded_alone(&sources(flags)) {
        let instances = config.evaluators.keys().cloned().collect();
        let (flag_layer, warnings) = cli::flag_layer(flags, &instances);
        if flag_layer.is_empty() && warnings.is_empty() {
            start_logging(&config, &warnings);
            return Ok((config, Vec::new()));
        }
    }
    configure(flags).map(|configured| (configured.config, configured.problems))
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

fn report(problems: &[String]) -> u8 {
    let mut stderr = std::io::stderr().lock();
    for problem in problems {
        let _ = writeln!(stderr, "krm-runner: {problem}");
    }
    EXIT_CONFIG
}

async fn serve(runtime: Arc<Runtime>, config: &Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|error| anyhow::anyhow!("listen: cannot bind {}: {error}", config.listen))?;
    let address = listener.local_addr()?;
    let confighub_http =
        match &config.confighub_listen {
            Some(http) => Some(tokio::net::TcpListener::bind(http).await.map_err(|error| {
                anyhow::anyhow!("confighub_listen: cannot bind {http}: {error}")
            })?),
            None => None,
        };
    telemetry::start(&config.telemetry)
        .await
        .map_err(anyhow::Error::new)?;
    runtime.store().report_routes();
    let chain = runtime.served_chain();
    routing::start_sources(runtime.store(), &config.function_configs)
        .await
        .map_err(|problem| anyhow::anyhow!(problem))?;
    tracing::info!(%address, serve = %config.serve, chain = ?chain, "serving");
    if let Some(http) = &confighub_http {
        tracing::info!(address = %http.local_addr()?, "serving ConfigHub's function routes over HTTP");
    }
    // The configuration's problems were reported before serving started.
    let typed = config.typed_executor()?;
    let workers = if config.workers.typed_functions {
        let contributors = contributed::contributors(&runtime);
        Some(worker::typed::TypedWorkers::start(config, contributors).map_err(anyhow::Error::msg)?)
    } else {
        None
    };
    let typed = confighub_serving::TypedFunctions::new(
        typed,
        config.properties_executor(),
        &runtime,
        workers,
    );
    server::serve(
        runtime,
        listener,
        confighub_http,
        typed,
        config.max_message_bytes,
        Duration::from_secs(config.shutdown_grace_seconds),
    )
    .await?;
    // The exporter blocks while it sends what is left.
    let _ = tokio::task::spawn_blocking(telemetry::traces::shutdown).await;
    Ok(())
}

/// Prints `rows` (the header first) in columns as wide as their widest cell, `gap` between them.
fn print_columns<const N: usize>(rows: &[[String; N]], gap: &str) {
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

fn print_plugins(runtime: &Runtime) {
    let header = [
        "INSTANCE",
        "CHAIN",
        "PLUGIN",
        "VERSION",
        "ABI",
        "DELEGATES TO",
        "FILE",
    ];
    let mut rows = vec![header.map(str::to_owned)];
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
        rows.push([
            instance.name.clone(),
            position,
            instance.plugin_name.clone(),
            instance.plugin_version.clone(),
            instance.abi_version.to_string(),
            instance.delegates.join(","),
            file,
        ]);
    }
    print_columns(&rows, " ");
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
            None => {
                return Err(BadInvocation::error(format!(
                    "no evaluator implements a function named {name:?} (known: {})",
                    catalog.names().join(", ")
                )));
            }
        },
    }
    Ok(0)
}

/// `krm-runner config check`, once the configuration has passed what start-up checks: the
/// conflicts between FunctionConfigs too, which serving only logs.
fn report_check(runtime: &Runtime) -> u8 {
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
    0
}

/// `krm-runner functions --resolve IMAGE [--tag CONSTRAINT]`: which FunctionConfig matches,
/// which evaluator would serve, why each executor before it is skipped, and, for a constraint,
/// which version each evaluator would run.
fn print_resolution(
    runtime: &Runtime,
    config: &Config,
    image: &str,
    tag: Option<&str>,
) -> anyhow::Result<i32> {
    let constraint = match runtime::requested_constraint(image, tag.unwrap_or_default()) {
        Ok(constraint) => constraint,
        Err(error) => {
            eprintln!("krm-runner: {error}");
            return Ok(i32::from(EXIT_CONFIG));
        }
    };
    let router = runtime.store().router();
    let explanation = router.explain(image, constraint.as_ref());
    println!("image:           {image}");
    if let Some(constraint) = &constraint {
        println!("tag constraint:  {constraint}");
    }
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
    if serving.is_none() {
        let chain = runtime.served_chain();
        println!(
            "serves:          the served chain {:?} ({})",
            config.serve,
            chain.join(", ")
        );
    }
    let resolution = runtime.probe(image);
    for reason in &resolution.declined {
        println!("declines:        {reason}");
    }
    let outcome = match &resolution.answer {
        Some(Answer::Serves(instance)) => format!("served by {instance:?}"),
        Some(Answer::MayServe(instance)) => {
            format!("{instance:?} may serve it or decline (it cannot tell before a call)")
        }
        None => format!(
            "NOT_FOUND {}",
            krm_plugin_loader::declined_message(image, &resolution.declined)
        ),
    };
    println!("outcome:         {outcome}");
    let (Some(constraint), Some(tag)) = (&constraint, tag) else {
        return Ok(0);
    };
    // What each evaluator the call would meet would run, in the order it meets them.
    println!("versions:");
    let routed = router
        .plan(image, Some(constraint))
        .steps
        .into_iter()
        .map(|step| {
            let answer = if step.resolved {
                Some(Ok(krm_plugin_api::Resolution {
                    image: step.image.clone(),
                    tag: step.image.rsplit(':').next().unwrap_or_default().to_owned(),
                    digest: None,
                    candidates: Vec::new(),
                }))
            } else {
                step.instance.resolve(image, tag, Some(&step.route))
            };
            (format!("{} (routed)", step.instance.name()), answer)
        });
    let served = runtime.served_chain().into_iter().filter_map(|name| {
        let answer = runtime.instance(name)?.resolve(image, tag, None)?;
        Some((name.to_owned(), Some(answer)))
    });
    for (name, answer) in routed.chain(served) {
        let line = match answer {
            None => "does not resolve constraints for this image".to_owned(),
            Some(Ok(resolution)) if resolution.candidates.is_empty() => {
                format!("runs {}", resolution.reference())
            }
            Some(Ok(resolution)) => format!(
                "runs {} (highest satisfying of [{}])",
                resolution.reference(),
                resolution.candidates.join(", ")
            ),
            Some(Err(error)) => error.message,
        };
        println!("  {name:<22} {line}");
    }
    Ok(0)
}

/// `krm-runner functions --status`: one ahead-of-time round over the FunctionConfig files, as
/// a table; exit 1 when something failed.
async fn print_status(runtime: &Arc<Runtime>) -> anyhow::Result<i32> {
    let router = runtime.store().router().clone();
    let reports = tokio::task::spawn_blocking(move || router.resolve_ahead(None)).await?;
    let rows: Vec<[String; 7]> = reports
        .iter()
        .map(|report| {
            [
                report.image.clone(),
                report.executor.field().to_owned(),
                report.tag.clone().unwrap_or_else(|| "(any)".to_owned()),
                report.resolved.clone().unwrap_or_else(|| "-".to_owned()),
                report.digest.clone().unwrap_or_else(|| "-".to_owned()),
                report.state.label().to_owned(),
                report.state.message().to_owned(),
            ]
        })
        .collect();
    let header = [
        "IMAGE",
        "EXECUTOR",
        "CONSTRAINT",
        "RESOLVED",
        "DIGEST",
        "STATE",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 7]> = std::iter::once(header.map(str::to_owned))
        .chain(rows)
        .collect();
    print_columns(&rows, "  ");
    let failed = reports
        .iter()
        .any(|report| matches!(report.state, routing::State::Failed { .. }));
    Ok(i32::from(failed))
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
