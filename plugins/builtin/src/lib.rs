//! `builtin`: the kpt catalog's most-used functions, in-process and comment-preserving.
//!
//! Each function answers to its short name (`set-namespace`) and to the catalog images
//! (`ghcr.io/kptdev/krm-functions-catalog/NAME:TAG`, `gcr.io/kpt-fn/NAME:TAG`, and the runner's
//! `default_image_prefix`) for the tags whose behaviour it reproduces; anything else is
//! NotFound so the chain falls through. Output edits the input text in place, so whatever a
//! function does not change comes back byte-identical.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator,
    FunctionConfigExecutor, FunctionConfigRoute, FunctionSignature, Plugin, Probe, Resolution,
    pick_function,
};
use krm_runner_function_config::GoExecutor;
use krm_runner_function_config::version::{Constraint, sorted_versions};
use serde::Deserialize;

mod functions;
#[cfg(test)]
mod proptests;
mod rl;
mod typed;

use functions::{Ctx, Exit, FUNCTIONS, Function, Limits};
use krm_plugin_api::ErrorKind;
use krm_yaml_edit as yaml;
use yaml::Stop;

/// The runner's default `max_message_bytes`, for when it does not say.
const DEFAULT_MAX_OUTPUT_BYTES: usize = 6 << 20;

/// The catalog's image prefixes, always recognised.
const CATALOG_PREFIXES: &[&str] = &["ghcr.io/kptdev/krm-functions-catalog/", "gcr.io/kpt-fn/"];

/// The plugin's `config:` section.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Per function, the image tags (or `sha256:` digests) it answers to, replacing the
    /// built-in list for that function. An empty list leaves only the short name.
    #[serde(default)]
    pub tags: BTreeMap<String, Vec<String>>,
    /// More image prefixes (each ending in `/`) to recognise besides the catalog's.
    #[serde(default)]
    pub prefixes: Vec<String>,
    /// Functions not to serve at all.
    #[serde(default)]
    pub disabled: Vec<String>,
}

pub struct BuiltinPlugin;

impl Plugin for BuiltinPlugin {
    const NAME: &'static str = "builtin";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "kpt catalog functions (set-namespace, set-labels, set-image, ...) run in-process";
    type Config = Config;
    type Evaluator = Builtin;

    fn build(config: Config, context: &BuildContext) -> Result<Builtin, ConfigError> {
        let mut builtin = Builtin::new(config, context.setting("default_image_prefix"))?;
        if let Some(max) = context
            .setting("max_message_bytes")
            .and_then(|max| max.parse().ok())
        {
            builtin.max_output_bytes = max;
        }
        Ok(builtin)
    }
}

krm_plugin_api::export_plugin!(BuiltinPlugin);

struct Served {
    function: &'static Function,
    tags: Vec<String>,
}

/// The evaluator: one per configured instance.
pub struct Builtin {
    served: Vec<Served>,
    prefixes: Vec<String>,
    max_output_bytes: usize,
    /// Built on first use: a call of a catalog function never needs it.
    typed: OnceLock<typed::Typed>,
}

impl Builtin {
    /// Builds an instance; `default_prefix` is the runner's `default_image_prefix`.
    pub fn new(config: Config, default_prefix: Option<String>) -> Result<Self, ConfigError> {
        for name in config.tags.keys().chain(&config.disabled) {
            if !FUNCTIONS.iter().any(|f| f.name == name) {
                let known: Vec<_> = FUNCTIONS.iter().map(|f| f.name).collect();
                return Err(ConfigError::field(
                    format!("tags.{name}"),
                    format!("unknown function {name:?}; known: {}", known.join(", ")),
                ));
            }
        }
        let mut prefixes: Vec<String> = CATALOG_PREFIXES.iter().map(|p| (*p).to_owned()).collect();
        for (i, prefix) in config.prefixes.iter().enumerate() {
            if prefix.is_empty() || prefix.contains(char::is_whitespace) {
                return Err(ConfigError::field(
                    format!("prefixes[{i}]"),
                    "must be a non-empty image prefix",
                ));
            }
        }
        prefixes.extend(config.prefixes.iter().cloned());
        prefixes.extend(default_prefix.filter(|p| !p.is_empty()));
        for prefix in &mut prefixes {
            if !prefix.ends_with('/') {
                prefix.push('/');
            }
        }
        // The runner's default prefix may repeat a catalog prefix.
        let mut seen = std::collections::HashSet::new();
        prefixes.retain(|prefix| seen.insert(prefix.clone()));
        let served = FUNCTIONS
            .iter()
            .filter(|f| !config.disabled.iter().any(|d| d == f.name))
            .map(|&function| Served {
                function,
                tags: config.tags.get(function.name).cloned().unwrap_or_else(|| {
                    function
                        .tags
                        .iter()
                        .map(|(tag, _)| (*tag).to_owned())
                        .collect()
                }),
            })
            .collect();
        Ok(Self {
            served,
            prefixes,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            typed: OnceLock::new(),
        })
    }

    fn typed(&self) -> &typed::Typed {
        self.typed.get_or_init(typed::Typed::new)
    }

    /// `image` without a recognised prefix, and whether it had one.
    fn strip_prefix<'a>(&self, image: &'a str) -> (&'a str, bool) {
        self.prefixes
            .iter()
            .find_map(|p| image.strip_prefix(p.as_str()))
            .map(|rest| (rest, true))
            .unwrap_or((image, false))
    }

    /// The function serving `image`, if any.
    #[cfg(test)]
    fn lookup(&self, image: &str) -> Option<&'static Function> {
        self.find(image).ok()
    }

    /// The function serving `image`, or why none does (the reason a decline gives).
    fn find(&self, image: &str) -> Result<&'static Function, String> {
        let (rest, prefixed) = self.strip_prefix(image);
        let (name_tag, digest) = match rest.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (rest, None),
        };
        let (name, tag) = match name_tag.split_once(':') {
            Some((n, t)) => (n, Some(t)),
            None => (name_tag, None),
        };
        let Some(served) = self.served.iter().find(|s| s.function.name == name) else {
            return Err(if !prefixed && name.contains('/') {
                format!(
                    "not an image under the prefixes it answers to ({})",
                    self.prefixes.join(", ")
                )
            } else if FUNCTIONS.iter().any(|f| f.name == name) {
                format!("{name} is disabled in its configuration")
            } else {
                format!("{name:?} is not one of its functions (`krm-runner functions` lists them)")
            });
        };
        let reproduced = || match served.tags.as_slice() {
            [] => format!("{name} answers only to its short name"),
            tags => format!("{name} is reproduced for tags {}", tags.join(", ")),
        };
        let accepted = match (tag, digest) {
            // The bare short name means "this implementation".
            (None, None) if !prefixed => return Ok(served.function),
            (None, None) => return Err(format!("{}; the image names none", reproduced())),
            (Some(tag), None) => served.tags.iter().any(|t| t == tag),
            (tag, Some(digest)) => {
                served.tags.iter().any(|t| t == digest)
                    && tag.is_none_or(|tag| served.tags.iter().any(|t| t == tag))
            }
        };
        if accepted {
            return Ok(served.function);
        }
        let asked = [tag, digest].into_iter().flatten().collect::<Vec<_>>();
        Err(format!("{}, not {}", reproduced(), asked.join("@")))
    }

    /// The function a call for `image` runs here, catalog or typed, or why it declines (see
    /// [`Builtin::find`] and [`typed::Typed::find`]); a FunctionConfig's goExecutor names the
    /// function by id instead, as an untagged image would. The outer error fails the call.
    fn choose(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Result<Result<Chosen<'_>, String>, EvalError> {
        let routed = route.filter(|route| route.executor == FunctionConfigExecutor::GoExecutor);
        let Some(route) = routed else {
            return Ok(match self.find(image) {
                Ok(function) => Ok(Chosen::Catalog(function)),
                Err(reason) => self.typed().find(image).map(Chosen::Typed).ok_or(reason),
            });
        };
        // The runner checked that the FunctionConfig's id names one of ours.
        let go: GoExecutor = route.settings()?;
        let id = go.id.unwrap_or_default();
        if let Some(served) = self.served.iter().find(|served| served.function.name == id) {
            return Ok(Ok(Chosen::Catalog(served.function)));
        }
        Ok(self.typed().find(&id).map(Chosen::Typed).ok_or_else(|| {
            format!(
                "FunctionConfig {}: goExecutor id {id:?} is not one of its functions",
                route.function_config
            )
        }))
    }

    /// For an untagged `image` naming one of ours, the highest reproduced tag satisfying the
    /// constraint `tag`; `None` when the image is not ours.
    fn resolve_tag(
        &self,
        image: &str,
        tag: &str,
    ) -> Option<Result<(Resolution, &'static Function), EvalError>> {
        let (name, _) = self.strip_prefix(image);
        let served = self.served.iter().find(|s| s.function.name == name)?;
        let constraint = match Constraint::parse(tag) {
            Ok(constraint) => constraint,
            Err(error) => return Some(Err(EvalError::invalid_input(error.to_string()))),
        };
        let tags = served.tags.iter().map(String::as_str);
        let candidates: Vec<String> = sorted_versions(tags.clone())
            .into_iter()
            .map(str::to_owned)
            .collect();
        Some(match constraint.best(tags) {
            Some(chosen) => Ok((
                Resolution {
                    image: format!("{image}:{chosen}"),
                    tag: chosen.to_owned(),
                    digest: None,
                    candidates,
                },
                served.function,
            )),
            None => Err(EvalError::new(
                krm_plugin_api::ErrorKind::NotFound,
                format!(
                    "no version of {image:?} satisfies tag constraint {tag:?}: the builtin \
                     reproduces [{}]",
                    candidates.join(", ")
                ),
            )),
        })
    }

    fn signature(&self, served: &Served) -> FunctionSignature {
        let f = served.function;
        let mut images = vec![f.name.to_owned()];
        for prefix in &self.prefixes {
            for tag in &served.tags {
                let sep = if tag.starts_with("sha256:") { '@' } else { ':' };
                let image = format!("{prefix}{}{sep}{tag}", f.name);
                // The runner's default prefix may repeat a catalog prefix: list each once.
                if !images.contains(&image) {
                    images.push(image);
                }
            }
        }
        FunctionSignature {
            name: f.name.to_owned(),
            description: f.description.to_owned(),
            images,
            parameters: (f.parameters)(),
            changes: f.changes.iter().map(|c| (*c).to_owned()).collect(),
            validates: false,
            examples: Vec::new(),
        }
    }
}

impl Evaluator for Builtin {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let route = context.route();
        let go_routed = route
            .as_ref()
            .is_some_and(|route| route.executor == FunctionConfigExecutor::GoExecutor);
        let chosen = match context.requested_tag() {
            Some(tag) if !go_routed => match self.resolve_tag(image, &tag) {
                Some(resolved) => {
                    let (resolution, function) = resolved?;
                    context.report_resolved(&resolution.reference());
                    Chosen::Catalog(function)
                }
                None => return Err(EvalError::declined_because(image, NOT_OURS)),
            },
            _ => match self.choose(image, route.as_ref())? {
                Ok(chosen) => chosen,
                Err(reason) => return Err(EvalError::declined_because(image, reason)),
            },
        };
        let stop = Stop::default();
        let on_cancel = stop.clone();
        context.on_cancel(move |_| on_cancel.request());
        let limits = Limits {
            stop,
            max_output_bytes: self.max_output_bytes,
        };
        let outcome = match chosen {
            Chosen::Catalog(function) => run(function, resource_list, &limits),
            Chosen::Typed(name) => self.typed().run(name, resource_list, &limits, context),
        };
        // Whatever the work did once the call ended, the answer is why it ended.
        match context.cancel_reason() {
            Some(reason) => Err(reason.to_error(image)),
            None => outcome,
        }
    }

    fn functions(&self) -> Vec<FunctionSignature> {
        let mut signatures: Vec<_> = self.served.iter().map(|s| self.signature(s)).collect();
        signatures.extend(self.typed().signatures());
        signatures
    }

    fn function(&self, name: &str) -> Option<FunctionSignature> {
        // A catalog function's short name comes first in the list, and is found without
        // building the typed functions.
        if let Some(served) = self.served.iter().find(|s| s.function.name == name) {
            return Some(self.signature(served));
        }
        pick_function(self.functions(), name, |signature| signature)
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        _route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        Some(
            self.resolve_tag(image, tag)?
                .map(|(resolution, _)| resolution),
        )
    }

    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        match self.choose(image, route) {
            Ok(Err(reason)) => Probe::Declines(reason),
            // A call that fails does not fall through either.
            Ok(Ok(_)) | Err(_) => Probe::Serves,
        }
    }
}

/// What a call runs: a catalog function, or a typed function by its name.
enum Chosen<'s> {
    Catalog(&'static Function),
    Typed(&'s str),
}

/// Why a call with a tag constraint for an image that names none of the builtin's functions
/// is declined.
const NOT_OURS: &str = "no builtin function has this name";

/// Runs one function over a serialized ResourceList.
fn run(function: &Function, input: &[u8], limits: &Limits) -> Result<EvalResponse, EvalError> {
    let list = rl::ResourceList::parse(input, &limits.stop)
        .map_err(|e| EvalError::invalid_input(format!("{}: {e}", function.name)))?;
    let mut ctx = Ctx::new(&list, limits);
    let failure = match (function.run)(&mut ctx) {
        Exit::Ok => None,
        Exit::Failed(message) => Some(message),
        Exit::Interrupted(message) => {
            return Err(EvalError::new(
                ErrorKind::ResourceExhausted,
                format!("{}: {message}", function.name),
            ));
        }
    };
    let Ctx {
        mut ed,
        results,
        mut log,
        ..
    } = ctx;
    // A function failing with a generic message (starlark's "error: function failure", as the
    // catalog's) keeps its reasons in its error results: the caller's message names them too.
    let reasons: Vec<String> = match &failure {
        Some(message) => results
            .iter()
            .filter(|r| r.severity == Some("error") && r.message != *message)
            .map(|r| r.message.clone())
            .collect(),
        None => Vec::new(),
    };
    let legacy = function.legacy_results.then_some(function.name);
    rl::write_results(&list, &mut ed, results, legacy);
    let output = ed.finish(&list.doc).into_bytes();
    match failure {
        None => Ok(EvalResponse::new(output, log.into_bytes())),
        Some(message) => {
            log.push_str(&format!("failed to evaluate function: {message}\n"));
            let mut text = format!("{}: {message}", function.name);
            for reason in reasons {
                text.push_str("\n  [error] ");
                text.push_str(&reason);
            }
            Err(EvalError::failed(text).with_output(output, log.into_bytes()))
        }
    }
}

/// Runs the function named `name` (short name) over `input`, for tests and benchmarks.
#[doc(hidden)]
pub fn run_function(name: &str, input: &[u8]) -> Result<EvalResponse, EvalError> {
    let function = FUNCTIONS
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| EvalError::not_found(name))?;
    let limits = Limits {
        stop: Stop::default(),
        max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
    };
    run(function, input, &limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin(config: serde_json::Value, prefix: Option<&str>) -> Builtin {
        let config: Config = serde_json::from_value(config).unwrap();
        Builtin::new(config, prefix.map(String::from)).unwrap()
    }

    #[test]
    fn answers_to_short_names_and_reproduced_tags_only() {
        let b = builtin(serde_json::json!({}), Some("registry.local/fns"));
        for image in [
            "set-namespace",
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1",
            "gcr.io/kpt-fn/set-namespace:v0.4",
            "registry.local/fns/set-namespace:v0.4.1",
            "set-namespace:v0.4.1",
        ] {
            assert_eq!(
                b.lookup(image).map(|f| f.name),
                Some("set-namespace"),
                "{image}"
            );
        }
        for image in [
            "gcr.io/kpt-fn/set-namespace",
            "gcr.io/kpt-fn/set-namespace:latest",
            "gcr.io/kpt-fn/set-namespace:v0.1",
            "docker.io/other/set-namespace:v0.4.1",
            "gcr.io/kpt-fn/starlark:v0.4.3",
            "",
        ] {
            assert!(b.lookup(image).is_none(), "{image}");
        }
    }

    #[test]
    fn constraints_resolve_among_the_reproduced_tags() {
        let b = builtin(
            serde_json::json!({"tags": {"set-labels": ["v0.1.5", "v0.2.0", "v0.2", "v0.3.0-rc.1", "sha256:abc"]}}),
            None,
        );
        let resolve = |image: &str, tag: &str| b.resolve(image, tag, None);
        let chosen = resolve("gcr.io/kpt-fn/set-labels", "~0.2")
            .unwrap()
            .unwrap();
        assert_eq!(chosen.image, "gcr.io/kpt-fn/set-labels:v0.2.0");
        assert_eq!(
            chosen.candidates,
            ["v0.3.0-rc.1", "v0.2.0", "v0.2", "v0.1.5"]
        );
        assert_eq!(
            resolve("set-labels", "<0.2").unwrap().unwrap().tag,
            "v0.1.5"
        );
        assert_eq!(
            resolve("set-labels", ">=0.3.0-0").unwrap().unwrap().tag,
            "v0.3.0-rc.1"
        );
        let none = resolve("set-labels", "^1").unwrap().unwrap_err();
        assert_eq!(none.kind, krm_plugin_api::ErrorKind::NotFound);
        assert_eq!(
            none.message,
            "no version of \"set-labels\" satisfies tag constraint \"^1\": the builtin reproduces \
             [v0.3.0-rc.1, v0.2.0, v0.2, v0.1.5]"
        );
        assert!(resolve("docker.io/x/set-labels", "*").is_none());
        assert!(resolve("not-a-function", "*").is_none());
    }

    #[test]
    fn tags_are_configurable_and_config_is_strict() {
        let b = builtin(
            serde_json::json!({"tags": {"set-labels": ["v9", "sha256:abc"]}, "disabled": ["set-image"]}),
            None,
        );
        assert!(b.lookup("gcr.io/kpt-fn/set-labels:v9").is_some());
        assert!(b.lookup("gcr.io/kpt-fn/set-labels@sha256:abc").is_some());
        assert!(b.lookup("gcr.io/kpt-fn/set-labels:v0.2").is_none());
        assert!(b.lookup("set-image").is_none());
        assert!(serde_json::from_value::<Config>(serde_json::json!({"tag": {}})).is_err());
        let err = Builtin::new(
            serde_json::from_value(serde_json::json!({"tags": {"nope": []}})).unwrap(),
            None,
        )
        .err()
        .unwrap();
        assert_eq!(err.problems()[0].field.as_deref(), Some("tags.nope"));
    }

    #[test]
    fn every_function_has_a_signature_and_reasoned_tags() {
        let b = builtin(serde_json::json!({}), None);
        let signatures = b.functions();
        let catalog = signatures
            .iter()
            .filter(|s| !s.images.iter().any(|i| i.starts_with(typed::PREFIX)));
        assert_eq!(catalog.count(), FUNCTIONS.len());
        for f in FUNCTIONS {
            assert!(f.tags.iter().all(|(_, reason)| !reason.is_empty()));
        }
        let ns = signatures
            .iter()
            .find(|s| s.name == "set-namespace")
            .unwrap();
        assert!(
            ns.images
                .contains(&"gcr.io/kpt-fn/set-namespace:v0.4.1".to_owned())
        );
        assert!(
            ns.parameters
                .iter()
                .any(|p| p.name == "namespace" && p.required)
        );
    }

    #[test]
    fn one_function_is_found_as_the_list_would_pick_it_without_building_more() {
        let b = builtin(serde_json::json!({}), None);
        let ns = b.function("set-namespace").unwrap();
        assert_eq!(ns.name, "set-namespace");
        assert!(
            b.typed.get().is_none(),
            "a catalog function's name built the typed functions"
        );
        let signatures = b.functions();
        for name in [
            "set-namespace",
            "gcr.io/kpt-fn/set-namespace:v0.4.1",
            "set-replicas",
            "confighub/set-image",
            "no-such-function",
        ] {
            assert_eq!(
                b.function(name),
                pick_function(signatures.clone(), name, |s| s),
                "{name}"
            );
        }
        assert_eq!(b.function("set-replicas").unwrap().name, "set-replicas");
    }

    #[test]
    fn typed_functions_answer_to_their_names_and_catalog_functions_keep_theirs() {
        let b = builtin(serde_json::json!({}), None);
        let signatures = b.functions();
        let images = |name: &str| {
            signatures
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.images.clone())
                .unwrap_or_else(|| panic!("no signature named {name}"))
        };
        assert_eq!(
            images("set-replicas"),
            ["set-replicas", "confighub/set-replicas"]
        );
        for clash in ["set-namespace", "set-image", "search-replace"] {
            assert!(
                images(clash)
                    .iter()
                    .any(|i| i.starts_with("gcr.io/kpt-fn/"))
            );
            let typed = format!("confighub/{clash}");
            assert_eq!(images(&typed), [typed.as_str()]);
            assert_eq!(b.typed().find(&typed), Some(clash));
            assert_eq!(b.typed().find(clash), None);
            assert_eq!(b.lookup(clash).map(|f| f.name), Some(clash));
        }
        assert_eq!(b.typed().find("set-replicas"), Some("set-replicas"));
        assert_eq!(b.typed().find("gcr.io/kpt-fn/set-replicas"), None);
        assert_eq!(b.typed().find("confighub/no-such-function"), None);
        assert!(matches!(
            b.probe("confighub/get-image", None),
            Probe::Serves
        ));
        assert!(matches!(b.probe("get-imagex", None), Probe::Declines(_)));
    }

    #[test]
    fn images_are_listed_once_when_prefixes_repeat() {
        let b = builtin(
            serde_json::json!({"prefixes": ["gcr.io/kpt-fn", "local.test/fns/"]}),
            Some("ghcr.io/kptdev/krm-functions-catalog/"),
        );
        let ns = b
            .functions()
            .into_iter()
            .find(|s| s.name == "set-namespace")
            .unwrap();
        let mut seen = std::collections::HashSet::new();
        assert!(ns.images.iter().all(|i| seen.insert(i)), "{:?}", ns.images);
        assert_eq!(ns.images[0], "set-namespace");
        assert_eq!(
            ns.images[1],
            "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4.1"
        );
        assert!(
            ns.images
                .contains(&"local.test/fns/set-namespace:v0.4".to_owned())
        );
        assert!(
            b.lookup("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4")
                .is_some()
        );
    }
}
