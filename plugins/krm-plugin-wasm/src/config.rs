//! The wasm plugin's `config:` section.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use krm_plugin_api::ConfigError;
use schemars::JsonSchema;
use serde::Deserialize;

/// ```yaml
/// modules_dir: /opt/krm-functions/wasm  # base for relative paths
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
    /// The largest module file read, in MiB (default 64).
    #[serde(default)]
    max_module_mib: Option<u64>,
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

/// The configuration, checked and ready to serve.
pub(crate) struct Resolved {
    pub functions: HashMap<String, Mapped>,
    pub limits: Limits,
    pub cache_dir: Option<PathBuf>,
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
        })
    }
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
