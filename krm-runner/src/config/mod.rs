//! The runner's configuration: layered with figment, validated all at once.
//!
//! Layers, later winning: the embedded default (`config/krm-runner.yaml`), then
//! `/etc/krm-runner/config.yaml`, then `--config-file` (or `KRM_RUNNER_CONFIG`), then
//! OpenTelemetry's `OTEL_*` variables (the `telemetry:` keys), then environment variables
//! `KRM_RUNNER_<KEY>` (nested keys joined with `__`), then command-line flags.

pub mod telemetry;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Json, Serialized};
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider};
use krm_function_executor::Executor;
use krm_function_executor::declared::AttributeDeclaration;
use krm_runner_function_config::config_file::{self, YamlError};
use serde::{Deserialize, Serialize};

use self::telemetry::OtelEnv;
pub use self::telemetry::TelemetryConfig;
use crate::logging::{self, LogFormat};
use crate::trust::{Policy, PolicyConfig};

/// The embedded default configuration, usable as is: `config/krm-runner.yaml`, converted to
/// JSON by the build script.
const EMBEDDED_DEFAULT: &str = include_str!(concat!(env!("OUT_DIR"), "/krm-runner.json"));
pub const SYSTEM_CONFIG_FILE: &str = "/etc/krm-runner/config.yaml";
const ENV_PREFIX: &str = "KRM_RUNNER_";
const EMBEDDED_NAME: &str = "embedded default";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the gRPC server binds.
    pub listen: String,
    /// Address ConfigHub's function routes (HTTP/JSON, `/function/...`) are served on, beside
    /// the gRPC listener; absent, they are not served over HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confighub_listen: Option<String>,
    /// Largest request and response message, in bytes (Porch: `--max-request-body-size`).
    pub max_message_bytes: usize,
    /// Folders searched for plugin libraries, in order, before the executable's own folder.
    #[serde(default)]
    pub plugin_dirs: Vec<PathBuf>,
    /// The evaluator instance that answers EvaluateFunction.
    pub serve: String,
    /// Evaluator instances by name.
    pub evaluators: BTreeMap<String, EvaluatorConfig>,
    /// Instances removed from service (Porch: `--disable-runtimes`); delegating evaluators skip
    /// them.
    #[serde(default)]
    pub disabled: Vec<String>,
    /// Prefix for image names without a registry (Porch: `--default-image-prefix`).
    pub default_image_prefix: String,
    /// `error`, `warn`, `info`, `debug` or `trace`, or a tracing filter directive.
    pub log_level: String,
    pub log_format: LogFormat,
    /// On SIGTERM, how long in-flight calls may run before they are cancelled.
    pub shutdown_grace_seconds: u64,
    /// FunctionConfig routing: which evaluator runs which function image.
    #[serde(default)]
    pub function_configs: FunctionConfigs,
    /// Traces and metrics; off unless configured (also by the `OTEL_*` variables).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// ConfigHub's typed-function executor.
    #[serde(default, skip_serializing_if = "ExecutorSettings::is_empty")]
    pub executor: ExecutorSettings,
    /// The worker processes code a caller sends runs in, when serving: the calls of
    /// `isolated` instances and ConfigHub's typed functions.
    #[serde(default)]
    pub workers: WorkersConfig,
    /// Which function images may run (docs/trust.md); absent, every image may.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// The result cache: answers of pure calls (and of images marked here) given again
    /// without running the function (docs/cache.md).
    #[serde(default)]
    pub cache: CacheConfig,
}

/// The result cache's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Whether answers are cached at all; off, every call runs and answers `bypass`.
    pub enabled: bool,
    /// The memory the cached answers may take, in bytes; the least recently used go first.
    pub max_bytes: u64,
    /// How long the answer of a pure call is kept, in seconds.
    pub ttl_seconds: u64,
    /// Images whose calls are cached although their evaluator does not declare them pure
    /// (exec, pod): the operator vouches that they read nothing but their input.
    pub images: Vec<CachedImages>,
    /// A store on disk behind the memory one, surviving restarts; absent, answers are kept in
    /// memory only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskCacheConfig>,
}

/// The result cache's store on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskCacheConfig {
    /// The folder of the stored answers, created (mode 0700) when missing; it must belong to
    /// the runner's user and be writable by no one else.
    pub path: PathBuf,
    /// The disk the stored answers may take, in bytes; the oldest go first.
    pub max_bytes: u64,
}

/// Images an operator marks cacheable, by prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedImages {
    /// The images starting with this text, e.g. `example.com/fns/` or `krm-runner/identity`.
    pub prefix: String,
    /// How long their answers are kept, in seconds.
    pub ttl_seconds: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: 64 << 20,
            ttl_seconds: 3600,
            images: Vec::new(),
            disk: None,
        }
    }
}

impl CacheConfig {
    /// The largest `max_bytes`: the store's weights are counted in 32 bits per entry, and no
    /// deployment means to keep more answers than this in memory.
    const MAX_BYTES: u64 = 1 << 40;

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.max_bytes < 1 << 20 || self.max_bytes > Self::MAX_BYTES {
            problems.push(format!(
                "cache.max_bytes: {} is outside 1 MiB to 1 TiB",
                self.max_bytes
            ));
        }
        if self.ttl_seconds == 0 {
            problems.push("cache.ttl_seconds: must be at least 1".to_owned());
        }
        for (index, images) in self.images.iter().enumerate() {
            if images.prefix.trim().is_empty() {
                problems.push(format!("cache.images[{index}].prefix: empty"));
            }
            if images.ttl_seconds == 0 {
                problems.push(format!(
                    "cache.images[{index}].ttl_seconds: must be at least 1"
                ));
            }
        }
        if let Some(disk) = &self.disk {
            if disk.path.as_os_str().is_empty() {
                problems.push("cache.disk.path: empty".to_owned());
            }
            if disk.max_bytes < 1 << 20 || disk.max_bytes > Self::MAX_BYTES {
                problems.push(format!(
                    "cache.disk.max_bytes: {} is outside 1 MiB to 1 TiB",
                    disk.max_bytes
                ));
            }
        }
        problems
    }
}

/// The limits of the worker processes (see `krm_worker`). A call that passes one is answered
/// RESOURCE_EXHAUSTED naming it; the worker is replaced and the runner serves on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersConfig {
    /// Address space of each worker (`RLIMIT_AS`), in MiB.
    pub memory_limit_mib: u64,
    /// CPU time one call may use, in seconds, whatever its deadline.
    pub cpu_seconds_per_call: u64,
    /// A worker is replaced after this many calls.
    pub calls_per_worker: u32,
    /// Workers per pool kept started and waiting, so that a call never waits for one to start.
    pub idle: usize,
    /// Workers per pool at most; calls beyond wait for a free one until their deadline.
    pub max: usize,
    /// Workers idle this long beyond `idle` are stopped, giving their memory back.
    pub idle_timeout_seconds: u64,
    /// ConfigHub's typed functions served over HTTP and gRPC run in workers (yq, CEL,
    /// where-filter and the rest take programs and patterns from the caller).
    pub typed_functions: bool,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        Self {
            memory_limit_mib: 1024,
            cpu_seconds_per_call: 60,
            calls_per_worker: 1000,
            idle: 1,
            max: 4,
            idle_timeout_seconds: 10,
            typed_functions: true,
        }
    }
}

impl WorkersConfig {
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut at_least = |field: &str, value: u64, least: u64| {
            if value < least {
                problems.push(format!(
                    "workers.{field}: {value} is too small (at least {least})"
                ));
            }
        };
        // The Starlark interpreter alone reserves a 256 MiB stack and may use a 256 MiB heap.
        at_least("memory_limit_mib", self.memory_limit_mib, 512);
        at_least("cpu_seconds_per_call", self.cpu_seconds_per_call, 1);
        at_least("calls_per_worker", u64::from(self.calls_per_worker), 1);
        at_least("max", self.max as u64, 1);
        if self.memory_limit_mib > 1 << 30 {
            problems.push(format!(
                "workers.memory_limit_mib: {} is more than any machine has",
                self.memory_limit_mib
            ));
        }
        if self.idle > self.max {
            problems.push(format!(
                "workers.idle: {} is more than workers.max ({})",
                self.idle, self.max
            ));
        }
        problems
    }
}

/// What operators add to ConfigHub's executor without a rebuild.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecutorSettings {
    /// Attributes added to the path registry, each with a `get-X`/`set-X` pair.
    pub attributes: Vec<AttributeDeclaration>,
}

impl ExecutorSettings {
    fn is_empty(&self) -> bool {
        self.attributes.is_empty()
    }
}

/// Where FunctionConfigs come from and which instances run their executors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FunctionConfigs {
    /// Files and folders of FunctionConfig YAML; relative paths resolve against the working
    /// directory. Changes are picked up while the runner serves.
    pub paths: Vec<PathBuf>,
    /// How often the files are checked for changes.
    pub reload_interval_seconds: f64,
    /// Where relative `binaryExecutor.path`s and `wasmExecutor.path`s resolve (Porch:
    /// `--functions`).
    pub functions_dir: PathBuf,
    /// Watch FunctionConfigs in a cluster too.
    pub cluster: ClusterSource,
    /// The instances standing for each executor.
    pub executors: ExecutorInstances,
    /// After the FunctionConfigs are read, tell the pod executor to start a pod for each one
    /// with podExecutor tags (Porch: `--warm-up-pod-cache`), and the wasm executor to compile
    /// each wasmExecutor's module.
    pub warm_up: bool,
    /// How often every executor tag is worked out ahead of calls (constraints resolved, binaries
    /// checked; see `krm-runner functions --status`), besides whenever FunctionConfigs change.
    pub resolve_interval_seconds: f64,
    /// Whether `paths` is the embedded default's: it names the shipped FunctionConfigs, which
    /// an installed runner keeps beside its plugins ([`FunctionConfigs::file_paths`]); missing,
    /// it is warned about rather than refused.
    #[serde(skip)]
    pub paths_are_default: bool,
}

impl FunctionConfigs {
    /// The files and folders to read: `paths`, except that the embedded default's relative
    /// `config/functions/` (a source checkout's) gives way to the `functions/` folder of the
    /// installed runner ([`installed_dirs`]) when there is one, so that an installed runner
    /// routes the same from any working directory.
    pub fn file_paths(&self) -> Vec<PathBuf> {
        if self.paths_are_default
            && let Some(installed) = installed_dirs()
                .into_iter()
                .map(|dir| dir.join(INSTALLED_FUNCTION_CONFIGS))
                .find(|folder| folder.is_dir())
        {
            return vec![installed];
        }
        self.paths.clone()
    }
}

/// The folder beside the plugins that holds the shipped FunctionConfigs of an installed runner
/// (`deploy/install.sh` puts `config/functions/` there).
const INSTALLED_FUNCTION_CONFIGS: &str = "functions";

/// The folder under `<prefix>/lib` holding an installed runner's plugins.
const INSTALLED_PLUGIN_FOLDER: &str = "krm-runner";

/// The places an installed or freshly built runner keeps its plugins and shipped files, relative
/// to the running executable (symbolic links resolved, so a link on PATH to a build folder
/// works): its own folder (a cargo build folder, or an image's `/home/nonroot`), then
/// `<prefix>/lib/krm-runner` for `<prefix>/bin/krm-runner` (what `deploy/install.sh` lays out).
pub fn installed_dirs() -> Vec<PathBuf> {
    std::env::current_exe()
        .map(|exe| installed_dirs_of(&exe))
        .unwrap_or_default()
}

fn installed_dirs_of(exe: &Path) -> Vec<PathBuf> {
    let Some(own) = exe.parent() else {
        return Vec::new();
    };
    let mut dirs = vec![own.to_owned()];
    if let Some(prefix) = own.parent() {
        dirs.push(prefix.join("lib").join(INSTALLED_PLUGIN_FOLDER));
    }
    dirs
}

impl Default for FunctionConfigs {
    fn default() -> Self {
        Self {
            paths: Vec::new(),
            reload_interval_seconds: 2.0,
            functions_dir: PathBuf::from("./functions"),
            cluster: ClusterSource::default(),
            executors: ExecutorInstances::default(),
            warm_up: true,
            resolve_interval_seconds: 600.0,
            paths_are_default: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSource {
    pub enabled: bool,
    /// The namespace watched (Porch: the pod namespace).
    pub namespace: String,
    /// A kubeconfig file; absent: in-cluster config, else `KUBECONFIG`.
    pub kubeconfig: Option<PathBuf>,
}

impl Default for ClusterSource {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: "porch-fn-system".to_owned(),
            kubeconfig: None,
        }
    }
}

/// The instances standing for each executor (empty: none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ExecutorInstances {
    /// The in-process instances, in order: a goExecutor id runs on the first that implements
    /// the function (the catalog's functions are split between `builtin` and `starlark`).
    pub go_executor: InstanceNames,
    pub wasm_executor: String,
    pub binary_executor: String,
    pub pod_executor: String,
}

impl Default for ExecutorInstances {
    fn default() -> Self {
        Self {
            go_executor: InstanceNames(vec!["builtin".to_owned(), "starlark".to_owned()]),
            wasm_executor: "wasm".to_owned(),
            binary_executor: "exec".to_owned(),
            pod_executor: "pod".to_owned(),
        }
    }
}

/// Instance names, written as one name or a list of them; `""` or `[]` is none.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct InstanceNames(pub Vec<String>);

impl<'de> Deserialize<'de> for InstanceNames {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Names;
        impl<'de> serde::de::Visitor<'de> for Names {
            type Value = InstanceNames;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an instance name or a list of instance names")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<InstanceNames, E> {
                Ok(InstanceNames(
                    Some(name.to_owned())
                        .filter(|n| !n.is_empty())
                        .into_iter()
                        .collect(),
                ))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<InstanceNames, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    if name.is_empty() {
                        return Err(serde::de::Error::invalid_value(
                            serde::de::Unexpected::Str(""),
                            &"an instance name",
                        ));
                    }
                    names.push(name);
                }
                Ok(InstanceNames(names))
            }
        }
        deserializer.deserialize_any(Names)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluatorConfig {
    /// A plugin name (`exec` finds `libkrm_plugin_exec.so`) or a path to a library file.
    pub plugin: String,
    /// Handed to the plugin as JSON; its schema is the plugin's.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// When serving, the instance's calls run in worker processes (`workers:`), not the
    /// runner's: for plugins that run code the caller sends (a Starlark script, a yq program).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub isolated: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// figment's YAML support uses the deprecated serde_yaml; this uses its maintained successor,
/// with the nesting bound every configuration file gets.
pub struct Yaml;

impl Format for Yaml {
    type Error = YamlError;
    const NAME: &'static str = "YAML";

    fn from_str<T: serde::de::DeserializeOwned>(string: &str) -> Result<T, Self::Error> {
        config_file::from_yaml(string)
    }
}

/// Where the configuration comes from, before flags.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config_file: Option<PathBuf>,
    pub skip_system_file: bool,
}

/// Builds the layered figment, without the command line's layer (see [`with_flags`]). A file
/// that cannot be used is left out and reported, with every other such file.
pub fn layered(sources: &Sources) -> (Figment, Vec<String>) {
    let mut problems = Vec::new();
    let mut figment = embedded();
    if let Some(file) = system_file(sources) {
        figment = merge_file(figment, file, &mut problems);
    }
    if let Some(file) = &sources.config_file {
        if file.exists() {
            figment = merge_file(figment, file, &mut problems);
        } else {
            problems.push(format!("--config-file: {} does not exist", file.display()));
        }
    }
    figment = figment.merge(OtelEnv::from_process());
    if let Some(env) = prefixed_env() {
        figment = figment.merge(env);
    }
    (figment, problems)
}

/// `/etc/krm-runner/config.yaml`, when it is one of `sources`' layers.
fn system_file(sources: &Sources) -> Option<&'static Path> {
    let file = Path::new(SYSTEM_CONFIG_FILE);
    (!sources.skip_system_file && file.exists()).then_some(file)
}

/// The `KRM_RUNNER_<KEY>` variables' layer, when one is set: merging even an empty layer costs
/// a one-shot `fn` call 3% of its instructions.
fn prefixed_env() -> Option<Env> {
    let env = Env::prefixed(ENV_PREFIX)
        .split("__")
        .ignore(&["config"])
        .map(|key| key.as_str().to_ascii_lowercase().into());
    let set = env.iter().next().is_some();
    set.then_some(env)
}

/// The configuration [`layered`] and [`extract`] would give when none of their layers over the
/// embedded default exists (no configuration file, no `OTEL_*` or `KRM_RUNNER_` variable), read
/// straight from the embedded default: a one-shot `fn` call, which needs no record of where
/// each value came from, skips the fifth of its instructions that layering and extracting
/// take. `None` when some layer exists (or the default is unusable: [`extract`] says why).
pub fn embedded_alone(sources: &Sources) -> Option<Config> {
    if system_file(sources).is_some()
        || sources.config_file.is_some()
        || !OtelEnv::from_process().is_empty()
        || prefixed_env().is_some()
    {
        return None;
    }
    embedded_config()
}

/// `None` when the embedded default is not a configuration, which [`extract`] reports.
fn embedded_config() -> Option<Config> {
    let mut config: Config = serde_json::from_str(EMBEDDED_DEFAULT).ok()?;
    config.function_configs.paths_are_default = true;
    config.problems().is_empty().then_some(config)
}

/// The top layer: `flags` holds only the keys set on the command line.
pub fn with_flags(figment: Figment, flags: Dict) -> Figment {
    figment.merge(Named::new(
        "command line",
        None,
        Serialized::from(flags, Profile::Default),
    ))
}

fn embedded() -> Figment {
    Figment::from(Named::new(
        EMBEDDED_NAME,
        None,
        Json::string(EMBEDDED_DEFAULT),
    ))
}

/// Gives a provider the name (and file) `krm-runner config` shows as a value's source.
struct Named<P> {
    name: &'static str,
    file: Option<PathBuf>,
    inner: P,
}

impl<P: Provider> Named<P> {
    fn new(name: &'static str, file: Option<PathBuf>, inner: P) -> Self {
        Self { name, file, inner }
    }
}

impl<P: Provider> Provider for Named<P> {
    fn metadata(&self) -> Metadata {
        let mut metadata = self.inner.metadata();
        metadata.name = self.name.into();
        if let Some(file) = &self.file {
            metadata.source = Some(figment::Source::File(file.clone()));
        }
        metadata
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        self.inner.data()
    }
}

/// Merges a configuration file read once, within the bounds of every configuration file (figment
/// would read it again, unbounded); a file that cannot be read or is not YAML is left out.
fn merge_file(figment: Figment, path: &Path, problems: &mut Vec<String>) -> Figment {
    let text = match config_file::read_text(path) {
        Ok(text) => text,
        Err(error) => {
            problems.push(error.to_string());
            return figment;
        }
    };
    match config_file::from_yaml::<yaml_serde::Value>(&text) {
        Ok(yaml_serde::Value::Mapping(_) | yaml_serde::Value::Null) => {}
        Ok(_) => {
            problems.push(format!(
                "{}: not a mapping of configuration keys",
                path.display()
            ));
            return figment;
        }
        Err(error) => {
            problems.push(format!("{}: not valid YAML: {error}", path.display()));
            return figment;
        }
    }
    figment.merge(Named::new(
        "YAML file",
        Some(path.to_owned()),
        Yaml::string(&text),
    ))
}

/// Extracts and validates the configuration, reporting every problem, each naming its key.
///
/// serde stops at the first value it cannot use, so when the whole does not extract, each key
/// is tried alone over the embedded default (descending into mappings) to find every problem. The configuration returned then holds the usable values over
/// the embedded default, for checks that can still run (the plugins'); `None` when not even
/// that extracts.
pub fn extract(figment: &Figment) -> (Option<Config>, Vec<String>) {
    let (config, mut problems) = match figment.extract::<Config>() {
        Ok(config) => (Some(config), Vec::new()),
        Err(whole) => {
            let mut problems = Vec::new();
            let mut usable = embedded();
            let merged = figment
                .data()
                .ok()
                .and_then(|mut data| data.remove(&Profile::Default));
            if let Some(merged) = merged {
                isolate(
                    figment,
                    &mut Vec::new(),
                    &merged,
                    &mut usable,
                    &mut problems,
                );
            }
            if problems.is_empty() {
                problems.extend(
                    whole
                        .into_iter()
                        .map(|error| describe_error(figment, &error)),
                );
            }
            (usable.extract::<Config>().ok(), problems)
        }
    };
    let Some(mut config) = config else {
        return (None, problems);
    };
    config.function_configs.paths_are_default = figment
        .find_metadata("function_configs.paths")
        .is_some_and(|metadata| metadata.name == EMBEDDED_NAME);
    problems.extend(config.problems());
    (Some(config), problems)
}

/// Tries each key of `dict` (at `path`) alone over the embedded default: a usable one joins
/// `usable`; an unusable mapping is descended into; other unusable values are reported.
fn isolate(
    figment: &Figment,
    path: &mut Vec<String>,
    dict: &Dict,
    usable: &mut Figment,
    problems: &mut Vec<String>,
) {
    for (key, value) in dict {
        path.push(key.clone());
        let mut alone = Dict::new();
        let keys: Vec<&str> = path.iter().map(String::as_str).collect();
        set_path(&mut alone, &keys, value.clone());
        let trial = embedded().merge(Serialized::from(&alone, Profile::Default));
        match trial.extract::<Config>() {
            Ok(_) => {
                *usable = usable
                    .clone()
                    .merge(Serialized::from(alone, Profile::Default))
            }
            Err(error) => {
                // Errors above this key come from trying it without its siblings: not its own.
                let own = |e: &figment::Error| e.path.len() >= path.len();
                let mut report = |error: &figment::Error| {
                    let problem = describe_error(figment, error);
                    if !problems.contains(&problem) {
                        problems.push(problem);
                    }
                };
                match value {
                    // serde stopped at the mapping's first problem: its own (a missing key,
                    // say) is reported here, its children's by trying each of them.
                    Value::Dict(_, children) if !children.is_empty() => {
                        for error in error.into_iter().filter(|e| e.path.len() == path.len()) {
                            report(&error);
                        }
                        isolate(figment, path, children, usable, problems);
                    }
                    _ => error
                        .into_iter()
                        .filter(own)
                        .for_each(|error| report(&error)),
                }
            }
        }
        path.pop();
    }
}

/// `key: what is wrong (from where)`, the source looked up in the full figment.
fn describe_error(figment: &Figment, error: &figment::Error) -> String {
    let key = error.path.join(".");
    let source = figment
        .find_metadata(&key)
        .map(|metadata| format!(" (from {})", describe_source(metadata)))
        .unwrap_or_default();
    if key.is_empty() {
        format!("{}{source}", error.kind)
    } else {
        format!("{key}: {}{source}", error.kind)
    }
}

impl Config {
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.listen.parse::<SocketAddr>().is_err() {
            problems.push(format!(
                "listen: {:?} is not an address such as 127.0.0.1:9445",
                self.listen
            ));
        }
        if let Some(http) = &self.confighub_listen {
            if http.parse::<SocketAddr>().is_err() {
                problems.push(format!(
                    "confighub_listen: {http:?} is not an address such as 127.0.0.1:9080"
                ));
            } else if *http == self.listen {
                problems.push(format!(
                    "confighub_listen: {http:?} is the gRPC listen address too; they must differ"
                ));
            }
        }
        if self.max_message_bytes < 1024 {
            problems.push(format!(
                "max_message_bytes: {} is too small (at least 1024)",
                self.max_message_bytes
            ));
        }
        if self.max_message_bytes > u32::MAX as usize {
            problems.push(format!(
                "max_message_bytes: {} is over the gRPC limit of 4 GiB",
                self.max_message_bytes
            ));
        }
        problems.extend(self.served_instance_problem());
        for (name, evaluator) in &self.evaluators {
            if evaluator.plugin.trim().is_empty() {
                problems.push(format!("evaluators.{name}.plugin: empty"));
            }
            if !evaluator.config.is_object() {
                problems.push(format!("evaluators.{name}.config: must be a mapping"));
            }
        }
        if let Err(error) = logging::filter(&self.log_level) {
            problems.push(format!("log_level: {error}"));
        }
        let reload = self.function_configs.reload_interval_seconds;
        if !(reload.is_finite() && reload > 0.0) {
            problems.push(format!(
                "function_configs.reload_interval_seconds: {reload} is not a positive number"
            ));
        }
        if self.function_configs.cluster.enabled
            && self.function_configs.cluster.namespace.is_empty()
        {
            problems.push("function_configs.cluster.namespace: empty".to_owned());
        }
        problems.extend(self.telemetry.problems());
        problems.extend(self.workers.problems());
        if let Err(policy) = self.policy() {
            problems.extend(policy);
        }
        problems.extend(self.cache.problems());
        problems
    }

    /// What is wrong with the attributes declared for ConfigHub's typed functions, each named
    /// by its field below `executor`. Finding out builds the executor, so only the commands
    /// that can run typed functions ask: `krm-runner fn` runs none.
    pub fn typed_executor_problems(&self) -> Vec<String> {
        if self.executor.attributes.is_empty() {
            return Vec::new();
        }
        match self.typed_executor() {
            Ok(_) => Vec::new(),
            Err(found) => found
                .problems()
                .iter()
                .map(|problem| format!("executor.{problem}"))
                .collect(),
        }
    }

    /// ConfigHub's Kubernetes/YAML executor with the attributes this configuration declares;
    /// each problem names its field below `executor`.
    pub fn typed_executor(&self) -> Result<Executor, krm_plugin_api::ConfigError> {
        Executor::kubernetes_with(&self.executor.attributes)
            .map(|executor| executor.with_max_message_bytes(self.max_message_bytes))
    }

    /// ConfigHub's AppConfig/Properties executor, its answers within `max_message_bytes`.
    pub fn properties_executor(&self) -> Executor {
        Executor::properties().with_max_message_bytes(self.max_message_bytes)
    }

    /// The trust policy compiled, its key files read; every problem names its field.
    pub fn policy(&self) -> Result<Policy, Vec<String>> {
        Policy::build(&self.policy, &self.default_image_prefix)
    }

    /// Why `serve` names no instance that can serve.
    pub fn served_instance_problem(&self) -> Option<String> {
        if !self.evaluators.contains_key(&self.serve) {
            Some(format!(
                "serve: no evaluator instance named {:?} (configured: {})",
                self.serve,
                self.evaluator_names()
            ))
        } else if self.disabled.contains(&self.serve) {
            Some(format!(
                "serve: the served instance {:?} is disabled",
                self.serve
            ))
        } else {
            None
        }
    }

    fn evaluator_names(&self) -> String {
        self.evaluators
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Disabled names that match no instance: Porch ignores them, we warn.
    pub fn unknown_disabled(&self) -> Vec<&str> {
        self.disabled
            .iter()
            .filter(|name| !self.evaluators.contains_key(*name))
            .map(String::as_str)
            .collect()
    }
}

fn describe_source(metadata: &Metadata) -> String {
    match &metadata.source {
        Some(source) => format!("{} {source}", metadata.name),
        None => metadata.name.to_string(),
    }
}

/// Every leaf of the merged configuration with the layer it came from, for `krm-runner config`.
pub fn provenance(figment: &Figment) -> Vec<(String, String, String)> {
    let mut rows = Vec::new();
    if let Ok(data) = figment.data() {
        for dict in data.into_values() {
            walk(figment, "", &Value::from(dict), &mut rows);
        }
    }
    rows
}

fn walk(figment: &Figment, prefix: &str, value: &Value, rows: &mut Vec<(String, String, String)>) {
    match value {
        Value::Dict(_, dict) if !dict.is_empty() => {
            for (key, child) in dict {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                walk(figment, &path, child, rows);
            }
        }
        leaf => {
            let source = figment
                .get_metadata(leaf.tag())
                .map(describe_source)
                .unwrap_or_else(|| "unknown".to_owned());
            let rendered = serde_json::to_string(leaf).unwrap_or_else(|_| "?".to_owned());
            rows.push((prefix.to_owned(), rendered, source));
        }
    }
}

/// Sets `value` at the dotted `path` inside `dict`, creating intermediate tables.
pub fn set_path(dict: &mut Dict, path: &[&str], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = dict;
    for key in parents {
        let entry = current
            .entry((*key).to_owned())
            .or_insert_with(|| Value::from(Dict::new()));
        if !matches!(entry, Value::Dict(..)) {
            *entry = Value::from(Dict::new());
        }
        let Value::Dict(_, next) = entry else {
            unreachable!("just made a dict")
        };
        current = next;
    }
    current.insert((*last).to_owned(), value);
}

/// The names of the configured evaluator instances, before flags apply.
pub fn instance_names(figment: &Figment) -> BTreeSet<String> {
    figment
        .extract_inner::<BTreeMap<String, serde_json::Value>>("evaluators")
        .map(|map| map.into_keys().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(file_text: Option<&str>) -> (Option<Config>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.yaml");
        if let Some(text) = file_text {
            std::fs::write(&file, text).unwrap();
        }
        let sources = Sources {
            skip_system_file: true,
            config_file: file_text.map(|_| file.clone()),
        };
        let (figment, mut problems) = layered(&sources);
        let (config, more) = extract(&figment);
        problems.extend(more);
        let file = file.display().to_string();
        let problems = problems
            .into_iter()
            .map(|p| p.replace(&file, "FILE"))
            .collect();
        (config, problems)
    }

    #[test]
    fn the_embedded_default_holds_what_its_yaml_file_says() {
        let yaml: serde_json::Value =
            config_file::from_yaml(include_str!("../../../config/krm-runner.yaml")).unwrap();
        let json: serde_json::Value = serde_json::from_str(EMBEDDED_DEFAULT).unwrap();
        assert_eq!(json, yaml);
    }

    #[test]
    fn embedded_default_is_valid() {
        let (config, problems) = load(None);
        assert_eq!(problems, Vec::<String>::new());
        let config = config.unwrap();
        assert_eq!(config.serve, "default");
        assert_eq!(config.max_message_bytes, 6_291_456);
    }

    #[test]
    fn the_embedded_default_alone_reads_as_the_layers_make_it() {
        let (layered, problems) = load(None);
        assert_eq!(problems, Vec::<String>::new());
        assert_eq!(embedded_config(), layered);
    }

    #[test]
    fn a_configuration_file_is_a_layer_over_the_embedded_default() {
        let sources = Sources {
            config_file: Some(PathBuf::from("/nonexistent/config.yaml")),
            skip_system_file: true,
        };
        assert_eq!(embedded_alone(&sources), None);
    }

    #[test]
    fn go_executor_names_one_instance_or_several_in_order() {
        let go = |yaml: &str| {
            let (config, problems) = load(Some(&format!(
                "function_configs:\n  executors: {{goExecutor: {yaml}}}\n"
            )));
            match config {
                Some(config) if problems.is_empty() => {
                    Ok(config.function_configs.executors.go_executor.0)
                }
                _ => Err(problems.join("\n")),
            }
        };
        assert_eq!(
            load(None)
                .0
                .unwrap()
                .function_configs
                .executors
                .go_executor
                .0,
            ["builtin", "confighub", "starlark"]
        );
        assert_eq!(go("builtin").unwrap(), ["builtin"]);
        assert_eq!(go("[starlark, builtin]").unwrap(), ["starlark", "builtin"]);
        assert_eq!(go("\"\"").unwrap(), Vec::<String>::new());
        assert_eq!(go("[]").unwrap(), Vec::<String>::new());
        for refused in ["[builtin, \"\"]", "{a: b}", "[[builtin]]"] {
            let problems = go(refused).expect_err(refused);
            assert!(
                problems.starts_with("function_configs.executors.goExecutor"),
                "{refused}: {problems}"
            );
        }
    }

    #[test]
    fn every_problem_is_reported_each_naming_its_key() {
        let (config, problems) = load(Some(
            "listen: [not, an, address]
max_message_bytes: lots
lisen: 1
log_format: xml
shutdown_grace_seconds: 3
evaluators:
  broken: {config: {}}
  odd: {plugin: exec, config: {}, extra: 1}
function_configs:
  reload_interval_seconds: soon
  warm_up: maybe
  cluster: {enabled: yes, namespace: 5, nope: 1}
",
        ));
        let problems = problems.join("\n");
        for expected in [
            "listen: invalid type: found sequence, expected a string (from YAML file FILE)",
            "max_message_bytes: invalid type: found string \"lots\", expected usize (from YAML file FILE)",
            "lisen: unknown field: found `lisen`",
            "log_format: unknown variant: found `xml`",
            "evaluators.broken: missing field `plugin`",
            "evaluators.odd.extra: unknown field: found `extra`",
            "function_configs.reload_interval_seconds: invalid type: found string \"soon\"",
            "function_configs.warm_up: invalid type: found string \"maybe\"",
            "function_configs.cluster.nope: unknown field: found `nope`",
        ] {
            assert!(
                problems.contains(expected),
                "{expected:?} missing from:\n{problems}"
            );
        }
        // What could be used is kept, for the checks that follow.
        let config = config.unwrap();
        assert_eq!(config.shutdown_grace_seconds, 3);
        assert!(config.evaluators.contains_key("exec"));
    }

    /// Plugins get their settings as JSON text; serde_json's `arbitrary_precision` (on in the
    /// workspace build, for the starlark plugin's interpreter) must not change the numbers in it.
    #[test]
    fn plugin_settings_keep_their_numbers() {
        let (config, _) = load(Some(
            "evaluators:\n  numbers:\n    plugin: exec\n    config: {count: 3, negative: -2, \
             ratio: 0.5, big: 18446744073709551615, nested: [{max: 7}]}\n",
        ));
        let config = config.unwrap();
        let text = config.evaluators["numbers"].config.to_string();
        assert_eq!(
            text,
            r#"{"big":18446744073709551615,"count":3,"negative":-2,"nested":[{"max":7}],"ratio":0.5}"#
        );
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Settings {
            count: u32,
            negative: i64,
            ratio: f64,
            big: u64,
        }
        let settings: Settings = serde_json::from_str(&text).unwrap();
        assert_eq!(
            settings,
            Settings {
                count: 3,
                negative: -2,
                ratio: 0.5,
                big: u64::MAX
            }
        );
    }

    #[test]
    fn unusable_files_are_named() {
        let (config, problems) = load(Some(&format!("listen: {}", "[".repeat(1000))));
        assert_eq!(
            problems,
            ["FILE: not valid YAML: nested deeper than 64 levels at line 1, column 264"]
        );
        assert!(config.is_some());
    }

    #[test]
    fn set_path_builds_nested_tables() {
        let mut dict = Dict::new();
        set_path(
            &mut dict,
            &["evaluators", "exec", "config", "functions_dir"],
            Value::from("/f"),
        );
        let json = serde_json::to_value(&dict).unwrap();
        assert_eq!(json["evaluators"]["exec"]["config"]["functions_dir"], "/f");
    }

    mod properties {
        use super::load;
        use proptest::prelude::*;

        const SAMPLE: &str = "\
listen: 127.0.0.1:9445
max_message_bytes: 6291456
plugin_dirs: [/opt/plugins]
serve: default
log_level: info
log_format: json
shutdown_grace_seconds: 30
disabled: [pod]
evaluators:
  exec:
    plugin: exec
    config: {functions_dir: /opt/functions, functions: [{image: a/b:v1, path: b}]}
  default:
    plugin: multi
    config: {chain: [exec]}
function_configs:
  paths: [/etc/krm-runner/functions]
  reload_interval_seconds: 2
  cluster: {enabled: false, namespace: porch-fn-system}
  executors: {goExecutor: builtin, binaryExecutor: exec, podExecutor: pod}
";

        /// `key: ...`, or `FILE: ...`. A mutated file's keys may hold any text, spaces included.
        fn names_a_key_or_the_file(problem: &str) -> bool {
            problem.starts_with("FILE: ")
                || problem
                    .split_once(": ")
                    .is_some_and(|(key, _)| !key.trim().is_empty())
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 128,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Whatever a configuration file holds, loading it does not panic, and each problem
            /// is one bounded line naming its key or the file.
            #[test]
            fn mutated_configurations_report_problems_naming_a_key(
                edits in prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..10)
            ) {
                let mut bytes = SAMPLE.as_bytes().to_vec();
                for (position, byte, operation) in edits {
                    let position = position % bytes.len().max(1);
                    match operation {
                        0 if !bytes.is_empty() => bytes[position] = byte,
                        2 if !bytes.is_empty() => {
                            bytes.remove(position);
                        }
                        _ => bytes.insert(position.min(bytes.len()), byte),
                    }
                }
                // Lossy, as a text editor would save it; invalid UTF-8 has its own test.
                let text = String::from_utf8_lossy(&bytes);
                let (_, problems) = load(Some(&text));
                for problem in &problems {
                    prop_assert!(names_a_key_or_the_file(problem), "{problem:?}");
                    prop_assert!(!problem.contains('\n'), "one line: {problem:?}");
                    prop_assert!(problem.len() <= 1024, "bounded: {problem:?}");
                }
            }
        }
    }
}
