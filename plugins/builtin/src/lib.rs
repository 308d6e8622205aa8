//! `builtin`: the kpt catalog's most-used functions, in-process and comment-preserving, and
//! ConfigHub's typed functions. Which images a catalog function answers to, and how a call
//! runs, is `krm_catalog_function`'s; the Starlark interpreter is the `starlark` plugin's, so
//! that a call of these functions never maps it.

use std::sync::OnceLock;

use krm_catalog_function::{Catalog, Config};
use krm_plugin_api::{
    BuildContext, CallContext, ConfigError, EvalError, EvalResponse, Evaluator,
    FunctionConfigRoute, FunctionSignature, Plugin, Probe, Resolution, pick_function,
};

mod functions;
#[cfg(test)]
mod proptests;
mod typed;

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
    type Evaluator = Builtin;

    fn build(config: Config, context: &BuildContext) -> Result<Builtin, ConfigError> {
        Ok(Builtin {
            catalog: Catalog::build(Self::NAME, FUNCTIONS, config, context)?,
            typed: OnceLock::new(),
        })
    }
}

krm_plugin_api::export_plugin!(BuiltinPlugin);

/// The evaluator: one per configured instance.
pub struct Builtin {
    catalog: Catalog,
    /// Built on first use: a call of a catalog function never needs it.
    typed: OnceLock<typed::Typed>,
}

impl Builtin {
    /// Builds an instance as the runner would with `default_prefix` as its
    /// `default_image_prefix`, for the tests.
    #[cfg(test)]
    fn new(config: Config, default_prefix: Option<String>) -> Result<Self, ConfigError> {
        Ok(Self {
            catalog: Catalog::new(BuiltinPlugin::NAME, FUNCTIONS, config, default_prefix)?,
            typed: OnceLock::new(),
        })
    }

    fn typed(&self) -> &typed::Typed {
        self.typed.get_or_init(typed::Typed::new)
    }

    /// The function a call for `image` runs here, catalog or typed, or why it declines (see
    /// [`Catalog::choose`] and [`typed::Typed::find`]). The outer error fails the call.
    fn choose(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Result<Result<Chosen<'_>, String>, EvalError> {
        Ok(match self.catalog.choose(image, route)? {
            Ok(function) => Ok(Chosen::Catalog(function)),
            Err(declined) => self.typed_or(declined),
        })
    }

    /// The typed function a name the catalog functions declined names, or the catalog's reason.
    fn typed_or(&self, declined: krm_catalog_function::Declined) -> Result<Chosen<'_>, String> {
        self.typed()
            .find(&declined.name)
            .map(Chosen::Typed)
            .ok_or(declined.reason)
    }
}

impl Evaluator for Builtin {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let chosen = match self.catalog.pick(context, image)? {
            Ok(function) => Chosen::Catalog(function),
            Err(declined) => self
                .typed_or(declined)
                .map_err(|reason| EvalError::declined_because(image, reason))?,
        };
        self.catalog
            .within_call(context, image, |limits| match chosen {
                Chosen::Catalog(function) => {
                    krm_catalog_function::run(function, resource_list, limits)
                }
                Chosen::Typed(name) => self.typed().run(name, resource_list, limits, context),
            })
    }

    fn functions(&self) -> Vec<FunctionSignature> {
        let mut signatures = self.catalog.signatures();
        signatures.extend(self.typed().signatures());
        signatures
    }

    fn function(&self, name: &str) -> Option<FunctionSignature> {
        // A catalog function's short name comes first in the list, and is found without
        // building the typed functions.
        self.catalog
            .signature_of(name)
            .or_else(|| pick_function(self.functions(), name, |signature| signature))
    }

    fn resolve(
        &self,
        image: &str,
        tag: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<Result<Resolution, EvalError>> {
        self.catalog.resolve(image, tag, route)
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
    Catalog(&'static krm_catalog_function::Function),
    Typed(&'s str),
}

/// Runs the function named `name` (short name) over `input`, for tests and benchmarks.
#[doc(hidden)]
pub fn run_function(name: &str, input: &[u8]) -> Result<EvalResponse, EvalError> {
    krm_catalog_function::run_named(FUNCTIONS, name, input)
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
                b.catalog.find(image).ok().map(|f| f.name),
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
            assert!(b.catalog.find(image).ok().is_none(), "{image}");
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
        assert!(b.catalog.find("gcr.io/kpt-fn/set-labels:v9").ok().is_some());
        assert!(
            b.catalog
                .find("gcr.io/kpt-fn/set-labels@sha256:abc")
                .ok()
                .is_some()
        );
        assert!(
            b.catalog
                .find("gcr.io/kpt-fn/set-labels:v0.2")
                .ok()
                .is_none()
        );
        assert!(b.catalog.find("set-image").ok().is_none());
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
            assert_eq!(b.catalog.find(clash).ok().map(|f| f.name), Some(clash));
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
            b.catalog
                .find("ghcr.io/kptdev/krm-functions-catalog/set-namespace:v0.4")
                .ok()
                .is_some()
        );
    }
}
