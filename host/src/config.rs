//! The runner's configuration: layered with figment, validated all at once.
//!
//! Layers, later winning: the embedded default (`config/krm-runner.yaml`), then
//! `/etc/krm-runner/config.yaml`, then `--config-file` (or `KRM_RUNNER_CONFIG`), then environment
//! variables `KRM_RUNNER_<KEY>` (nested keys joined with `__`), then command-line flags.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized};
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

/// The embedded default configuration, usable as is.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../config/krm-runner.yaml");
pub const SYSTEM_CONFIG_FILE: &str = "/etc/krm-runner/config.yaml";
const ENV_PREFIX: &str = "KRM_RUNNER_";
const EMBEDDED_NAME: &str = "embedded default";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the gRPC server binds.
    pub listen: String,
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
    /// Where relative `binaryExecutor.path`s resolve (Porch: `--functions`).
    pub functions_dir: PathBuf,
    /// Watch FunctionConfigs in a cluster too.
    pub cluster: ClusterSource,
    /// The instances standing for each executor.
    pub executors: ExecutorInstances,
    /// After the FunctionConfigs are read, tell the pod executor to start a pod for each one
    /// with podExecutor tags (Porch: `--warm-up-pod-cache`).
    pub warm_up: bool,
    /// How often every executor tag is worked out ahead of calls (constraints resolved, binaries
    /// checked; see `krm-runner functions --status`), besides whenever FunctionConfigs change.
    pub resolve_interval_seconds: f64,
    /// Whether `paths` is the embedded default's, whose folder exists only in the source tree:
    /// missing, it is skipped rather than refused.
    #[serde(skip)]
    pub paths_are_default: bool,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct ExecutorInstances {
    pub go_executor: String,
    pub binary_executor: String,
    pub pod_executor: String,
}

impl Default for ExecutorInstances {
    fn default() -> Self {
        Self {
            go_executor: "builtin".to_owned(),
            binary_executor: "exec".to_owned(),
            pod_executor: "pod".to_owned(),
        }
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
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// figment's YAML support uses the deprecated serde_yaml; this uses its maintained successor.
pub struct Yaml;

impl Format for Yaml {
    type Error = yaml_serde::Error;
    const NAME: &'static str = "YAML";

    fn from_str<T: serde::de::DeserializeOwned>(string: &str) -> Result<T, Self::Error> {
        yaml_serde::from_str(string)
    }
}

/// Where the configuration comes from, before flags.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config_file: Option<PathBuf>,
    pub skip_system_file: bool,
}

/// Builds the layered figment. `flags` holds only the keys set on the command line.
pub fn layered(sources: &Sources, flags: Dict) -> Result<Figment, Vec<String>> {
    let mut problems = Vec::new();
    let mut figment = Figment::from(Named::new(EMBEDDED_NAME, Yaml::string(EMBEDDED_DEFAULT)));
    if !sources.skip_system_file && Path::new(SYSTEM_CONFIG_FILE).exists() {
        figment = figment.merge(checked_file(Path::new(SYSTEM_CONFIG_FILE), &mut problems));
    }
    if let Some(file) = &sources.config_file {
        if file.exists() {
            figment = figment.merge(checked_file(file, &mut problems));
        } else {
            problems.push(format!("--config-file: {} does not exist", file.display()));
        }
    }
    figment = figment.merge(
        Env::prefixed(ENV_PREFIX)
            .split("__")
            .ignore(&["config"])
            .map(|key| key.as_str().to_ascii_lowercase().into()),
    );
    figment = figment.merge(Named::new(
        "command line",
        Serialized::from(flags, Profile::Default),
    ));
    if problems.is_empty() {
        Ok(figment)
    } else {
        Err(problems)
    }
}

/// Gives a provider the name `krm-runner config` shows as a value's source.
struct Named<P> {
    name: &'static str,
    inner: P,
}

impl<P: Provider> Named<P> {
    fn new(name: &'static str, inner: P) -> Self {
        Self { name, inner }
    }
}

impl<P: Provider> Provider for Named<P> {
    fn metadata(&self) -> Metadata {
        let mut metadata = self.inner.metadata();
        metadata.name = self.name.into();
        metadata
    }

    fn data(&self) -> Result<figment::value::Map<Profile, Dict>, figment::Error> {
        self.inner.data()
    }
}

fn checked_file(path: &Path, problems: &mut Vec<String>) -> figment::providers::Data<Yaml> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            if let Err(error) = yaml_serde::from_str::<yaml_serde::Value>(&text) {
                problems.push(format!("{}: not valid YAML: {error}", path.display()));
            }
        }
        Err(error) => problems.push(format!("{}: cannot read: {error}", path.display())),
    }
    Yaml::file_exact(path)
}

/// Extracts and validates the configuration, reporting every problem, each naming its key.
pub fn extract(figment: &Figment) -> Result<Config, Vec<String>> {
    let config: Config = figment.extract().map_err(|error| {
        error
            .into_iter()
            .map(|e| {
                let key = e.path.join(".");
                let source = e
                    .metadata
                    .as_ref()
                    .map(|m| format!(" (from {})", describe_source(m)))
                    .unwrap_or_default();
                let kind = e.kind.to_string();
                if key.is_empty() {
                    format!("{kind}{source}")
                } else {
                    format!("{key}: {kind}{source}")
                }
            })
            .collect::<Vec<_>>()
    })?;
    let mut config = config;
    config.function_configs.paths_are_default = figment
        .find_metadata("function_configs.paths")
        .is_some_and(|metadata| metadata.name == EMBEDDED_NAME);
    let problems = config.problems();
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
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
        if !self.evaluators.contains_key(&self.serve) {
            problems.push(format!(
                "serve: no evaluator instance named {:?} (configured: {})",
                self.serve,
                self.evaluator_names()
            ));
        } else if self.disabled.contains(&self.serve) {
            problems.push(format!(
                "serve: the served instance {:?} is disabled",
                self.serve
            ));
        }
        for (name, evaluator) in &self.evaluators {
            if evaluator.plugin.trim().is_empty() {
                problems.push(format!("evaluators.{name}.plugin: empty"));
            }
            if !evaluator.config.is_object() {
                problems.push(format!("evaluators.{name}.config: must be a mapping"));
            }
        }
        if let Err(error) = crate::logging::filter(&self.log_level) {
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
        problems
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

    pub fn disabled_set(&self) -> BTreeSet<&str> {
        self.disabled.iter().map(String::as_str).collect()
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

    #[test]
    fn embedded_default_is_valid() {
        let figment = layered(
            &Sources {
                skip_system_file: true,
                ..Default::default()
            },
            Dict::new(),
        )
        .unwrap();
        let config = extract(&figment).unwrap();
        assert_eq!(config.serve, "default");
        assert_eq!(config.max_message_bytes, 6_291_456);
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
}
