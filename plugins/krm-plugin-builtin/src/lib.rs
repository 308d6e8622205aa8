//! `builtin`: the kpt catalog's most-used functions, in-process and comment-preserving. Which
//! images a catalog function answers to, and how a call runs, is `krm_catalog_function`'s; the
//! Starlark interpreter is the `starlark` plugin's and ConfigHub's typed functions are the
//! `confighub` plugin's, so that a call of these functions maps neither.

use krm_catalog_function::{Catalog, Config};
use krm_plugin_api::{BuildContext, ConfigError, EvalError, EvalResponse, Plugin};

mod functions;
#[cfg(test)]
mod proptests;

use functions::FUNCTIONS;
use krm_catalog_function::rl;
use krm_yaml_edit as yaml;

pub struct BuiltinPlugin;

impl Plugin for BuiltinPlugin {
    const NAME: &'static str = "builtin";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str =
        "kpt catalog functions (set-namespace, set-labels, set-image, ...) run in-process";
    type Config = Config;
    type Evaluator = Catalog;

    fn build(config: Config, context: &BuildContext) -> Result<Catalog, ConfigError> {
        Catalog::build(Self::NAME, FUNCTIONS, config, context)
    }
}

krm_plugin_api::export_plugin!(BuiltinPlugin);

/// Runs the function named `name` (short name) over `input`, for tests and benchmarks.
#[doc(hidden)]
pub fn run_function(name: &str, input: &[u8]) -> Result<EvalResponse, EvalError> {
    krm_catalog_function::run_named(FUNCTIONS, name, input)
}

#[cfg(test)]
mod tests {
    use krm_plugin_api::{Evaluator, pick_function};

    use super::*;

    fn builtin(config: serde_json::Value, prefix: Option<&str>) -> Catalog {
        let config: Config = serde_json::from_value(config).unwrap();
        Catalog::new(
            BuiltinPlugin::NAME,
            FUNCTIONS,
            config,
            prefix.map(String::from),
        )
        .unwrap()
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
                b.choose(image, None).unwrap().ok().map(|f| f.name),
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
            assert!(b.choose(image, None).unwrap().ok().is_none(), "{image}");
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
        assert!(
            b.choose("gcr.io/kpt-fn/set-labels:v9", None)
                .unwrap()
                .ok()
                .is_some()
        );
        assert!(
            b.choose("gcr.io/kpt-fn/set-labels@sha256:abc", None)
                .unwrap()
                .ok()
                .is_some()
        );
        assert!(
            b.choose("gcr.io/kpt-fn/set-labels:v0.2", None)
                .unwrap()
                .ok()
                .is_none()
        );
        assert!(b.choose("set-image", None).unwrap().ok().is_none());
        assert!(serde_json::from_value::<Config>(serde_json::json!({"tag": {}})).is_err());
        let err = Catalog::new(
            BuiltinPlugin::NAME,
            FUNCTIONS,
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
        assert_eq!(signatures.len(), FUNCTIONS.len());
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
    fn one_function_is_found_as_the_list_would_pick_it() {
        let b = builtin(serde_json::json!({}), None);
        let signatures = b.functions();
        for name in [
            "set-namespace",
            "gcr.io/kpt-fn/set-namespace:v0.4.1",
            "set-replicas",
            "no-such-function",
        ] {
            assert_eq!(
                b.function(name),
                pick_function(signatures.clone(), name, |s| s),
                "{name}"
            );
        }
        assert_eq!(b.function("set-namespace").unwrap().name, "set-namespace");
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
            b.choose(
                "ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4",
                None
            )
            .unwrap()
            .ok()
            .is_some()
        );
    }
}
