//! `wasm`: runs a WebAssembly module per function image, on wasmtime.
//!
//! A module is a WASI preview 1 command (it exports `_start`), as Go (`GOOS=wasip1`), TinyGo,
//! Rust (`wasm32-wasip1`) and C (wasi-libc) build it, following the KRM function spec's exec
//! contract: the ResourceList on stdin, the ResourceList on stdout, the log on stderr, a
//! non-zero exit for a failed function. Images map to module files by exact string, as `exec`
//! maps executables; a call carrying a tag constraint for an untagged image runs the mapped
//! image of that repository with the highest version satisfying it. Images under a configured
//! registry prefix are pulled as OCI artifacts (see [`registry`]), pinned by digest, the
//! highest version in the registry satisfying a call's tag constraint. A call a FunctionConfig
//! routes here (its `wasmExecutor`) runs the module the route names instead, whatever the map
//! says: a file (compiled once per path), or an image under a registry prefix, pulled as the
//! tag the call runs as unless the image names its own version.
//!
//! The sandbox: no preopened directory, no socket, no environment variable but those the
//! configuration grants; each call a fresh instance in a store of its own, its linear memory
//! limited, interrupted within a few milliseconds of its call's cancellation or deadline; its
//! stdout bounded by the message size (more stops the module) and its stderr by the log size.
//! A module that passes a limit is answered RESOURCE_EXHAUSTED naming the limit, a trap
//! INTERNAL naming it; the runner goes on serving.
//!
//! Each module is compiled once per content (see [`compile`]): in the background when the
//! instance is built, or at the first call that needs it; a pulled one once per digest.

mod compile;
mod config;
mod registry;
mod run;

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use krm_plugin_api::{
    BuildContext, CacheIdentity, CallContext, CancelReason, ConfigError, ErrorKind, EvalError,
    EvalResponse, Evaluator, FunctionConfigExecutor, FunctionConfigRoute, FunctionSignature,
    Plugin, Probe, Resolution, export_plugin,
};
use krm_runner_function_config::WasmExecutor;
use krm_runner_function_config::version::MappedVersions;
use wasmtime::{Engine, InstancePre, Linker};

use crate::compile::{CompileError, Compiler};
use crate::config::{Limits, Mapped};
use crate::registry::{Pinned, Registries};
use crate::run::CallState;

pub use config::WasmConfig;

const WASM: &str = "wasm";

/// Why an image is declined: the map is by exact image string.
const NOT_MAPPED: &str = "no module is mapped to this image (`functions`: exact image names)";

/// A module file as compiled, or why it cannot be.
type Compiled = Result<InstancePre<CallState>, Arc<CompileError>>;

/// One mapped image: its module file, compiled once.
struct Function {
    mapped: Mapped,
    compiled: OnceLock<Compiled>,
}

/// The state every call of an instance shares; the background warm-up holds it too.
struct Shared {
    engine: Engine,
    compiler: Compiler,
    functions: HashMap<String, Function>,
    /// The environment granted to every module (the instance's `env`); a mapped image's
    /// module gets its own entry's too.
    env: Vec<(String, String)>,
    /// The registry prefixes served, when any are configured.
    registries: Option<Registries>,
    /// The module files FunctionConfigs' wasmExecutors name, each compiled once, by path.
    routed: Mutex<HashMap<PathBuf, Arc<OnceLock<Compiled>>>>,
    /// Pulled modules, compiled, by pinned reference (`repository@digest`).
    pulled: Mutex<HashMap<String, InstancePre<CallState>>>,
    /// Drives the registry requests, made at the first pull.
    runtime: OnceLock<tokio::runtime::Runtime>,
}

impl Shared {
    /// The compiled module of `image`, compiling it at the first need.
    fn compiled(&self, image: &str) -> Option<Result<&InstancePre<CallState>, Arc<CompileError>>> {
        let function = self.functions.get(image)?;
        let compiled = function
            .compiled
            .get_or_init(|| self.compile(image, &function.mapped.path));
        Some(compiled.as_ref().map_err(Arc::clone))
    }

    /// The compiled module at `path` (a wasmExecutor's), compiling it at the first need. A
    /// failure is not kept: the operator may fix the file a FunctionConfig names while the
    /// runner serves, and the next call reads it again.
    fn compiled_file(&self, image: &str, path: &Path) -> Compiled {
        let slot = self
            .routed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(path.to_owned())
            .or_default()
            .clone();
        let compiled = slot.get_or_init(|| self.compile(image, path)).clone();
        if compiled.is_err() {
            let mut routed = self.routed.lock().unwrap_or_else(PoisonError::into_inner);
            if routed
                .get(path)
                .is_some_and(|kept| Arc::ptr_eq(kept, &slot))
            {
                routed.remove(path);
            }
        }
        compiled
    }

    fn compile(&self, image: &str, path: &Path) -> Compiled {
        let started = Instant::now();
        let loaded = self.compiler.load(path);
        match &loaded {
            Ok((_, origin)) => tracing::debug!(
                image,
                module = %path.display(),
                ?origin,
                duration_ms = started.elapsed().as_secs_f64() * 1000.0,
                "module ready"
            ),
            Err(error) => tracing::warn!(image, "{error}; calls to this module will fail"),
        }
        loaded.map(|(pre, _)| pre).map_err(Arc::new)
    }

    /// Runs `work` (registry requests for `image`) to its end, its call's cancellation, or
    /// `deadline` (the call's, else `pull_timeout_seconds` from now).
    fn block_on<T>(
        &self,
        image: &str,
        deadline: Option<Instant>,
        cancelled: Option<impl Future<Output = CancelReason>>,
        work: impl Future<Output = Result<T, EvalError>>,
    ) -> Result<T, EvalError> {
        let registries = self.registries.as_ref().expect("pulls need registries");
        let runtime = match self.runtime.get() {
            Some(runtime) => runtime,
            None => {
                let built = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| {
                        EvalError::internal(format!("cannot start the registry client: {error}"))
                    })?;
                self.runtime.get_or_init(|| built)
            }
        };
        let timeout = registries.timeout();
        let until = deadline.unwrap_or_else(|| Instant::now() + timeout);
        runtime.block_on(async {
            let bounded = async {
                match tokio::time::timeout_at(until.into(), work).await {
                    Ok(outcome) => outcome,
                    Err(_) if deadline.is_some() => {
                        Err(CancelReason::DeadlineExceeded.to_error(image))
                    }
                    Err(_) => Err(EvalError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "pulling {} took longer than {} s (pull_timeout_seconds)",
                            krm_plugin_api::quoted(image),
                            timeout.as_secs()
                        ),
                    )),
                }
            };
            match cancelled {
                Some(cancelled) => tokio::select! {
                    outcome = bounded => outcome,
                    reason = cancelled => Err(reason.to_error(image)),
                },
                None => bounded.await,
            }
        })
    }

    /// `image` pinned to a digest (by `constraint` when given) and its module, pulled and
    /// compiled at the first need of that digest.
    fn pulled(
        &self,
        image: &str,
        constraint: Option<&str>,
        deadline: Option<Instant>,
        cancelled: Option<impl Future<Output = CancelReason>>,
    ) -> Result<(Pinned, InstancePre<CallState>), EvalError> {
        let registries = self.registries.as_ref().expect("pulls need registries");
        let limit = self.compiler.max_module_bytes();
        let (pinned, module) = self.block_on(image, deadline, cancelled, async {
            let pinned = registries
                .pin(image, constraint)
                .await
                .map_err(|error| error.to_eval_error())?;
            if let Some(pre) = self.pulled_module(&pinned.reference) {
                return Ok((pinned, Ok(pre)));
            }
            let bytes = registries
                .pull(&pinned.reference, limit)
                .await
                .map_err(|error| error.to_eval_error())?;
            Ok((pinned, Err(bytes)))
        })?;
        let pre = match module {
            Ok(pre) => pre,
            // Compiled here, off the registry client's runtime: it is the longest part.
            Err(bytes) => {
                let started = Instant::now();
                let (pre, origin) = self
                    .compiler
                    .load_bytes(&pinned.reference, &bytes)
                    .map_err(|error| {
                        EvalError::failed(format!(
                            "Failed to execute function {}: {error}",
                            krm_plugin_api::quoted(image)
                        ))
                    })?;
                tracing::debug!(
                    image,
                    module = pinned.reference,
                    ?origin,
                    duration_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "pulled module ready"
                );
                self.pulled
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(pinned.reference.clone(), pre.clone());
                pre
            }
        };
        Ok((pinned, pre))
    }

    fn pulled_module(&self, reference: &str) -> Option<InstancePre<CallState>> {
        self.pulled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(reference)
            .cloned()
    }

    /// Whether `image` is under a configured registry prefix.
    fn pulls(&self, image: &str) -> bool {
        self.registries
            .as_ref()
            .is_some_and(|registries| registries.serves(image))
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
        let pre = compiled.map_err(|error| compile_failure(image, &error))?;
        self.execute(
            context,
            image,
            pre,
            &self.shared.functions[image].mapped.env,
            resource_list,
        )
    }

    /// Runs the module a FunctionConfig's wasmExecutor names for `image`, with the instance's
    /// environment.
    fn run_routed(
        &self,
        context: &CallContext<'_>,
        image: &str,
        routed: &WasmExecutor,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        match RoutedModule::of(routed) {
            Some(RoutedModule::File(path)) => {
                let pre = self
                    .shared
                    .compiled_file(image, &path)
                    .map_err(|error| compile_failure(image, &error))?;
                self.execute(context, image, &pre, &self.shared.env, resource_list)
            }
            Some(RoutedModule::Image(module)) => {
                if !self.shared.pulls(&module) {
                    return Err(EvalError::declined_because(image, unpulled(&module)));
                }
                // Without a tag of its own or one the route gives, the call's constraint picks
                // the module's version in its registry.
                let constraint = (!names_a_version(&module))
                    .then(|| context.requested_tag())
                    .flatten();
                self.run_pulled(context, &module, constraint.as_deref(), resource_list)
            }
            None => Err(EvalError::internal(format!(
                "FunctionConfig wasmExecutor for {} names no module",
                krm_plugin_api::quoted(image)
            ))),
        }
    }

    /// Runs the module `image` names in its registry (the highest version satisfying
    /// `constraint`, when given).
    fn run_pulled(
        &self,
        context: &CallContext<'_>,
        image: &str,
        constraint: Option<&str>,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let (pinned, pre) = self.shared.pulled(
            image,
            constraint,
            context.deadline(),
            Some(context.cancelled()),
        )?;
        if let Some(resolution) = &pinned.resolution {
            context.report_resolved(&resolution.reference());
        }
        self.execute(context, image, &pre, &self.shared.env, resource_list)
    }

    /// Runs a compiled module for one call, under the instance's limits, the engine's epoch
    /// ticking.
    fn execute(
        &self,
        context: &CallContext<'_>,
        image: &str,
        pre: &InstancePre<CallState>,
        env: &[(String, String)],
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        self.ticker
            .get_or_init(|| Ticker::start(self.shared.engine.clone()));
        run::run(
            &self.shared.engine,
            context,
            image,
            pre,
            env,
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
        if let Some(route) = context
            .route()
            .filter(|route| route.executor == FunctionConfigExecutor::WasmExecutor)
        {
            let routed: WasmExecutor = route.settings()?;
            return self.run_routed(context, image, &routed, resource_list);
        }
        if let Some(tag) = context.requested_tag() {
            return match self.versions.resolve(WASM, image, &tag) {
                Some(resolution) => {
                    let resolution = resolution?;
                    context.report_resolved(&resolution.image);
                    self.run(context, &resolution.image, resource_list)
                }
                None if self.shared.pulls(image) => {
                    self.run_pulled(context, image, Some(&tag), resource_list)
                }
                None => Err(EvalError::declined_because(image, NOT_MAPPED)),
            };
        }
        if !self.shared.functions.contains_key(image) && self.shared.pulls(image) {
            return self.run_pulled(context, image, None, resource_list);
        }
        self.run(context, image, resource_list)
    }

    /// A pulled module is named by its digest, so that a tag moved in its registry misses; the
    /// digest is the one a call would pin now, else (an untagged image, whose constraint only
    /// the call resolves, or a tag not resolved within `refresh_seconds`) the call is left
    /// uncached. A module file names nothing: it is compiled once for the instance's life, so
    /// the runner keys its calls by instance and keeps them in memory only.
    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let module =
            match route.filter(|route| route.executor == FunctionConfigExecutor::WasmExecutor) {
                Some(route) => match RoutedModule::of(&route.settings::<WasmExecutor>().ok()?)? {
                    RoutedModule::File(_) => return None,
                    RoutedModule::Image(module) => module,
                },
                None if !self.shared.functions.contains_key(image) && self.shared.pulls(image) => {
                    image.to_owned()
                }
                None => return None,
            };
        let registries = self.shared.registries.as_ref()?;
        let digest = match module.split_once('@') {
            Some((_, digest)) => Some(digest.to_owned()),
            None if names_a_version(&module) => registries.fresh_digest(&module),
            None => None,
        };
        Some(match digest {
            Some(digest) => CacheIdentity {
                pure: false,
                code: serde_json::json!({ "module": module, "digest": digest }).to_string(),
                unnamed: false,
            },
            None => CacheIdentity {
                unnamed: true,
                ..CacheIdentity::default()
            },
        })
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

    /// Compiles a mapped module, or pulls and compiles a tagged or pinned image of a registry
    /// prefix, in the background.
    /// A wasmExecutor's module (the route's) likewise.
    fn warm_up(&self, image: &str, route: Option<&FunctionConfigRoute>) {
        let routed = route
            .filter(|route| route.executor == FunctionConfigExecutor::WasmExecutor)
            .and_then(|route| route.settings::<WasmExecutor>().ok());
        let (image, file) = match routed.as_ref().and_then(RoutedModule::of) {
            Some(RoutedModule::File(path)) => (image.to_owned(), Some(path)),
            Some(RoutedModule::Image(module)) => (module, None),
            None if routed.is_some() => return,
            None if self.shared.functions.contains_key(image) => {
                let shared = self.shared.clone();
                let image = image.to_owned();
                std::thread::spawn(move || {
                    let _ = shared.compiled(&image);
                });
                return;
            }
            None => (image.to_owned(), None),
        };
        if file.is_none() && !(names_a_version(&image) && self.shared.pulls(&image)) {
            return;
        }
        let shared = self.shared.clone();
        std::thread::spawn(move || {
            if let Some(path) = file {
                let _ = shared.compiled_file(&image, &path);
            } else if let Err(error) =
                shared.pulled(&image, None, None, None::<std::future::Pending<_>>)
            {
                tracing::warn!(image, "cannot warm up: {}", error.message);
            }
        });
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        let routed = route
            .filter(|route| route.executor == FunctionConfigExecutor::WasmExecutor)
            .and_then(|route| route.settings::<WasmExecutor>().ok());
        // A wasmExecutor's module image without a version of its own: the constraint picks
        // one among its tags; a file or a pinned module has no versions to pick from.
        let image = match routed.as_ref().and_then(RoutedModule::of) {
            Some(RoutedModule::Image(module)) if !names_a_version(&module) => module,
            Some(_) => return None,
            None => {
                if let Some(resolution) = self.versions.resolve(WASM, image, tag) {
                    return Some(resolution);
                }
                image.to_owned()
            }
        };
        let image = image.as_str();
        let registries = self.shared.registries.as_ref()?;
        if !registries.serves(image) {
            return None;
        }
        Some(
            self.shared
                .block_on(image, None, None::<std::future::Pending<_>>, async {
                    registries
                        .resolve(image, tag)
                        .await
                        .map_err(|error| error.to_eval_error())
                }),
        )
    }

    fn serves(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        if let Some(route) =
            route.filter(|route| route.executor == FunctionConfigExecutor::WasmExecutor)
        {
            return match route
                .settings::<WasmExecutor>()
                .ok()
                .as_ref()
                .and_then(RoutedModule::of)
            {
                Some(RoutedModule::Image(module)) if !self.shared.pulls(&module) => {
                    Probe::Declines(unpulled(&module))
                }
                Some(_) => Probe::Serves,
                None => Probe::Declines("the wasmExecutor names no module".to_owned()),
            };
        }
        if self.shared.functions.contains_key(image) || self.shared.pulls(image) {
            Probe::Serves
        } else if self.versions.has_repository(image) {
            // A call with a tag constraint runs a mapped version; `evaluate` decides.
            Probe::Unknown
        } else {
            Probe::Declines(NOT_MAPPED.to_owned())
        }
    }
}

/// The module a FunctionConfig's wasmExecutor names, as the runner hands it on (a path made
/// absolute, the tag the call runs as in `tags`).
enum RoutedModule {
    File(PathBuf),
    /// The reference to pull: the section's `image`, with the call's tag when it has none.
    Image(String),
}

impl RoutedModule {
    fn of(routed: &WasmExecutor) -> Option<Self> {
        match (&routed.path, &routed.image) {
            (Some(path), _) => Some(Self::File(PathBuf::from(path))),
            (None, Some(image)) => Some(Self::Image(match routed.tags.first() {
                Some(tag) if !tag.is_empty() && !names_a_version(image) => {
                    format!("{image}:{tag}")
                }
                _ => image.clone(),
            })),
            (None, None) => None,
        }
    }
}

/// Whether `image` carries a tag or a digest (a registry's port is neither).
fn names_a_version(image: &str) -> bool {
    image.contains('@')
        || image
            .rsplit('/')
            .next()
            .is_some_and(|name| name.contains(':'))
}

/// Why a wasmExecutor's module image is declined.
fn unpulled(module: &str) -> String {
    format!(
        "wasmExecutor image {} is under none of this instance's `registries` prefixes",
        krm_plugin_api::quoted(module)
    )
}

fn compile_failure(image: &str, error: &CompileError) -> EvalError {
    EvalError::failed(format!(
        "Failed to execute function {}: {error}",
        krm_plugin_api::quoted(image)
    ))
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
            pulls,
            env,
        } = config.resolve(context.max_message_bytes())?;
        let registries = if pulls.prefixes.is_empty() {
            None
        } else {
            Some(Registries::new(pulls).map_err(ConfigError::new)?)
        };
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
            env,
            registries,
            routed: Mutex::default(),
            pulled: Mutex::default(),
            runtime: OnceLock::new(),
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
    use krm_plugin_api::testing::PluginTester;
    use krm_plugin_api::{Answer, ErrorKind};
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
    fn registry_problems_are_reported_at_once_naming_their_fields() {
        let dir = tempfile::tempdir().unwrap();
        let auth_file = dir.path().join("config.json");
        std::fs::write(&auth_file, b"{\"auths\": 1}").unwrap();
        let error = PluginTester::new()
            .build::<WasmPlugin>(
                "wasm",
                json!({
                    "registries": [{"prefix": "no-registry"}, {"prefix": "/path/"}, {"prefix": "ok.example/fn/"}],
                    "auth_file": auth_file,
                    "pull_timeout_seconds": 0,
                }),
            )
            .err()
            .unwrap();
        let text = error.to_string();
        assert_eq!(error.problems().len(), 4, "{text}");
        for expected in [
            "registries[0].prefix: \"no-registry\" names no registry",
            "registries[1].prefix: \"/path/\" is not an image prefix",
            "auth_file: ",
            "pull_timeout_seconds: must be at least 1",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
    }

    #[test]
    fn an_image_under_a_registry_prefix_is_served_and_others_declined() {
        let wasm = PluginTester::new()
            .build::<WasmPlugin>(
                "wasm",
                json!({"cache_dir": "", "registries": [{"prefix": "registry.example/fn/"}]}),
            )
            .unwrap();
        let served = wasm.probe("registry.example/fn/set-namespace:v1", None);
        assert_eq!(served.answer, Some(Answer::Serves("wasm".to_owned())));
        let other = wasm.probe("registry.example/other/set-namespace:v1", None);
        assert_eq!(other.answer, None);
        assert!(
            other.declined[0].contains(NOT_MAPPED),
            "{:?}",
            other.declined
        );
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
