//! Checks a FunctionConfig the way the API server checks it against the CRD, plus the few rules
//! the CRD cannot express (a parseable duration, a short image name), reporting every problem.

use std::fmt;
use std::time::Duration;

use krm_go_duration as go_duration;

use crate::types::{FunctionConfig, PodExecutor, ResultCaching};
use crate::version::TagEntry;

/// Most tags one executor of a FunctionConfig may list. Each is matched against calls and
/// worked out ahead of them, and a real list names a handful of versions or ranges.
pub const MAX_TAGS: usize = 1000;

/// One problem with one field of a FunctionConfig.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field as written on the wire, e.g. `spec.binaryExecutor.tags`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}

/// Every problem with `config`, in field order; empty when it is valid.
///
/// Covers the CRD's rules (`spec.image` and `spec.binaryExecutor.path` not empty, at least one
/// tag for the go, wasm and binary executors, exactly one of `spec.wasmExecutor.path` and
/// `spec.wasmExecutor.image`, at least one executor) and adds: `spec.wasmExecutor.image` is a
/// reference naming its registry, `metadata.name` is set
/// (the API server guarantees it, files do not), `spec.image` is a short name (with a registry or
/// tag it could never match a request), `spec.goExecutor.id` is not empty when given, and
/// `spec.podExecutor.timeToLive` is a Go duration, and every executor lists at most
/// [`MAX_TAGS`] tags, each `""`, `latest` or a version constraint that parses (see
/// [`crate::version`]).
pub fn validate(config: &FunctionConfig) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if config.metadata.name.as_deref().is_none_or(str::is_empty) {
        errors.push(FieldError::new("metadata.name", "required"));
    }
    let spec = &config.spec;
    if spec.image.is_empty() {
        errors.push(FieldError::new("spec.image", "must not be empty"));
    } else if spec.image.contains(['/', ':', '@']) {
        errors.push(FieldError::new(
            "spec.image",
            format!(
                "{:?} must be the function's short name without registry, tag or digest \
                 (e.g. set-namespace); list registries in spec.prefixes",
                spec.image
            ),
        ));
    }
    if spec.pod_executor.is_none()
        && spec.binary_executor.is_none()
        && spec.go_executor.is_none()
        && spec.wasm_executor.is_none()
    {
        errors.push(FieldError::new(
            "spec",
            "at least one of podExecutor, binaryExecutor, goExecutor, wasmExecutor must be set",
        ));
    }
    if let Some(go) = &spec.go_executor {
        if go.tags.is_empty() {
            errors.push(FieldError::new(
                "spec.goExecutor.tags",
                "must list at least one tag",
            ));
        }
        if go.id.as_deref() == Some("") {
            errors.push(FieldError::new(
                "spec.goExecutor.id",
                "must not be empty; leave it out to use metadata.name",
            ));
        }
    }
    if let Some(wasm) = &spec.wasm_executor {
        if wasm.tags.is_empty() {
            errors.push(FieldError::new(
                "spec.wasmExecutor.tags",
                "must list at least one tag",
            ));
        }
        match (&wasm.path, &wasm.image) {
            (None, None) | (Some(_), Some(_)) => errors.push(FieldError::new(
                "spec.wasmExecutor",
                "exactly one of path, image must be set",
            )),
            (Some(path), None) if path.is_empty() => {
                errors.push(FieldError::new(
                    "spec.wasmExecutor.path",
                    "must not be empty",
                ));
            }
            (None, Some(image)) => {
                if let Some(problem) = module_image_problem(image) {
                    errors.push(FieldError::new("spec.wasmExecutor.image", problem));
                }
            }
            (Some(_), None) => {}
        }
    }
    if let Some(binary) = &spec.binary_executor {
        if binary.tags.is_empty() {
            errors.push(FieldError::new(
                "spec.binaryExecutor.tags",
                "must list at least one tag",
            ));
        }
        if binary.path.is_empty() {
            errors.push(FieldError::new(
                "spec.binaryExecutor.path",
                "must not be empty",
            ));
        }
    }
    let tag_lists = [
        ("goExecutor", spec.go_executor.as_ref().map(|go| &go.tags)),
        (
            "wasmExecutor",
            spec.wasm_executor.as_ref().map(|wasm| &wasm.tags),
        ),
        (
            "binaryExecutor",
            spec.binary_executor.as_ref().map(|b| &b.tags),
        ),
        (
            "podExecutor",
            spec.pod_executor.as_ref().map(|pod| &pod.tags),
        ),
    ];
    for (executor, tags) in tag_lists {
        let tags = tags.map_or(&[][..], Vec::as_slice);
        if tags.len() > MAX_TAGS {
            // One problem for the list, not one per entry: the entries are not looked at.
            errors.push(FieldError::new(
                format!("spec.{executor}.tags"),
                format!("{} tags; at most {MAX_TAGS} are accepted", tags.len()),
            ));
            continue;
        }
        for (index, tag) in tags.iter().enumerate() {
            if let Err(error) = TagEntry::parse(tag) {
                errors.push(FieldError::new(
                    format!("spec.{executor}.tags[{index}]"),
                    error.to_string(),
                ));
            }
        }
    }
    let cached = [
        (
            "wasmExecutor",
            spec.wasm_executor.as_ref().and_then(|w| w.cache.as_ref()),
        ),
        (
            "binaryExecutor",
            spec.binary_executor.as_ref().and_then(|b| b.cache.as_ref()),
        ),
        (
            "podExecutor",
            spec.pod_executor.as_ref().and_then(|p| p.cache.as_ref()),
        ),
    ];
    for (executor, cache) in cached {
        if let Some(Err(error)) = cache.map(ResultCaching::ttl) {
            errors.push(FieldError::new(
                format!("spec.{executor}.cache.timeToLive"),
                error.to_string(),
            ));
        }
    }
    if let Some(pod) = &spec.pod_executor
        && let Err(error) = pod.ttl()
    {
        errors.push(FieldError::new(
            "spec.podExecutor.timeToLive",
            error.to_string(),
        ));
    }
    errors
}

/// Why `image` cannot name a module in a registry (`registry/repository[:tag|@digest]`), if it
/// cannot.
fn module_image_problem(image: &str) -> Option<String> {
    let quoted = krm_plugin_api::quoted(image);
    if image.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("{quoted} holds whitespace or control characters"));
    }
    match image.split_once('/') {
        Some((registry, repository)) if !registry.is_empty() && !repository.is_empty() => None,
        _ => Some(format!(
            "{quoted} names no registry: write registry/repository[:tag|@digest]"
        )),
    }
}

/// The longest an executor's answers may be cached: a year.
pub const MAX_CACHE_TTL: Duration = Duration::from_secs(8760 * 3600);

/// A `cache.timeToLive` the result cache cannot keep answers for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCacheTtl {
    #[error(transparent)]
    NotADuration(#[from] InvalidDuration),
    #[error("{0:?} must be more than zero")]
    NotPositive(String),
    #[error("{0:?} is longer than 8760h")]
    TooLong(String),
}

impl ResultCaching {
    /// The time-to-live, parsed and within (0, [`MAX_CACHE_TTL`]].
    pub fn ttl(&self) -> Result<Duration, InvalidCacheTtl> {
        let text = &self.time_to_live;
        let parsed = go_duration::parse(text).map_err(|_| InvalidDuration(text.clone()))?;
        if parsed.negative || parsed.magnitude.is_zero() {
            Err(InvalidCacheTtl::NotPositive(text.clone()))
        } else if parsed.magnitude > MAX_CACHE_TTL {
            Err(InvalidCacheTtl::TooLong(text.clone()))
        } else {
            Ok(parsed.magnitude)
        }
    }
}

/// A `timeToLive` that is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a duration (expected a Go duration such as 30m, 1h30m, 90s or 0)")]
pub struct InvalidDuration(pub String);

impl PodExecutor {
    /// The idle time-to-live, parsed; `None` when it is zero or negative, which means "the pod
    /// evaluator's default", as in Porch.
    pub fn ttl(&self) -> Result<Option<Duration>, InvalidDuration> {
        let parsed = go_duration::parse(&self.time_to_live)
            .map_err(|_| InvalidDuration(self.time_to_live.clone()))?;
        Ok(Some(parsed.magnitude).filter(|d| !parsed.negative && !d.is_zero()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BinaryExecutor, FunctionConfigSpec, GoExecutor, WasmExecutor};

    fn pod(ttl: &str) -> PodExecutor {
        PodExecutor {
            tags: vec![],
            time_to_live: ttl.to_owned(),
            max_parallel_executions: None,
            preferred_max_queue_length: None,
            template_overrides: None,
            cache: None,
        }
    }

    fn config(name: &str, spec: FunctionConfigSpec) -> FunctionConfig {
        FunctionConfig::new(name, spec)
    }

    fn messages(config: &FunctionConfig) -> Vec<String> {
        validate(config).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn go_durations_parse() {
        let minutes = |m: u64| Some(Duration::from_secs(m * 60));
        for (text, expected) in [
            ("30m", minutes(30)),
            ("1h30m", minutes(90)),
            ("90s", Some(Duration::from_secs(90))),
            ("1h30m0s", minutes(90)),
            ("1.5h", minutes(90)),
            ("500ms", Some(Duration::from_millis(500))),
            ("2us", Some(Duration::from_micros(2))),
            ("2µs", Some(Duration::from_micros(2))),
            ("2μs", Some(Duration::from_micros(2))),
            ("7ns", Some(Duration::from_nanos(7))),
            ("+5s", Some(Duration::from_secs(5))),
            ("0", None),
            ("-0", None),
            ("0s", None),
            ("-1m", None),
            ("1.5h30m", Some(Duration::from_secs(2 * 3600))),
            (".5s", Some(Duration::from_millis(500))),
        ] {
            assert_eq!(pod(text).ttl(), Ok(expected), "{text}");
        }
    }

    #[test]
    fn non_go_durations_are_refused() {
        for text in [
            "3x", "", "1", "1d", "2 hours", "1h 30m", "PT1H", "1min", "1H", "1hour", "s",
        ] {
            assert_eq!(
                pod(text).ttl(),
                Err(InvalidDuration(text.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn a_valid_config_has_no_errors() {
        let spec = FunctionConfigSpec {
            image: "set-namespace".into(),
            prefixes: Some(vec!["".into()]),
            pod_executor: Some(pod("30m")),
            binary_executor: Some(BinaryExecutor {
                tags: vec!["v0.4.2".into()],
                path: "set-namespace".into(),
                cache: None,
            }),
            go_executor: Some(GoExecutor {
                tags: vec!["v0.4".into()],
                id: None,
            }),
            wasm_executor: None,
        };
        assert_eq!(
            messages(&config("set-namespace", spec)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_tag_list_over_the_limit_is_one_problem() {
        let with_tags = |count: usize| {
            let spec = FunctionConfigSpec {
                image: "fn".into(),
                prefixes: None,
                pod_executor: None,
                binary_executor: Some(BinaryExecutor {
                    tags: vec!["bad tag".into(); count],
                    path: "fn".into(),
                    cache: None,
                }),
                go_executor: None,
                wasm_executor: None,
            };
            messages(&config("fn", spec))
        };
        assert_eq!(with_tags(MAX_TAGS).len(), MAX_TAGS);
        assert_eq!(
            with_tags(MAX_TAGS + 1),
            ["spec.binaryExecutor.tags: 1001 tags; at most 1000 are accepted"]
        );
    }

    #[test]
    fn every_problem_is_reported_at_once_naming_its_field() {
        let spec = FunctionConfigSpec {
            image: String::new(),
            prefixes: None,
            pod_executor: Some(pod("3x")),
            binary_executor: Some(BinaryExecutor {
                tags: vec![],
                path: String::new(),
                cache: None,
            }),
            go_executor: Some(GoExecutor {
                tags: vec![],
                id: Some(String::new()),
            }),
            wasm_executor: None,
        };
        assert_eq!(
            messages(&config("", spec)),
            [
                "metadata.name: required",
                "spec.image: must not be empty",
                "spec.goExecutor.tags: must list at least one tag",
                "spec.goExecutor.id: must not be empty; leave it out to use metadata.name",
                "spec.binaryExecutor.tags: must list at least one tag",
                "spec.binaryExecutor.path: must not be empty",
                "spec.podExecutor.timeToLive: \"3x\" is not a duration (expected a Go duration \
                 such as 30m, 1h30m, 90s or 0)",
            ]
        );
    }

    #[test]
    fn tags_that_are_not_constraints_are_refused_naming_the_entry() {
        let spec = FunctionConfigSpec {
            image: "set-labels".into(),
            prefixes: None,
            pod_executor: Some(PodExecutor {
                tags: vec![
                    "*".into(),
                    ">= 1.2, < 2".into(),
                    "latest".into(),
                    "1.2 -".into(),
                ],
                ..pod("30m")
            }),
            binary_executor: Some(BinaryExecutor {
                tags: vec!["".into(), "main".into()],
                path: "fn".into(),
                cache: None,
            }),
            go_executor: None,
            wasm_executor: None,
        };
        assert_eq!(
            messages(&config("set-labels", spec)),
            [
                "spec.binaryExecutor.tags[1]: invalid version constraint \"main\": \"main\" in \
                 \"main\" is not a number or wildcard",
                "spec.podExecutor.tags[3]: invalid version constraint \"1.2 -\": hyphen range \
                 after \"1.2\" is incomplete",
            ]
        );
    }

    #[test]
    fn an_object_without_executors_breaks_the_crd_rule() {
        let spec = FunctionConfigSpec {
            image: "set-labels".into(),
            prefixes: None,
            pod_executor: None,
            binary_executor: None,
            go_executor: None,
            wasm_executor: None,
        };
        assert_eq!(
            messages(&config("set-labels", spec)),
            [
                "spec: at least one of podExecutor, binaryExecutor, goExecutor, wasmExecutor must be set"
            ]
        );
    }

    fn wasm(tags: &[&str], path: Option<&str>, image: Option<&str>) -> FunctionConfigSpec {
        FunctionConfigSpec {
            image: "set-namespace".into(),
            prefixes: None,
            pod_executor: None,
            binary_executor: None,
            go_executor: None,
            wasm_executor: Some(WasmExecutor {
                tags: tags.iter().map(|tag| (*tag).to_owned()).collect(),
                path: path.map(str::to_owned),
                image: image.map(str::to_owned),
                cache: None,
            }),
        }
    }

    /// A wasmExecutor alone is an executor; its module is a file or a registry reference.
    #[test]
    fn a_wasm_executor_with_a_path_or_an_image_is_valid() {
        for spec in [
            wasm(&["v1"], Some("set-namespace.wasm"), None),
            wasm(
                &["~1.2"],
                None,
                Some("registry.example:5000/wasm/set-namespace"),
            ),
            wasm(
                &["v1"],
                None,
                Some("registry.example/wasm/set-namespace@sha256:00"),
            ),
        ] {
            assert_eq!(
                messages(&config("set-namespace", spec)),
                Vec::<String>::new()
            );
        }
    }

    #[test]
    fn wasm_executor_problems_are_reported_at_once_naming_their_fields() {
        assert_eq!(
            messages(&config("fn", wasm(&[], None, None))),
            [
                "spec.wasmExecutor.tags: must list at least one tag",
                "spec.wasmExecutor: exactly one of path, image must be set",
            ]
        );
        assert_eq!(
            messages(&config(
                "fn",
                wasm(&["v1", "main"], Some("a.wasm"), Some("r.example/a"))
            )),
            [
                "spec.wasmExecutor: exactly one of path, image must be set",
                "spec.wasmExecutor.tags[1]: invalid version constraint \"main\": \"main\" in \
                 \"main\" is not a number or wildcard",
            ]
        );
        assert_eq!(
            messages(&config("fn", wasm(&["v1"], Some(""), None))),
            ["spec.wasmExecutor.path: must not be empty"]
        );
        assert_eq!(
            messages(&config("fn", wasm(&["v1"], None, Some("set-namespace:v1")))),
            [
                "spec.wasmExecutor.image: \"set-namespace:v1\" names no registry: write \
                 registry/repository[:tag|@digest]"
            ]
        );
        assert_eq!(
            messages(&config("fn", wasm(&["v1"], None, Some("r.example/a b")))),
            ["spec.wasmExecutor.image: \"r.example/a b\" holds whitespace or control characters"]
        );
    }

    /// `cache.timeToLive` is a positive Go duration of at most a year, on every executor
    /// that may carry it; each problem names its executor.
    #[test]
    fn cache_time_to_live_problems_name_their_executor() {
        let cache = |ttl: &str| {
            Some(ResultCaching {
                time_to_live: ttl.to_owned(),
            })
        };
        let mut spec = wasm(&["v1"], Some("fn.wasm"), None);
        if let Some(wasm) = spec.wasm_executor.as_mut() {
            wasm.cache = cache("0s");
        }
        spec.binary_executor = Some(BinaryExecutor {
            tags: vec!["v1".into()],
            path: "fn".into(),
            cache: cache("10 minutes"),
        });
        spec.pod_executor = Some(PodExecutor {
            cache: cache("8761h"),
            ..pod("30m")
        });
        assert_eq!(
            messages(&config("fn", spec.clone())),
            [
                "spec.wasmExecutor.cache.timeToLive: \"0s\" must be more than zero",
                "spec.binaryExecutor.cache.timeToLive: \"10 minutes\" is not a duration \
                 (expected a Go duration such as 30m, 1h30m, 90s or 0)",
                "spec.podExecutor.cache.timeToLive: \"8761h\" is longer than 8760h",
            ]
        );
        for ttl in ["10m", "1h30m", "8760h"] {
            let mut valid = spec.clone();
            for cached in [
                valid.wasm_executor.as_mut().map(|w| &mut w.cache),
                valid.binary_executor.as_mut().map(|b| &mut b.cache),
                valid.pod_executor.as_mut().map(|p| &mut p.cache),
            ]
            .into_iter()
            .flatten()
            {
                *cached = cache(ttl);
            }
            assert_eq!(
                messages(&config("fn", valid)),
                Vec::<String>::new(),
                "{ttl}"
            );
        }
    }

    #[test]
    fn a_full_image_reference_is_not_a_short_name() {
        let spec = FunctionConfigSpec {
            image: "ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2".into(),
            prefixes: None,
            pod_executor: Some(pod("30m")),
            binary_executor: None,
            go_executor: None,
            wasm_executor: None,
        };
        let errors = validate(&config("set-labels", spec));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.image");
        assert!(errors[0].message.contains("short name"), "{}", errors[0]);
    }
}
