//! Command line: krm-runner's own flags, Porch's flags (same names and defaults), subcommands.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use figment::value::{Dict, Value};

use crate::config::set_path;

#[derive(Debug, Parser)]
#[command(
    name = "krm-runner",
    version,
    about = "Runs KRM functions for Porch, kpt and friends"
)]
pub struct Cli {
    #[command(flatten)]
    pub flags: Flags,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve gRPC (the default when no subcommand is given).
    Serve,
    /// Run one function through the served chain, like `kpt fn eval`.
    Eval(EvalArgs),
    /// List the evaluator instances, their plugins and their place in the served chain.
    Plugins {
        /// Show the `config:` keys of plugin NAME (or of instance NAME's plugin), with an
        /// example instance, instead; works with a configuration that does not start.
        #[arg(long, value_name = "NAME")]
        config_schema: Option<String>,
    },
    /// Print the merged configuration and where each value came from; `check` validates it
    /// and the FunctionConfig files without starting anything.
    Config {
        #[command(subcommand)]
        action: Option<ConfigAction>,
    },
    /// List the functions evaluators implement themselves (e.g. the builtins), or show one's
    /// signature.
    Functions {
        /// A short name or image; without it, all are listed.
        name: Option<String>,
        /// Explain how IMAGE is routed: the FunctionConfig that matches it, the evaluator that
        /// would serve it, and why each executor before it is skipped.
        #[arg(long, value_name = "IMAGE", conflicts_with = "name")]
        resolve: Option<String>,
        /// With --resolve: the version constraint a caller sends with the untagged IMAGE
        /// (Porch's request `Tag`), and which version each evaluator would run for it.
        #[arg(long, value_name = "CONSTRAINT", requires = "resolve")]
        tag: Option<String>,
        /// Work out every FunctionConfig executor tag now, as the server does ahead of calls:
        /// a table of image, executor, constraint, resolved tag, digest, state and last error.
        #[arg(long, conflicts_with_all = ["name", "resolve"])]
        status: bool,
    },
    /// Be the KRM function NAME: ResourceList on stdin, ResourceList on stdout, log on stderr,
    /// exit status; for `kpt fn eval --exec` and Kptfile `exec:` steps.
    #[command(name = "fn")]
    Function(FunctionArgs),
    /// ConfigHub's `fctl do`: invoke one typed function on a unit's config data. Exit status
    /// 0, or 1 when the invocation failed.
    Do(DoArgs),
    /// ConfigHub's `fctl doseq`: invoke a sequence of typed functions on a unit's config data.
    /// Exit status 0, or 1 when an invocation failed.
    Doseq(DoSeqArgs),
    /// ConfigHub's `fctl list`: the typed functions and their signatures.
    List(ToolchainArg),
    /// ConfigHub's `fctl listpaths`: the path registry (attribute, resource type, path).
    Listpaths(ToolchainArg),
    /// Show what the result cache's stores hold (the configured disk store, or a serving
    /// runner's stores with --server), or empty them with --clear.
    Cache(CacheArgs),
}

impl Command {
    /// Whether the command only prints what it finds, writing to no other process.
    pub fn only_prints(&self) -> bool {
        matches!(
            self,
            Self::Plugins { .. }
                | Self::Config { .. }
                | Self::Functions { .. }
                | Self::List(_)
                | Self::Listpaths(_)
        )
    }
}

/// `krm-runner fn`'s own arguments.
#[derive(Debug, Args)]
pub struct FunctionArgs {
    /// A function some evaluator implements (see `krm-runner functions`).
    pub name: String,
    /// Run NAME without asking the trust policy (`policy:`): for a local run its user vouches
    /// for; nothing else skips it.
    #[arg(long)]
    pub skip_trust_policy: bool,
    /// `key=value` pairs: a ConfigMap functionConfig replacing the input's, as kpt
    /// builds one; the input may then also be plain resource documents.
    #[arg(last = true)]
    pub data: Vec<String>,
}

/// A `krm-runner fn` command line, read.
#[derive(Debug)]
pub struct FunctionCall {
    pub(crate) flags: Flags,
    pub(crate) function: FunctionArgs,
}

impl FunctionCall {
    /// `args` (the program's name first) read as `krm-runner fn ...`, by the `fn` subcommand's
    /// definition alone (its arguments and the flags every command takes), which means the same
    /// as the whole command line's definition for such a line and costs a fraction of building
    /// that. `None` for a line that does not start with `fn`, or that would print help or an
    /// error: the whole definition says those, as it would for any other command.
    pub fn parse(args: &[OsString]) -> Option<Self> {
        let rest = args.get(1..)?;
        if rest.first()? != "fn" {
            return None;
        }
        let command = Flags::augment_args(FunctionArgs::augment_args(clap::Command::new("fn")));
        let rest = normalize_go_flags(&command, rest.iter().cloned());
        let matches = command.try_get_matches_from(rest).ok()?;
        Some(Self {
            flags: Flags::from_arg_matches(&matches).ok()?,
            function: FunctionArgs::from_arg_matches(&matches).ok()?,
        })
    }
}

/// `krm-runner cache`'s arguments.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// Empty the stores (a serving runner's memory and disk stores, with --server).
    #[arg(long)]
    pub clear: bool,
    /// A serving runner's metrics listener (`telemetry.metrics`), such as 127.0.0.1:9464:
    /// its memory and disk stores through the `/cache` path there.
    #[arg(long, value_name = "ADDRESS")]
    pub server: Option<String>,
}

/// The toolchain of the config data, as ConfigHub names it.
#[derive(Debug, Args)]
pub struct ToolchainArg {
    /// Toolchain of the config data: Kubernetes/YAML or AppConfig/Properties.
    #[arg(long, value_name = "TOOLCHAIN", default_value = "Kubernetes/YAML")]
    pub toolchain: String,
}

#[derive(Debug, Args)]
pub struct DoArgs {
    /// The unit's config data (multi-document YAML); `-` reads stdin.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The unit's name (letters, digits, space and -_.()@#); lower-cased, its slug.
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// A typed function (see `krm-runner list`).
    #[arg(value_name = "FUNCTION")]
    pub function: String,
    /// Arguments in parameter order, or `--name=value` (after which all must be named; put
    /// `--` before FUNCTION so that they are not read as flags).
    #[arg(
        value_name = "ARG",
        allow_hyphen_values = true,
        trailing_var_arg = true
    )]
    pub arguments: Vec<String>,
    /// Print only the resulting config data, changed or not.
    #[arg(long, conflicts_with = "output_only")]
    pub data_only: bool,
    /// Print only the function's output.
    #[arg(long)]
    pub output_only: bool,
    /// Give up after this many seconds (decimals allowed): the invocation running stops
    /// inside its loop over resources (a plugin function, as soon as it watches its call),
    /// and nothing is printed but the error (exit 1).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub toolchain: ToolchainArg,
}

#[derive(Debug, Args)]
pub struct DoSeqArgs {
    /// The unit's config data (multi-document YAML); `-` reads stdin.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The unit's name (letters, digits, space and -_.()@#); lower-cased, its slug.
    #[arg(value_name = "UNIT")]
    pub unit: String,
    /// A FunctionInvocationList as JSON:
    /// `[{"FunctionName": "set-replicas", "Arguments": [{"Value": 3}]}]`.
    #[arg(value_name = "INVOCATIONS")]
    pub invocations: String,
    /// The first N validating invocations are filters: one that fails ends the sequence
    /// quietly.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub num_filters: usize,
    /// Stop at the first invocation that fails.
    #[arg(long)]
    pub stop: bool,
    /// Give up after this many seconds (decimals allowed): the invocation running stops
    /// inside its loop over resources (a plugin function, as soon as it watches its call),
    /// and nothing is printed but the error (exit 1).
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    #[command(flatten)]
    pub toolchain: ToolchainArg,
}

#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Validate the configuration and the FunctionConfig files; exit 2 listing every problem.
    Check,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The function image (or any name an evaluator answers to).
    #[arg(long)]
    pub image: String,
    /// Input: a ResourceList or resource documents; `-` or absent reads stdin.
    #[arg(short = 'i', long = "input")]
    pub input: Option<PathBuf>,
    /// The functionConfig, as a YAML file.
    #[arg(long = "fn-config")]
    pub fn_config: Option<PathBuf>,
    /// Send the call to the runner serving at ADDR (`host:port` or a URL) over gRPC instead
    /// of running it in this process; the instance that served is printed to stderr.
    #[arg(long, value_name = "ADDR")]
    pub server: Option<String>,
    /// `key=value` pairs: a ConfigMap functionConfig, as kpt builds one.
    #[arg(last = true)]
    pub data: Vec<String>,
}

#[derive(Debug, Args)]
pub struct Flags {
    /// Configuration file layered over the defaults.
    #[arg(long, global = true, env = "KRM_RUNNER_CONFIG", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Address to bind, e.g. 127.0.0.1:9445.
    #[arg(long, global = true, value_name = "ADDR")]
    pub listen: Option<String>,
    /// A folder searched for plugin libraries (repeatable; before the configured ones).
    #[arg(long = "plugin-dir", global = true, value_name = "DIR")]
    pub plugin_dirs: Vec<PathBuf>,
    /// The evaluator instance that answers calls.
    #[arg(long, global = true, value_name = "INSTANCE")]
    pub serve: Option<String>,
    /// Log lines as text or as JSON objects.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormatArg>,

    /// Porch: gRPC port, bound on all interfaces (0.0.0.0:PORT).
    #[arg(long, global = true, value_name = "PORT")]
    pub port: Option<u16>,
    /// Porch: comma-separated evaluator instances to take out of service (e.g. `exec,pod`).
    #[arg(long, global = true, value_name = "LIST")]
    pub disable_runtimes: Option<String>,
    /// Porch: folder of function executables (the `exec` instance's `functions_dir`).
    #[arg(long, global = true, value_name = "DIR")]
    pub functions: Option<PathBuf>,
    /// Porch (v1.5): exec map file `functions: [{function, images}]` for the `exec` instance.
    #[arg(long = "config", global = true, value_name = "FILE")]
    pub porch_config: Option<PathBuf>,
    /// Porch: largest gRPC message, in bytes (default 6291456).
    #[arg(long, global = true, value_name = "BYTES")]
    pub max_request_body_size: Option<usize>,
    /// Porch: klog verbosity 0-5 (2 = info), or a level name.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Porch: prefix for image names without a registry.
    #[arg(long, global = true, value_name = "PREFIX")]
    pub default_image_prefix: Option<String>,

    #[command(flatten)]
    pub pod: PodFlags,
}

/// Porch's pod-evaluator flags, handed to the `pod` instance's config under the same names
/// (dashes become underscores).
#[derive(Debug, Args)]
pub struct PodFlags {
    /// Porch: namespace of function pods (and of the FunctionConfigs watched in a cluster).
    #[arg(long, global = true, value_name = "NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Porch: idle time after which a function pod is deleted, a Go duration (default 30m).
    #[arg(long, global = true, value_name = "DURATION")]
    pub pod_ttl: Option<String>,
    /// Porch: how often idle function pods are looked for, a Go duration (default 1m).
    #[arg(long, global = true, value_name = "DURATION")]
    pub scan_interval: Option<String>,
    /// Porch: start pods for the configured images at start-up (default true).
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub warm_up_pod_cache: Option<bool>,
    /// Porch: calls waiting on one pod before another pod is started (default 2).
    #[arg(long, global = true, value_name = "N")]
    pub max_waitlist_length: Option<i64>,
    /// Porch: pods per function image at most (default 1).
    #[arg(long, global = true, value_name = "N")]
    pub max_parallel_pods_per_function: Option<i64>,
    /// Porch: times a call whose function pod is unreachable (UNAVAILABLE) is tried again on
    /// another pod, while the caller's deadline allows (default 2).
    #[arg(long, global = true, value_name = "N")]
    pub max_grpc_retries: Option<i64>,
    /// Porch: authenticate to registries with the docker config at --registry-auth-secret-path.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub enable_private_registries: Option<bool>,
    /// Porch: docker config JSON for private registries.
    #[arg(long, global = true, value_name = "FILE")]
    pub registry_auth_secret_path: Option<String>,
    /// Porch: the pull Secret that function pods name, kept from that file.
    #[arg(long, global = true, value_name = "NAME")]
    pub registry_auth_secret_name: Option<String>,
    /// Porch: trust the CA certificate in --tls-secret-path for registries.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    pub enable_private_registries_tls: Option<bool>,
    /// Porch: folder holding the registries' CA certificate (ca.crt or ca.pem).
    #[arg(long, global = true, value_name = "DIR")]
    pub tls_secret_path: Option<String>,
    /// Porch (v1.5): per-image pod settings file (TTL, pod count, waitlist, resources).
    #[arg(long, global = true, value_name = "FILE")]
    pub pod_cache_config: Option<String>,
    /// Porch (v1.4): pod template ConfigMap name; accepted, the base PodTemplate replaces it.
    #[arg(long, global = true, value_name = "NAME")]
    pub function_pod_template: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormatArg {
    Text,
    Json,
}

impl Cli {
    /// Parses the command line `args` (the program's name first), accepting Go's single-dash
    /// long flags (`-port 9445`). Usage errors exit 2, as Go's flag package does.
    pub fn parse_from_args(args: Vec<OsString>) -> Self {
        let command = command_for(&args);
        let args = normalize_go_flags(&command, args);
        let matches = command.get_matches_from(args);
        Self::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
    }
}

/// The server's own flags: Porch's function-runner flags and `--listen`. They are accepted
/// anywhere (so Porch's command lines work unchanged, with or without `serve`), but only the
/// top level and `serve` list them in `--help`: other subcommands list what concerns them.
const SERVER_FLAGS: &[&str] = &[
    "listen",
    "port",
    "disable_runtimes",
    "functions",
    "porch_config",
    "max_request_body_size",
    "log_level",
    "default_image_prefix",
    "pod_namespace",
    "pod_ttl",
    "scan_interval",
    "warm_up_pod_cache",
    "max_waitlist_length",
    "max_parallel_pods_per_function",
    "max_grpc_retries",
    "enable_private_registries",
    "registry_auth_secret_path",
    "registry_auth_secret_name",
    "enable_private_registries_tls",
    "tls_secret_path",
    "pod_cache_config",
    "function_pod_template",
];

/// The command line's definition for `args`, with the server flags hidden from the help of
/// subcommands other than `serve`: each subcommand `args` names gets hidden copies, which clap's
/// propagation of global flags then leaves in place. Only a command line naming a subcommand
/// prints its help, and copying every server flag into every subcommand was most of the cost
/// of parsing a command line, so the others are left alone.
pub fn command_for(args: &[OsString]) -> clap::Command {
    let command = Cli::command();
    let hidden: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| SERVER_FLAGS.contains(&arg.get_id().as_str()))
        .map(|arg| arg.clone().hide(true))
        .collect();
    let named: Vec<String> = command
        .get_subcommands()
        .filter(|sub| sub.get_name() != "serve")
        .filter(|sub| {
            std::iter::once(sub.get_name())
                .chain(sub.get_all_aliases())
                .any(|name| args.iter().any(|arg| arg == name))
        })
        .map(|sub| sub.get_name().to_owned())
        .collect();
    named.into_iter().fold(command, |command, name| {
        command.mut_subcommand(name, |sub| sub.args(hidden.clone()))
    })
}

/// Go's flag package takes `-name` for long flags; clap wants `--name`.
pub fn normalize_go_flags(
    command: &clap::Command,
    args: impl IntoIterator<Item = OsString>,
) -> Vec<OsString> {
    let longs: std::collections::HashSet<&str> = command
        .get_subcommands()
        .flat_map(clap::Command::get_arguments)
        .chain(command.get_arguments())
        .filter_map(clap::Arg::get_long)
        .collect();
    let mut after_separator = false;
    args.into_iter()
        .map(|arg| {
            if after_separator {
                return arg;
            }
            let Some(text) = arg.to_str() else { return arg };
            if text == "--" {
                after_separator = true;
                return arg;
            }
            match text.strip_prefix('-') {
                Some(rest) if !rest.starts_with('-') => {
                    let name = rest.split('=').next().unwrap_or(rest);
                    if name.len() > 1 && longs.contains(name) {
                        OsString::from(format!("-{text}"))
                    } else {
                        arg
                    }
                }
                _ => arg,
            }
        })
        .collect()
}

/// What the flags set, as a config layer, plus warnings for flags that have no target.
pub fn flag_layer(
    flags: &Flags,
    instances: &std::collections::BTreeSet<String>,
) -> (Dict, Vec<String>) {
    let mut dict = Dict::new();
    let mut warnings = Vec::new();
    let mut set = |path: &[&str], value: Value| set_path(&mut dict, path, value);
    if let Some(listen) = &flags.listen {
        set(&["listen"], Value::from(listen.clone()));
    }
    if let Some(port) = flags.port {
        set(&["listen"], Value::from(format!("0.0.0.0:{port}")));
    }
    if !flags.plugin_dirs.is_empty() {
        let dirs: Vec<Value> = flags
            .plugin_dirs
            .iter()
            .map(|d| Value::from(d.display().to_string()))
            .collect();
        set(&["plugin_dirs"], Value::from(dirs));
    }
    if let Some(serve) = &flags.serve {
        set(&["serve"], Value::from(serve.clone()));
    }
    if let Some(format) = flags.log_format {
        let format = match format {
            LogFormatArg::Text => "text",
            LogFormatArg::Json => "json",
        };
        set(&["log_format"], Value::from(format));
    }
    if let Some(list) = &flags.disable_runtimes {
        let names: Vec<Value> = list
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(Value::from)
            .collect();
        set(&["disabled"], Value::from(names));
    }
    if let Some(bytes) = flags.max_request_body_size {
        set(&["max_message_bytes"], Value::from(bytes as u64));
    }
    if let Some(level) = &flags.log_level {
        set(&["log_level"], Value::from(level.clone()));
    }
    if let Some(prefix) = &flags.default_image_prefix {
        set(&["default_image_prefix"], Value::from(prefix.clone()));
    }

    // Porch's flags also govern FunctionConfig routing: relative binary paths resolve against
    // --functions, FunctionConfigs live in the pod namespace, and warm-up follows its flag.
    if let Some(dir) = &flags.functions {
        set(
            &["function_configs", "functions_dir"],
            Value::from(dir.display().to_string()),
        );
    }
    if let Some(namespace) = &flags.pod.pod_namespace {
        set(
            &["function_configs", "cluster", "namespace"],
            Value::from(namespace.clone()),
        );
    }
    if let Some(warm_up) = flags.pod.warm_up_pod_cache {
        set(&["function_configs", "warm_up"], Value::from(warm_up));
    }
    let mut instance_flag = |instance: &str, flag: &str, key: &str, value: Value| {
        if instances.contains(instance) {
            set_path(&mut dict, &["evaluators", instance, "config", key], value);
        } else {
            warnings.push(format!(
                "--{flag} ignored: no evaluator instance named {instance:?}"
            ));
        }
    };
    if let Some(dir) = &flags.functions {
        instance_flag(
            "exec",
            "functions",
            "functions_dir",
            Value::from(dir.display().to_string()),
        );
    }
    if let Some(file) = &flags.porch_config {
        instance_flag(
            "exec",
            "config",
            "porch_config_file",
            Value::from(file.display().to_string()),
        );
    }
    let pod = &flags.pod;
    let strings = [
        ("pod-namespace", &pod.pod_namespace),
        ("pod-ttl", &pod.pod_ttl),
        ("scan-interval", &pod.scan_interval),
        ("registry-auth-secret-path", &pod.registry_auth_secret_path),
        ("registry-auth-secret-name", &pod.registry_auth_secret_name),
        ("tls-secret-path", &pod.tls_secret_path),
        ("pod-cache-config", &pod.pod_cache_config),
        ("function-pod-template", &pod.function_pod_template),
    ];
    for (flag, value) in strings {
        if let Some(value) = value {
            instance_flag(
                "pod",
                flag,
                &flag.replace('-', "_"),
                Value::from(value.clone()),
            );
        }
    }
    let bools = [
        ("warm-up-pod-cache", pod.warm_up_pod_cache),
        ("enable-private-registries", pod.enable_private_registries),
        (
            "enable-private-registries-tls",
            pod.enable_private_registries_tls,
        ),
    ];
    for (flag, value) in bools {
        if let Some(value) = value {
            instance_flag("pod", flag, &flag.replace('-', "_"), Value::from(value));
        }
    }
    let numbers = [
        ("max-waitlist-length", pod.max_waitlist_length),
        (
            "max-parallel-pods-per-function",
            pod.max_parallel_pods_per_function,
        ),
        ("max-grpc-retries", pod.max_grpc_retries),
    ];
    for (flag, value) in numbers {
        if let Some(value) = value {
            instance_flag("pod", flag, &flag.replace('-', "_"), Value::from(value));
        }
    }
    (dict, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<OsString> {
        line.split(' ').map(OsString::from).collect()
    }

    /// What the whole definition makes of `args`, or its error.
    fn whole(args: Vec<OsString>) -> Result<Cli, clap::Error> {
        let command = command_for(&args);
        let args = normalize_go_flags(&command, args);
        Cli::from_arg_matches(&command.try_get_matches_from(args)?)
    }

    #[test]
    fn a_function_call_means_what_the_whole_command_line_definition_says() {
        for line in [
            "krm-runner fn set-namespace",
            "krm-runner fn set-namespace -- namespace=prod team=a",
            "krm-runner fn --config-file c.yaml set-namespace",
            "krm-runner fn -log-level 5 set-namespace --plugin-dir /p -- -port=1",
            "krm-runner fn set-namespace --port 9 --warm-up-pod-cache --pod-ttl 1h",
        ] {
            let call = FunctionCall::parse(&words(line)).unwrap_or_else(|| panic!("{line}"));
            let Cli {
                flags,
                command: Some(Command::Function(function)),
            } = whole(words(line)).unwrap()
            else {
                panic!("{line} is not `fn` to the whole definition");
            };
            assert_eq!(format!("{:?}", call.flags), format!("{flags:?}"), "{line}");
            assert_eq!(
                format!("{:?}", call.function),
                format!("{function:?}"),
                "{line}"
            );
        }
    }

    #[test]
    fn help_errors_and_other_commands_are_left_to_the_whole_definition() {
        for line in [
            "krm-runner",
            "krm-runner fn",
            "krm-runner fn --help",
            "krm-runner fn set-namespace --no-such-flag",
            "krm-runner fn set-namespace extra",
            "krm-runner --log-level 5 fn set-namespace",
            "krm-runner eval --image fn",
            "krm-runner functions fn",
        ] {
            assert!(FunctionCall::parse(&words(line)).is_none(), "{line}");
        }
        assert!(whole(words("krm-runner fn set-namespace --no-such-flag")).is_err());
        assert!(whole(words("krm-runner --log-level 5 fn set-namespace")).is_ok());
    }

    #[test]
    fn go_style_flags_become_long_flags() {
        let args = [
            "krm-runner",
            "-port",
            "9445",
            "-max-request-body-size=10",
            "-i",
            "x",
            "--",
            "-port",
        ];
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let normalized = normalize_go_flags(&command_for(&args), args);
        let normalized: Vec<_> = normalized.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            normalized,
            [
                "krm-runner",
                "--port",
                "9445",
                "--max-request-body-size=10",
                "-i",
                "x",
                "--",
                "-port"
            ]
        );
    }
}
