//! The wasm plugin's `config:` section.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use krm_plugin_api::ConfigError;
use krm_runner_function_config::docker_config::DockerConfig;
use schemars::JsonSchema;
use serde::Deserialize;

/// ```yaml
/// modules_dir: /opt/krm-functions/wasm  # base for relative paths
/// registries:                           # modules pulled as OCI artifacts, by image prefix
///   - prefix: ghcr.io/example/wasm/
/// auth_file: /var/run/secrets/registry/.dockerconfigjson
/// cache_dir: /var/cache/krm-runner/wasm # compiled modules, by digest
/// memory_limit_mib: 256                 # linear memory of one call
/// env: {TZ: UTC}                        # granted to every module
/// functions:
///   - image: example.com/set-namespace:v1.2.0
///     path: set-namespace.wasm          # a WASI preview 1 command module
///     env: {LOG_LEVEL: debug}           # granted to this module
/// ```
///
/// A module runs with no preopened directory, no socket and no environment variable but those
/// granted here; its ResourceList on stdin, its output on stdout and its log on stderr.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WasmConfig {
    /// Base folder for relative module paths.
    #[serde(default)]
    #[schemars(example = &"/opt/krm-functions/wasm")]
    modules_dir: Option<PathBuf>,
    /// The images this instance runs, each mapped to a module file.
    #[serde(default)]
    #[schemars(example = example_functions())]
    functions: Vec<FunctionEntry>,
    /// Where compiled modules are kept, keyed by the module's SHA-256 digest and the engine
    /// (wasmtime's version, its settings and the CPU's features). Default:
    /// `$XDG_CACHE_HOME/krm-runner/wasm`, else `$HOME/.cache/krm-runner/wasm`; `""` keeps them
    /// in memory only. The folder must belong to the runner's user and be writable by no one
    /// else: its files are machine code the runner loads.
    #[serde(default)]
    cache_dir: Option<PathBuf>,
    /// Environment variables granted to every module.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The most linear memory (and table space) one call may grow to, in MiB (default 256).
    #[serde(default)]
    memory_limit_mib: Option<u64>,
    /// A module's stdout beyond this stops it and fails the call (default: the runner's max
    /// message size).
    #[serde(default)]
    max_output_bytes: Option<usize>,
    /// stderr kept for the log; the rest is dropped (default 1 MiB).
    #[serde(default)]
    max_log_bytes: Option<usize>,
    /// The largest module read, from a file or a registry, in MiB (default 64).
    #[serde(default)]
    max_module_mib: Option<u64>,
    /// Images pulled from their registry as OCI artifacts (kpt's wasm images, or an artifact
    /// with one `application/wasm` layer), by image prefix; a tag is resolved to its digest and
    /// the module pulled and compiled once per digest.
    #[serde(default)]
    #[schemars(example = example_registries())]
    registries: Vec<RegistryEntry>,
    /// A docker config JSON file (`{"auths": {"<registry>": {"auth": "<base64 user:password>"}}}`,
    /// the format of the pod evaluator's private registries: name the same mounted Secret)
    /// whose credentials the pulls use, per registry; anonymous for registries it does not name.
    /// Read at every pull, so that rotated credentials are used.
    #[serde(default)]
    auth_file: Option<PathBuf>,
    /// How long a repository's tag list and a tag's digest are used before the registry is
    /// asked again, in seconds (default 60).
    #[serde(default)]
    refresh_seconds: Option<u64>,
    /// The longest a pull may take when the call has no deadline of its own, in seconds
    /// (default 60); a call's deadline bounds its pull.
    #[serde(default)]
    pull_timeout_seconds: Option<u64>,
}

fn example_registries() -> serde_json::Value {
    serde_json::json!([{"prefix": "ghcr.io/example/wasm/"}])
}

/// One entry of `registries:`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RegistryEntry {
    /// Images starting with this (`registry[:port]/path/`) are modules in that registry.
    prefix: String,
    /// Speak plain HTTP to this prefix's registry (a local one); HTTPS otherwise.
    #[serde(default)]
    plain_http: bool,
}

fn example_functions() -> serde_json::Value {
    serde_json::json!([{
        "image": "example.com/set-namespace:v1.2.0",
        "path": "set-namespace.wasm",
    }])
}

/// One entry of `functions:`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FunctionEntry {
    /// The image served.
    image: String,
    /// The module: absolute, or relative to `modules_dir`.
    path: PathBuf,
    /// Environment variables granted to this module (over the instance's `env`).
    #[serde(default)]
    env: BTreeMap<String, String>,
}

const DEFAULT_MEMORY_LIMIT_MIB: u64 = 256;
const DEFAULT_MAX_LOG_BYTES: usize = 1024 * 1024;
const DEFAULT_MAX_MODULE_MIB: u64 = 64;
const DEFAULT_REFRESH_SECONDS: u64 = 60;
const DEFAULT_PULL_TIMEOUT_SECONDS: u64 = 60;
/// Linear memory is 32-bit in the modules served (wasm32): beyond 4 GiB a limit means nothing.
const MAX_MEMORY_LIMIT_MIB: u64 = 4096;

/// What one image runs.
#[derive(Debug, Clone)]
pub(crate) struct Mapped {
    pub path: PathBuf,
    pub env: Vec<(String, String)>,
}

/// The limits every call of an instance runs under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub memory_bytes: usize,
    pub max_output_bytes: usize,
    pub max_log_bytes: usize,
    pub max_module_bytes: u64,
}

/// Where modules are pulled from: see [`crate::registry`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Pulls {
    /// Image prefixes served from their registry.
    pub prefixes: Vec<String>,
    /// Registries (`host[:port]`) spoken to over plain HTTP.
    pub plain_http: Vec<String>,
    pub auth_file: Option<PathBuf>,
    pub refresh: Duration,
    pub timeout: Duration,
}

/// The configuration, checked and ready to serve.
pub(crate) struct Resolved {
    pub functions: HashMap<String, Mapped>,
    pub limits: Limits,
    pub cache_dir: Option<PathBuf>,
    pub pulls: Pulls,
    /// The environment every module is granted (`env`): pulled ones and wasmExecutors' get
    /// this alone.
    pub env: Vec<(String, String)>,
}

impl WasmConfig {
    pub(crate) fn resolve(self, max_message_bytes: usize) -> Result<Resolved, ConfigError> {
        let mut problems = Vec::new();
        let memory_limit_mib = self.memory_limit_mib.unwrap_or(DEFAULT_MEMORY_LIMIT_MIB);
        if memory_limit_mib == 0 || memory_limit_mib > MAX_MEMORY_LIMIT_MIB {
            problems.push(ConfigError::field(
                "memory_limit_mib",
                format!("{memory_limit_mib} is not between 1 and {MAX_MEMORY_LIMIT_MIB}"),
            ));
        }
        let max_module_mib = self.max_module_mib.unwrap_or(DEFAULT_MAX_MODULE_MIB);
        if max_module_mib == 0 || max_module_mib > 1024 {
            problems.push(ConfigError::field(
                "max_module_mib",
                format!("{max_module_mib} is not between 1 and 1024"),
            ));
        }
        for (key, field) in [
            (self.max_output_bytes, "max_output_bytes"),
            (self.max_log_bytes, "max_log_bytes"),
        ] {
            if key == Some(0) {
                problems.push(ConfigError::field(field, "must be at least 1"));
            }
        }
        for name in self.env.keys() {
            if let Some(problem) = env_name_problem(name) {
                problems.push(ConfigError::field(format!("env.{name}"), problem));
            }
        }
        let mut pulls = Pulls {
            refresh: Duration::from_secs(self.refresh_seconds.unwrap_or(DEFAULT_REFRESH_SECONDS)),
            timeout: Duration::from_secs(
                self.pull_timeout_seconds
                    .unwrap_or(DEFAULT_PULL_TIMEOUT_SECONDS),
            ),
            ..Pulls::default()
        };
        if self.pull_timeout_seconds == Some(0) {
            problems.push(ConfigError::field(
                "pull_timeout_seconds",
                "must be at least 1",
            ));
        }
        for (index, entry) in self.registries.into_iter().enumerate() {
            match prefix_problem(&entry.prefix) {
                Some(problem) => problems.push(ConfigError::field(
                    format!("registries[{index}].prefix"),
                    problem,
                )),
                None => {
                    let host = entry.prefix.split('/').next().unwrap_or_default();
                    if entry.plain_http && !pulls.plain_http.iter().any(|known| known == host) {
                        pulls.plain_http.push(host.to_owned());
                    }
                    pulls.prefixes.push(entry.prefix);
                }
            }
        }
        if let Some(file) = &self.auth_file
            && let Err(error) = DockerConfig::read(file)
        {
            problems.push(ConfigError::field("auth_file", error.to_string()));
        }
        pulls.auth_file = self.auth_file;

        let mut functions = HashMap::new();
        let mut defined_at: HashMap<String, usize> = HashMap::new();
        for (index, entry) in self.functions.into_iter().enumerate() {
            let field = format!("functions[{index}]");
            if entry.image.trim().is_empty() {
                problems.push(ConfigError::field(
                    format!("{field}.image"),
                    "empty image name",
                ));
                continue;
            }
            if let Some(first) = defined_at.get(&entry.image) {
                problems.push(ConfigError::field(
                    format!("{field}.image"),
                    format!(
                        "image {:?} is already mapped by functions[{first}]",
                        entry.image
                    ),
                ));
                continue;
            }
            for name in entry.env.keys() {
                if let Some(problem) = env_name_problem(name) {
                    problems.push(ConfigError::field(format!("{field}.env.{name}"), problem));
                }
            }
            let path = if entry.path.is_absolute() {
                entry.path
            } else {
                match &self.modules_dir {
                    Some(dir) => absolute(&dir.join(&entry.path)),
                    None => {
                        problems.push(ConfigError::field(
                            format!("{field}.path"),
                            format!("relative path {} needs `modules_dir`", entry.path.display()),
                        ));
                        continue;
                    }
                }
            };
            let mut env = self.env.clone();
            env.extend(entry.env);
            defined_at.insert(entry.image.clone(), index);
            functions.insert(
                entry.image,
                Mapped {
                    path,
                    env: env.into_iter().collect(),
                },
            );
        }
        if let Some(problems) = ConfigError::all(problems) {
            return Err(problems);
        }
        let cache_dir = match self.cache_dir {
            Some(dir) if dir.as_os_str().is_empty() => None,
            Some(dir) => Some(dir),
            None => default_cache_dir(),
        };
        Ok(Resolved {
            functions,
            limits: Limits {
                memory_bytes: usize::try_from(memory_limit_mib * 1024 * 1024).unwrap_or(usize::MAX),
                max_output_bytes: self.max_output_bytes.unwrap_or(max_message_bytes),
                max_log_bytes: self.max_log_bytes.unwrap_or(DEFAULT_MAX_LOG_BYTES),
                max_module_bytes: max_module_mib * 1024 * 1024,
            },
            cache_dir,
            pulls,
            env: self.env.into_iter().collect(),
        })
    }
}

/// Why `prefix` cannot name images of one registry, if it cannot.
fn prefix_problem(prefix: &str) -> Option<String> {
    let Some((host, _)) = prefix.split_once('/') else {
        return Some(format!(
            "{} names no registry: write `registry[:port]/path/`",
            krm_plugin_api::quoted(prefix)
        ));
    };
    if host.is_empty() || prefix.contains(['@', ' ']) {
        return Some(format!(
            "{} is not an image prefix (`registry[:port]/path/`)",
            krm_plugin_api::quoted(prefix)
        ));
    }
    None
}

/// Why `name` cannot be an environment variable's name, if it cannot.
fn env_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty variable name")
    } else if name.contains(['=', '\0']) {
        Some("a variable name holds neither `=` nor NUL")
    } else {
        None
    }
}

fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|dir| !dir.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })?;
    Some(base.join("krm-runner").join("wasm"))
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}
