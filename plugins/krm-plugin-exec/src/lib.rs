//! `exec`: runs a local executable per function image.
//!
//! The executable gets the ResourceList on stdin and no arguments; its stdout is the result and
//! its stderr the log. Images map to executables by exact string: an image name is never turned
//! into a path, so a caller cannot make the runner execute arbitrary files.
//!
//! A mapped executable that is missing or not executable fails the call (naming the path) rather
//! than declining: the operator said this image runs from that file, and quietly running the
//! image somewhere else (a pod, say) would hide a broken deployment.
//!
//! A call carrying a tag constraint (Porch's request field 3) for an untagged image runs the
//! mapped image of that repository with the highest version satisfying it (`example.com/fn`
//! with `~1.2` picks `example.com/fn:v1.2.7` over `:v1.2.3`); the chosen image is reported to
//! the runner.
//!
//! A call a FunctionConfig routes here (its `binaryExecutor`) runs the binary the runner resolved
//! from it, in the same minimal environment, whatever the map says.
//!
//! Every function runs in its own process group, in a minimal environment (see [`ExecConfig`]).
//! When the call is cancelled, its deadline passes or the function exits, the whole group is
//! killed, so nothing a function spawned outlives the call.

mod config;
mod identity;
mod process;

use std::collections::HashMap;
use std::path::PathBuf;

use krm_plugin_api::process::OutputLimits;
use krm_plugin_api::{
    BuildContext, CacheIdentity, CallContext, ConfigError, EvalError, EvalResponse, Evaluator,
    FunctionConfigExecutor, FunctionConfigRoute, Plugin, Probe, Resolution, export_plugin,
};
use krm_runner_function_config::BinaryExecutor;
use krm_runner_function_config::version::MappedVersions;

pub use config::ExecConfig;

/// What one image runs.
#[derive(Debug, Clone)]
struct Function {
    path: PathBuf,
    env: Vec<(String, String)>,
    working_dir: PathBuf,
}

pub struct Exec {
    functions: HashMap<String, Function>,
    versions: MappedVersions,
    limits: OutputLimits,
    base_env: Vec<(String, String)>,
    hashes: identity::ContentHashes,
}

impl Evaluator for Exec {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        if let Some(route) = context
            .route()
            .filter(|route| route.executor == FunctionConfigExecutor::BinaryExecutor)
        {
            let binary: BinaryExecutor = route.settings()?;
            let function = Function {
                path: PathBuf::from(binary.path),
                env: self.base_env.clone(),
                working_dir: PathBuf::from("/"),
            };
            return process::run(context, image, &function, resource_list, &self.limits);
        }
        if let Some(tag) = context.requested_tag() {
            let resolution = self
                .versions
                .resolve(EXEC, image, &tag)
                .ok_or_else(|| EvalError::declined_because(image, NOT_MAPPED))??;
            context.report_resolved(&resolution.image);
            let function = &self.functions[&resolution.image];
            return process::run(
                context,
                &resolution.image,
                function,
                resource_list,
                &self.limits,
            );
        }
        let Some(function) = self.functions.get(image) else {
            return Err(EvalError::declined_because(image, NOT_MAPPED));
        };
        process::run(context, image, function, resource_list, &self.limits)
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        _route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        self.versions.resolve(EXEC, image, tag)
    }

    /// Never pure (an executable may read anything): the identity lets an operator mark
    /// images cacheable in the runner's configuration, and a replaced binary misses.
    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let routed = route.filter(|route| route.executor == FunctionConfigExecutor::BinaryExecutor);
        let (path, env, working_dir) = match routed {
            Some(route) => {
                let binary: BinaryExecutor = route.settings().ok()?;
                (
                    PathBuf::from(binary.path),
                    &self.base_env,
                    PathBuf::from("/"),
                )
            }
            None => {
                let function = self.functions.get(image)?;
                (
                    function.path.clone(),
                    &function.env,
                    function.working_dir.clone(),
                )
            }
        };
        let hash = self.hashes.of(&path)?;
        Some(CacheIdentity {
            pure: false,
            code: serde_json::json!({
                "path": path,
                "sha256": hash,
                "env": env,
                "working_dir": working_dir,
            })
            .to_string(),
            unnamed: false,
        })
    }

    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        let routed =
            route.is_some_and(|route| route.executor == FunctionConfigExecutor::BinaryExecutor);
        if routed || self.functions.contains_key(image) {
            Probe::Serves
        } else {
            Probe::Declines(NOT_MAPPED.to_owned())
        }
    }
}

/// Why an image is declined: the map is by exact image string.
const NOT_MAPPED: &str = "no executable is mapped to this image (`functions`: exact image names)";

const EXEC: &str = "exec";

pub struct ExecPlugin;

impl Plugin for ExecPlugin {
    const NAME: &'static str = EXEC;
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "runs a mapped local executable per image (ResourceList on stdin, result on stdout)";
    type Config = ExecConfig;
    type Evaluator = Exec;

    fn build(config: ExecConfig, context: &BuildContext) -> Result<Exec, ConfigError> {
        let config::Resolved {
            functions,
            limits,
            base_env,
        } = config.resolve(context.max_message_bytes())?;
        for (image, function) in &functions {
            if let Err(problem) = krm_plugin_api::process::check_executable(&function.path) {
                tracing::warn!(image, "{problem}; calls to this image will fail");
            }
        }
        tracing::debug!(functions = functions.len(), "exec evaluator ready");
        Ok(Exec {
            versions: MappedVersions::new(functions.keys().map(String::as_str)),
            functions,
            limits,
            base_env,
            hashes: identity::ContentHashes::default(),
        })
    }
}

export_plugin!(ExecPlugin);

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use krm_plugin_api::testing::{PluginTester, TestEvaluator};
    use krm_plugin_api::{CancelReason, ErrorKind};
    use serde_json::json;

    use super::*;

    /// An exec instance mapping each `(image, shell script)` to an executable in `dir`.
    fn exec(dir: &std::path::Path, functions: &[(&str, &str)]) -> TestEvaluator {
        let entries: Vec<_> = functions
            .iter()
            .map(|(image, script)| {
                let path = dir.join(image.replace(['/', ':'], "_"));
                std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
                json!({"image": image, "path": path})
            })
            .collect();
        PluginTester::new()
            .build::<ExecPlugin>("exec", json!({ "functions": entries }))
            .unwrap()
    }

    #[test]
    fn a_mapped_image_runs_as_a_process_with_the_resource_list_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let exec = exec(
            dir.path(),
            &[("example.com/copy:v1", "cat; echo copied >&2")],
        );
        let response = exec
            .evaluate("example.com/copy:v1", b"items: []\n")
            .unwrap();
        assert_eq!(response.resource_list, b"items: []\n");
        assert_eq!(response.log, b"copied\n");
        assert_eq!(response.served_by.as_deref(), Some("exec"));
    }

    #[test]
    fn an_unmapped_image_is_declined_so_the_chain_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let exec = exec(dir.path(), &[("example.com/copy:v1", "cat")]);
        let error = exec.evaluate("example.com/other:v1", b"").unwrap_err();
        assert_eq!(error.kind, ErrorKind::NotFound, "{}", error.message);
    }

    #[test]
    fn the_callers_deadline_kills_a_function_that_hangs() {
        let dir = tempfile::tempdir().unwrap();
        let exec = exec(dir.path(), &[("example.com/hang:v1", "exec sleep 600")]);
        let error = exec
            .call("example.com/hang:v1")
            .deadline(Duration::from_millis(200))
            .run(b"items: []\n")
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::DeadlineExceeded, "{}", error.message);
    }

    #[test]
    fn a_cancelled_call_ends_its_function() {
        let dir = tempfile::tempdir().unwrap();
        let exec = exec(dir.path(), &[("example.com/hang:v1", "exec sleep 600")]);
        let error = exec
            .call("example.com/hang:v1")
            .cancel_after(Duration::from_millis(100), CancelReason::CallerCancelled)
            .run(b"items: []\n")
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Cancelled, "{}", error.message);
    }

    #[test]
    fn every_function_problem_is_reported_at_once() {
        let error = PluginTester::new()
            .build::<ExecPlugin>(
                "exec",
                json!({"functions": [
                    {"image": "a:v1"},
                    {"image": "b:v1", "path": "/bin/true"},
                    {"image": "b:v1", "path": "/bin/true"},
                ]}),
            )
            .err()
            .unwrap();
        let text = error.to_string();
        assert_eq!(error.problems().len(), 2, "{text}");
        assert!(text.contains("functions[0]"), "{text}");
        assert!(
            text.contains("functions[2]: image \"b:v1\" is already mapped by functions[1]"),
            "{text}"
        );
    }
}
