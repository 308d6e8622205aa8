//! `wasm`: runs a WebAssembly module per function image, on wasmtime.
//!
//! A module is a WASI preview 1 command (it exports `_start`), as Go (`GOOS=wasip1`), TinyGo,
//! Rust (`wasm32-wasip1`) and C (wasi-libc) build it, following the KRM function spec's exec
//! contract: the ResourceList on stdin, the ResourceList on stdout, the log on stderr, a
//! non-zero exit for a failed function. Images map to module files by exact string, as `exec`
//! maps executables; a call carrying a tag constraint for an untagged image runs the mapped
//! image of that repository with the highest version satisfying it.
//!
//! The sandbox: no preopened directory, no socket, no environment variable but those the
//! configuration grants; each call a fresh instance in a store of its own, its linear memory
//! limited, interrupted within a few milliseconds of its call's cancellation or deadline; its
//! stdout bounded by the message size (more stops the module) and its stderr by the log size.
//! A module that passes a limit is answered RESOURCE_EXHAUSTED naming the limit, a trap
//! INTERNAL naming it; the runner goes on serving.
//!
//! Each module is compiled once per content (see [`compile`]): in the background when the
//! instance is built, or at the first call that needs it.

mod compile;
mod config;
mod run;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator,
    FunctionConfigRoute, FunctionSignature, Plugin, Probe, Resolution, export_plugin,
};
use krm_runner_function_config::version::MappedVersions;
use wasmtime::{Engine, InstancePre, Linker};

use crate::compile::{CompileError, Compiler};
use crate::config::{Limits, Mapped};
use crate::run::CallState;

pub use config::WasmConfig;

const WASM: &str = "wasm";

/// Why an image is declined: the map is by exact image string.
const NOT_MAPPED: &str = "no module is mapped to this image (`functions`: exact image names)";

/// One mapped image: its module file, compiled once.
struct Function {
    mapped: Mapped,
    compiled: OnceLock<Result<InstancePre<CallState>, Arc<CompileError>>>,
}

/// The state every call of an instance shares; the background warm-up holds it too.
struct Shared {
    engine: Engine,
    compiler: Compiler,
    functions: HashMap<String, Function>,
}

impl Shared {
    /// The compiled module of `image`, compiling it at the first need.
    fn compiled(&self, image: &str) -> Option<Result<&InstancePre<CallState>, Arc<CompileError>>> {
        let function = self.functions.get(image)?;
        let compiled = function.compiled.get_or_init(|| {
            let started = Instant::now();
            let loaded = self.compiler.load(&function.mapped.path);
            match &loaded {
                Ok((_, origin)) => tracing::debug!(
                    image,
                    module = %function.mapped.path.display(),
                    ?origin,
                    duration_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "module ready"
                ),
                Err(error) => tracing::warn!(image, "{error}; calls to this image will fail"),
            }
            loaded.map(|(pre, _)| pre).map_err(Arc::new)
        });
        Some(compiled.as_ref().map_err(Arc::clone))
    }
}

pub struct Wasm {
    shared: Arc<Shared>,
    versions: MappedVersions,
    limits: Limits,
    /// Advances the engine's epoch while the instance lives, started by the first call.
    ticker: OnceLock<Ticker>,
}

impl Wasm {
    fn run(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let Some(compiled) = self.shared.compiled(image) else {
            return Err(EvalError::declined_because(image, NOT_MAPPED));
        };
        let pre = compiled.map_err(|error| {
            EvalError::failed(format!(
                "Failed to execute function {}: {error}",
                krm_plugin_api::quoted(image)
            ))
        })?;
        self.ticker
            .get_or_init(|| Ticker::start(self.shared.engine.clone()));
        run::run(
            &self.shared.engine,
            context,
            image,
            pre,
            &self.shared.functions[image].mapped,
            &self.limits,
            resource_list,
        )
    }
}

impl Evaluator for Wasm {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        if let Some(tag) = context.requested_tag() {
            let resolution = self
                .versions
                .resolve(WASM, image, &tag)
                .ok_or_else(|| EvalError::declined_because(image, NOT_MAPPED))??;
            context.report_resolved(&resolution.image);
            return self.run(context, &resolution.image, resource_list);
        }
        self.run(context, image, resource_list)
    }

    /// Each mapped image, named by itself: what `krm-runner functions` lists, and what
    /// `krm-runner fn IMAGE` (kpt's `--exec`) runs.
    fn functions(&self) -> Vec<FunctionSignature> {
        let mut functions: Vec<FunctionSignature> = self
            .shared
            .functions
            .iter()
            .map(|(image, function)| FunctionSignature {
                name: image.clone(),
                description: format!("WASI module {}", function.mapped.path.display()),
                images: vec![image.clone()],
                ..FunctionSignature::default()
            })
            .collect();
        functions.sort_by(|a, b| a.name.cmp(&b.name));
        functions
    }

    fn warm_up(&self, image: &str, _route: Option<&FunctionConfigRoute>) {
        if !self.shared.functions.contains_key(image) {
            return;
        }
        let shared = self.shared.clone();
        let image = image.to_owned();
        std::thread::spawn(move || {
            let _ = shared.compiled(&image);
        });
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        _route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        self.versions.resolve(WASM, image, tag)
    }

    fn serves(&self, image: &str, _route: Option<&FunctionConfigRoute>) -> Probe {
        if self.shared.functions.contains_key(image) {
            Probe::Serves
        } else if self.versions.has_repository(image) {
            // A call with a tag constraint runs a mapped version; `evaluate` decides.
            Probe::Unknown
        } else {
            Probe::Declines(NOT_MAPPED.to_owned())
        }
    }
}

/// Advances an engine's epoch every [`run::EPOCH_TICK`] until dropped, so that a running module
/// reaches its epoch deadline and its store checks the call's cancellation and deadline.
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".to_owned())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(run::EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawn the wasm epoch thread");
        Self { stop }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The engine every module of an instance is compiled for and runs on.
fn engine() -> Result<Engine, ConfigError> {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    Engine::new(&config)
        .map_err(|error| ConfigError::new(format!("cannot start wasmtime: {error:#}")))
}

pub struct WasmPlugin;

impl Plugin for WasmPlugin {
    const NAME: &'static str = WASM;
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "runs a mapped WASI module per image in a wasmtime sandbox (ResourceList on stdin)";
    type Config = WasmConfig;
    type Evaluator = Wasm;

    fn build(config: WasmConfig, context: &BuildContext) -> Result<Wasm, ConfigError> {
        let config::Resolved {
            functions,
            limits,
            cache_dir,
        } = config.resolve(context.max_message_bytes())?;
        let engine = engine()?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |state: &mut CallState| state.wasi())
            .map_err(|error| ConfigError::new(format!("cannot link WASI: {error:#}")))?;
        let versions = MappedVersions::new(functions.keys().map(String::as_str));
        let validate_only = context.validate_only();
        let compiler = Compiler::new(
            engine.clone(),
            linker,
            cache_dir.filter(|_| !validate_only),
            limits.max_module_bytes,
        );
        let shared = Arc::new(Shared {
            engine,
            compiler,
            functions: functions
                .into_iter()
                .map(|(image, mapped)| {
                    let function = Function {
                        mapped,
                        compiled: OnceLock::new(),
                    };
                    (image, function)
                })
                .collect(),
        });
        if !validate_only && !shared.functions.is_empty() {
            let warm = shared.clone();
            std::thread::Builder::new()
                .name("wasm-warm-up".to_owned())
                .spawn(move || {
                    for image in warm.functions.keys() {
                        let _ = warm.compiled(image);
                    }
                })
                .map_err(|error| {
                    ConfigError::new(format!("cannot start compiling modules: {error}"))
                })?;
        }
        tracing::debug!(functions = shared.functions.len(), "wasm evaluator ready");
        Ok(Wasm {
            shared,
            versions,
            limits,
            ticker: OnceLock::new(),
        })
    }
}

export_plugin!(WasmPlugin);

#[cfg(test)]
mod tests {
    use krm_plugin_api::ErrorKind;
    use krm_plugin_api::testing::PluginTester;
    use serde_json::json;

    use super::*;

    #[test]
    fn every_configuration_problem_is_reported_at_once() {
        let error = PluginTester::new()
            .build::<WasmPlugin>(
                "wasm",
                json!({
                    "memory_limit_mib": 0,
                    "max_output_bytes": 0,
                    "env": {"A=B": "c"},
                    "functions": [
                        {"image": "a:v1", "path": "relative.wasm"},
                        {"image": "b:v1", "path": "/b.wasm"},
                        {"image": "b:v1", "path": "/b.wasm"},
                        {"image": " ", "path": "/c.wasm"},
                    ],
                }),
            )
            .err()
            .unwrap();
        let text = error.to_string();
        assert_eq!(error.problems().len(), 6, "{text}");
        for expected in [
            "memory_limit_mib",
            "max_output_bytes",
            "env.A=B",
            "functions[0].path: relative path relative.wasm needs `modules_dir`",
            "functions[2].image: image \"b:v1\" is already mapped by functions[1]",
            "functions[3].image: empty image name",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
    }

    #[test]
    fn an_unknown_key_is_refused() {
        let error = PluginTester::new()
            .build::<WasmPlugin>("wasm", json!({"memory_limit": 1}))
            .err()
            .unwrap();
        assert!(error.to_string().contains("memory_limit"), "{error}");
    }

    #[test]
    fn a_mapped_module_that_is_not_webassembly_fails_its_calls_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.wasm");
        std::fs::write(&path, b"#!/bin/sh\necho not a module\n").unwrap();
        let wasm = PluginTester::new()
            .build::<WasmPlugin>(
                "wasm",
                json!({"cache_dir": "", "functions": [{"image": "a:v1", "path": path}]}),
            )
            .unwrap();
        let error = wasm.evaluate("a:v1", b"items: []\n").unwrap_err();
        assert_eq!(error.kind, ErrorKind::Failed, "{}", error.message);
        assert!(
            error
                .message
                .contains(&format!("{} is not a WebAssembly module", path.display())),
            "{}",
            error.message
        );
        let declined = wasm.evaluate("b:v1", b"items: []\n").unwrap_err();
        assert_eq!(declined.kind, ErrorKind::NotFound, "{}", declined.message);
    }
}
