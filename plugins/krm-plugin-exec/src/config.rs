//! The exec plugin's `config:` section, including Porch's legacy exec map file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use krm_plugin_api::ConfigError;
use krm_plugin_api::process::OutputLimits;
use krm_runner_function_config::config_file;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::Function;

/// ```yaml
/// functions_dir: /opt/krm-functions     # base for relative paths and Porch's `function:` names
/// porch_config_file: /etc/porch/config.yaml  # Porch's `--config` file, read at start-up
/// env: {HTTPS_PROXY: "http://proxy:3128"}    # added to every function's environment
/// inherit_env: [TZ]                     # runner variables passed through as they are
/// functions:
///   - image: ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.0
///     path: set-labels                  # absolute, or relative to functions_dir
///     env: {LOG_LEVEL: debug}
///   - function: set-namespace           # Porch's form: a file in functions_dir ...
///     images: [gcr.io/kpt-fn/set-namespace:v0.4]  # ... serving these exact images
/// ```
///
/// A function's environment is, by default, only `PATH` (`/usr/local/sbin:/usr/local/bin:
/// /usr/sbin:/usr/bin:/sbin:/bin`), `HOME=/tmp` and `LANG=C.UTF-8`: functions must not see the
/// runner's credentials or configuration. `env`, `inherit_env` and each function's `env` add to
/// it, later ones winning.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// Base folder for relative paths and for Porch's `function:` names.
    #[serde(default)]
    #[schemars(example = &"/opt/krm-functions")]
    functions_dir: Option<PathBuf>,
    /// Porch's exec map file (its `--config`), read at start-up.
    #[serde(default)]
    porch_config_file: Option<PathBuf>,
    /// The images this instance runs, each mapped to an executable.
    #[serde(default)]
    #[schemars(example = example_functions())]
    functions: Vec<FunctionEntry>,
    /// Added to every function's environment.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The runner's environment variables passed through to functions as they are.
    #[serde(default)]
    inherit_env: Vec<String>,
    /// A function's stdout beyond this fails the call (default: the runner's max message size).
    #[serde(default)]
    max_output_bytes: Option<usize>,
    /// stderr kept for the log; the rest is dropped (default 1 MiB).
    #[serde(default)]
    max_log_bytes: Option<usize>,
}

fn example_functions() -> serde_json::Value {
    serde_json::json!([{
        "image": "ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.0",
        "path": "set-labels",
    }])
}

/// One entry of `functions:`, in either form.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FunctionEntry {
    /// The image served (with `path`).
    image: Option<String>,
    /// The executable: absolute, or relative to `functions_dir`.
    path: Option<PathBuf>,
    /// Porch's form: a file in `functions_dir` (with `images`).
    function: Option<String>,
    /// Porch's form: the exact images the `function` file serves.
    images: Option<Vec<String>>,
    /// Added to this function's environment.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The folder the function runs in.
    working_dir: Option<PathBuf>,
}

/// Porch's legacy exec map file (`--config`): `functions: [{function: <file>, images: [...]}]`,
/// nothing else.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PorchConfigFile {
    functions: Vec<PorchFunction>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PorchFunction {
    function: String,
    images: Vec<String>,
}

impl From<PorchFunction> for FunctionEntry {
    fn from(porch: PorchFunction) -> Self {
        Self {
            function: Some(porch.function),
            images: Some(porch.images),
            ..Self::default()
        }
    }
}

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const DEFAULT_MAX_LOG_BYTES: usize = 1024 * 1024;

/// The configuration, checked and ready to serve.
pub(crate) struct Resolved {
    pub functions: HashMap<String, Function>,
    pub limits: OutputLimits,
    /// The environment every function starts from (also that of binaries a FunctionConfig
    /// routes here).
    pub base_env: Vec<(String, String)>,
}

impl ExecConfig {
    pub(crate) fn resolve(self, max_message_bytes: usize) -> Result<Resolved, ConfigError> {
        let mut problems = Vec::new();
        let mut base_env: BTreeMap<String, String> = [
            ("PATH", DEFAULT_PATH),
            ("HOME", "/tmp"),
            ("LANG", "C.UTF-8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        base_env.extend(self.env.clone());
        for name in &self.inherit_env {
            if let Ok(value) = std::env::var(name) {
                base_env.insert(name.clone(), value);
            }
        }

        let mut entries: Vec<(String, FunctionEntry)> = self
            .functions
            .into_iter()
            .enumerate()
            .map(|(index, entry)| (format!("functions[{index}]"), entry))
            .collect();
        if let Some(file) = &self.porch_config_file {
            match read_porch_config(file) {
                Ok(legacy) => entries.extend(legacy.functions.into_iter().enumerate().map(
                    |(index, entry)| {
                        (
                            format!("{}: functions[{index}]", file.display()),
                            entry.into(),
                        )
                    },
                )),
                Err(problem) => problems.push(format!("porch_config_file: {problem}")),
            }
        }

        let mut functions: HashMap<String, Function> = HashMap::new();
        let mut defined_at: HashMap<String, String> = HashMap::new();
        for (field, entry) in entries {
            match entry.resolve(&field, self.functions_dir.as_deref(), &base_env) {
                Ok((images, function)) => {
                    for image in images {
                        if let Some(first) = defined_at.get(&image) {
                            problems.push(format!(
                                "{field}: image {image:?} is already mapped by {first}"
                            ));
                            continue;
                        }
                        defined_at.insert(image.clone(), field.clone());
                        functions.insert(image, function.clone());
                    }
                }
                Err(problem) => problems.push(problem),
            }
        }
        if let Some(problems) = ConfigError::all(problems.into_iter().map(ConfigError::new)) {
            return Err(problems);
        }
        let limits = OutputLimits {
            max_stdout_bytes: self.max_output_bytes.unwrap_or(max_message_bytes),
            max_log_bytes: self.max_log_bytes.unwrap_or(DEFAULT_MAX_LOG_BYTES),
        };
        Ok(Resolved {
            functions,
            limits,
            base_env: base_env.into_iter().collect(),
        })
    }
}

fn read_porch_config(path: &Path) -> Result<PorchConfigFile, String> {
    let text = config_file::read_text(path).map_err(|error| error.to_string())?;
    config_file::from_yaml(&text).map_err(|error| {
        format!(
            "{}: not Porch's exec map (`functions: [{{function, images}}]`): {error}",
            path.display()
        )
    })
}

impl FunctionEntry {
    fn resolve(
        self,
        field: &str,
        functions_dir: Option<&Path>,
        base_env: &BTreeMap<String, String>,
    ) -> Result<(Vec<String>, Function), String> {
        let (images, path) = match (self.image, self.path, self.function, self.images) {
            (Some(image), Some(path), None, None) => (vec![image], path),
            (None, None, Some(function), Some(images)) => {
                if function.contains('/') {
                    return Err(format!(
                        "{field}.function: {function:?} must be a file name in functions_dir"
                    ));
                }
                (images, PathBuf::from(function))
            }
            _ => {
                return Err(format!(
                    "{field}: give either `image` and `path`, or Porch's `function` and `images`"
                ));
            }
        };
        if let Some(index) = images.iter().position(|image| image.trim().is_empty()) {
            return Err(format!("{field}.images[{index}]: empty image name"));
        }
        let path = if path.is_absolute() {
            path
        } else {
            match functions_dir {
                Some(dir) => absolute(&dir.join(&path)),
                None => {
                    return Err(format!(
                        "{field}: relative path {} needs `functions_dir`",
                        path.display()
                    ));
                }
            }
        };
        let mut env = base_env.clone();
        env.extend(self.env);
        let working_dir = self.working_dir.unwrap_or_else(|| PathBuf::from("/"));
        Ok((
            images,
            Function {
                path,
                env: env.into_iter().collect(),
                working_dir,
            },
        ))
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}
