//! The in-process kpt catalog plugins (`builtin`, `starlark`) and what they share: which
//! images a function answers to (its short name, and the catalog's image prefixes, the
//! runner's `default_image_prefix` and configured ones, for the tags whose behaviour it
//! reproduces), the plugin's `tags`/`prefixes`/`disabled` configuration, the ResourceList
//! ([`rl`]), the call context a function edits ([`Ctx`]), and running a function over a call.
//! Anything a catalog plugin does not serve is NotFound, so the chain falls through. Output
//! edits the input text in place, so whatever a function does not change comes back
//! byte-identical.

use std::collections::BTreeMap;

use krm_plugin_api::{
    BuildContext, CacheIdentity, CallContext, ConfigError, DEFAULT_MAX_MESSAGE_BYTES, ErrorKind,
    EvalError, EvalResponse, Evaluator, FunctionConfigExecutor, FunctionConfigRoute,
    FunctionSignature, Probe, Resolution,
};
use krm_runner_function_config::GoExecutor;
use krm_runner_function_config::version::{Constraint, sorted_versions};
use krm_yaml_edit::Stop;
use serde::Deserialize;

mod function;
pub mod rl;

pub use function::{
    BrokenRule, Ctx, Exit, Function, Halt, Interruption, Limits, check, group_of, param, validate,
};

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

struct Served {
    function: &'static Function,
    tags: Vec<String>,
}

/// The catalog functions one plugin instance serves, and the images they answer to.
pub struct Catalog {
    /// The plugin's name, for messages.
    plugin: &'static str,
    functions: &'static [&'static Function],
    served: Vec<Served>,
    prefixes: Vec<String>,
    max_output_bytes: usize,
}

/// Why none of a catalog's functions serves a call, and the name it looked for (an image, or a
/// FunctionConfig's goExecutor id), which another set of functions may serve instead.
pub struct Declined {
    pub name: String,
    pub reason: String,
}

impl Catalog {
    /// Builds an instance of `plugin` serving `functions`; `default_prefix` is the runner's
    /// `default_image_prefix`.
    pub fn new(
        plugin: &'static str,
        functions: &'static [&'static Function],
        config: Config,
        default_prefix: Option<String>,
    ) -> Result<Self, ConfigError> {
        for name in config.tags.keys().chain(&config.disabled) {
            if !functions.iter().any(|f| f.name == name) {
                let known: Vec<_> = functions.iter().map(|f| f.name).collect();
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
        let served = functions
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
            plugin,
            functions,
            served,
            prefixes,
            max_output_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        })
    }

    /// Builds an instance as the runner asks for it, with its `default_image_prefix` and
    /// `max_message_bytes`.
    pub fn build(
        plugin: &'static str,
        functions: &'static [&'static Function],
        config: Config,
        context: &BuildContext,
    ) -> Result<Self, ConfigError> {
        let mut catalog = Self::new(
            plugin,
            functions,
            config,
            Some(context.default_image_prefix()),
        )?;
        catalog.max_output_bytes = context.max_message_bytes();
        Ok(catalog)
    }

    /// `image` without a recognised prefix, and whether it had one.
    pub fn strip_prefix<'a>(&self, image: &'a str) -> (&'a str, bool) {
        self.prefixes
            .iter()
            .find_map(|p| image.strip_prefix(p.as_str()))
            .map(|rest| (rest, true))
            .unwrap_or((image, false))
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
            } else if self.functions.iter().any(|f| f.name == name) {
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

    /// The function a call for `image` runs here, or why none does (see `Catalog::find`); a
    /// FunctionConfig's goExecutor names the function by id instead, as an untagged image
    /// would. The outer error fails the call.
    pub fn choose(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Result<Result<&'static Function, Declined>, EvalError> {
        let routed = route.filter(|route| route.executor == FunctionConfigExecutor::GoExecutor);
        let Some(route) = routed else {
            return Ok(self.find(image).map_err(|reason| Declined {
                name: image.to_owned(),
                reason,
            }));
        };
        // The runner checked that the FunctionConfig's id names a function it serves.
        let go: GoExecutor = route.settings()?;
        let id = go.id.unwrap_or_default();
        if let Some(served) = self.served.iter().find(|served| served.function.name == id) {
            return Ok(Ok(served.function));
        }
        Ok(Err(Declined {
            reason: format!(
                "FunctionConfig {}: goExecutor id {id:?} is not one of its functions",
                route.function_config
            ),
            name: id,
        }))
    }

    /// The function a call runs, once a tag constraint the call carries is resolved (and
    /// reported) among the reproduced tags; a call with a constraint for an image that names
    /// none of the functions is declined outright.
    pub fn pick(
        &self,
        context: &CallContext<'_>,
        image: &str,
    ) -> Result<Result<&'static Function, Declined>, EvalError> {
        let route = context.route();
        let go_routed = route
            .as_ref()
            .is_some_and(|route| route.executor == FunctionConfigExecutor::GoExecutor);
        match context.requested_tag() {
            Some(tag) if !go_routed => match self.resolve_tag(image, &tag) {
                Some(resolved) => {
                    let (resolution, function) = resolved?;
                    context.report_resolved(&resolution.reference());
                    Ok(Ok(function))
                }
                None => Err(EvalError::declined_because(
                    image,
                    format!("no {} function has this name", self.plugin),
                )),
            },
            _ => self.choose(image, route.as_ref()),
        }
    }

    /// Runs `work` bounded by the call: it stops once the call is cancelled or its deadline
    /// passes, and then the answer is why the call ended.
    pub fn within_call(
        &self,
        context: &CallContext<'_>,
        image: &str,
        work: impl FnOnce(&Limits) -> Result<EvalResponse, EvalError>,
    ) -> Result<EvalResponse, EvalError> {
        let stop = Stop::default();
        let on_cancel = stop.clone();
        context.on_cancel(move |_| on_cancel.request());
        let limits = Limits {
            stop,
            max_output_bytes: self.max_output_bytes,
        };
        let outcome = work(&limits);
        // Whatever the work did once the call ended, the answer is why it ended.
        match context.cancel_reason() {
            Some(reason) => Err(reason.to_error(image)),
            None => outcome,
        }
    }

    /// For an untagged `image` naming one of ours, the highest reproduced tag satisfying the
    /// constraint `tag`; `None` when the image is not ours.
    pub fn resolve_tag(
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
                ErrorKind::NotFound,
                format!(
                    "no version of {image:?} satisfies tag constraint {tag:?}: the {} \
                     reproduces [{}]",
                    self.plugin,
                    candidates.join(", ")
                ),
            )),
        })
    }

    /// The signatures of the functions served, in order.
    pub fn signatures(&self) -> Vec<FunctionSignature> {
        self.served.iter().map(|s| self.signature(s)).collect()
    }

    /// The signature of the function served under the short name `name`.
    pub fn signature_of(&self, name: &str) -> Option<FunctionSignature> {
        let served = self.served.iter().find(|s| s.function.name == name)?;
        Some(self.signature(served))
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
            pure: f.pure,
        }
    }
}

impl Evaluator for Catalog {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        match self.pick(context, image)? {
            Ok(function) => self.within_call(context, image, |limits| {
                run(function, resource_list, limits)
            }),
            Err(declined) => Err(EvalError::declined_because(image, declined.reason)),
        }
    }

    fn functions(&self) -> Vec<FunctionSignature> {
        self.signatures()
    }

    fn function(&self, name: &str) -> Option<FunctionSignature> {
        self.signature_of(name).or_else(|| {
            krm_plugin_api::pick_function(self.signatures(), name, |signature| signature)
        })
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

    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let function = self.choose(image, route).ok()?.ok()?;
        Some(CacheIdentity {
            pure: function.pure,
            code: function.name.to_owned(),
            unnamed: false,
        })
    }

    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        match self.choose(image, route) {
            Ok(Err(declined)) => Probe::Declines(declined.reason),
            // A call that fails does not fall through either.
            Ok(Ok(_)) | Err(_) => Probe::Serves,
        }
    }
}

/// Runs one function over a serialized ResourceList.
pub fn run(function: &Function, input: &[u8], limits: &Limits) -> Result<EvalResponse, EvalError> {
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

/// Runs the function of `functions` named `name` (short name) over `input` with the default
/// limits, for tests and benchmarks.
pub fn run_named(
    functions: &[&Function],
    name: &str,
    input: &[u8],
) -> Result<EvalResponse, EvalError> {
    let function = functions
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| EvalError::not_found(name))?;
    let limits = Limits {
        stop: Stop::default(),
        max_output_bytes: DEFAULT_MAX_MESSAGE_BYTES,
    };
    run(function, input, &limits)
}
