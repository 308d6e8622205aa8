//! `confighub`: ConfigHub's typed functions (`krm-function-executor`) served as KRM functions,
//! so that kpt and Porch users get them. A plugin of its own, so that a call of a catalog
//! function never maps the executor (and its CEL interpreter).
//!
//! Calls are bounded, routed and declined as the catalog plugins' are (`krm_catalog_function`,
//! with no catalog functions of its own): a call asking for a tag constraint is declined, as
//! typed functions have no versions.

use std::sync::OnceLock;

use krm_catalog_function::{Catalog, Declined};
use krm_plugin_api::{
    BuildContext, CacheIdentity, CallContext, ConfigError, EvalError, EvalResponse, Evaluator,
    FunctionConfigRoute, FunctionSignature, Plugin, Probe,
};
use serde::Deserialize;

mod typed;

use krm_catalog_function::rl;
use krm_yaml_edit as yaml;

pub struct ConfighubPlugin;

/// The plugin's `config:` section: it has no settings.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {}

impl Plugin for ConfighubPlugin {
    const NAME: &'static str = "confighub";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const DESCRIPTION: &'static str = "ConfigHub's typed functions (set-replicas, get-image, ...) run in-process as KRM functions";
    type Config = Config;
    type Evaluator = Confighub;

    fn build(_: Config, context: &BuildContext) -> Result<Confighub, ConfigError> {
        Ok(Confighub {
            calls: Catalog::build(Self::NAME, &[], Default::default(), context)?,
            typed: OnceLock::new(),
        })
    }
}

krm_plugin_api::export_plugin!(ConfighubPlugin);

/// Its calls run the caller's yq programs, CEL expressions and patterns in workers at their
/// memory limit: a failed allocation there ends the worker, whichever crate asked.
#[global_allocator]
static ALLOCATOR: krm_plugin_api::AbortOnFailedAllocation = krm_plugin_api::AbortOnFailedAllocation;

/// The evaluator: one per configured instance.
pub struct Confighub {
    /// How calls are bounded and routed, and the reasons they are declined for.
    calls: Catalog,
    /// Built on first use: asking for the plugin's information never needs it.
    typed: OnceLock<typed::Typed>,
}

impl Confighub {
    fn typed(&self) -> &typed::Typed {
        self.typed.get_or_init(typed::Typed::new)
    }

    /// The typed function a call for `image` (or a FunctionConfig's goExecutor id) names, or
    /// why none does. The outer error fails the call.
    fn choose(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Result<Result<&str, String>, EvalError> {
        Ok(match self.calls.choose(image, route)? {
            Ok(function) => Ok(function.name),
            Err(declined) => self.find(declined),
        })
    }

    fn find(&self, declined: Declined) -> Result<&str, String> {
        let name = declined.name;
        self.typed().find(&name).ok_or_else(|| {
            let short = name.strip_prefix(typed::PREFIX).unwrap_or(&name);
            if short.contains(['/', ':', '@']) {
                format!(
                    "{name:?} is not one of its functions, which answer to NAME and {}NAME \
                     only, without a registry or tag",
                    typed::PREFIX
                )
            } else {
                format!("{name:?} is not one of its functions (`krm-runner functions` lists them)")
            }
        })
    }
}

impl Evaluator for Confighub {
    fn evaluate(
        &self,
        context: &CallContext<'_>,
        image: &str,
        resource_list: &[u8],
    ) -> Result<EvalResponse, EvalError> {
        let name = match self.calls.pick(context, image)? {
            Ok(function) => function.name,
            Err(declined) => self
                .find(declined)
                .map_err(|reason| EvalError::declined_because(image, reason))?,
        };
        self.calls.within_call(context, image, |limits| {
            self.typed().run(name, resource_list, limits, context)
        })
    }

    fn functions(&self) -> Vec<FunctionSignature> {
        self.typed().signatures()
    }

    fn cache_identity(
        &self,
        image: &str,
        route: Option<&FunctionConfigRoute>,
    ) -> Option<CacheIdentity> {
        let name = self.choose(image, route).ok()?.ok()?;
        Some(CacheIdentity {
            pure: self.typed().is_pure(name),
            code: name.to_owned(),
            unnamed: false,
        })
    }

    fn probe(&self, image: &str, route: Option<&FunctionConfigRoute>) -> Probe {
        match self.choose(image, route) {
            Ok(Err(reason)) => Probe::Declines(reason),
            // A call that fails does not fall through either.
            Ok(Ok(_)) | Err(_) => Probe::Serves,
        }
    }
}

#[cfg(test)]
mod tests {
    use krm_plugin_api::pick_function;

    use super::*;

    fn confighub() -> Confighub {
        Confighub {
            calls: Catalog::new(ConfighubPlugin::NAME, &[], Default::default(), None).unwrap(),
            typed: OnceLock::new(),
        }
    }

    #[test]
    fn typed_functions_answer_to_their_names_and_leave_the_catalogs_to_it() {
        let c = confighub();
        let signatures = c.functions();
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
            let typed = format!("confighub/{clash}");
            assert_eq!(images(&typed), [typed.as_str()]);
            assert_eq!(c.typed().find(&typed), Some(clash));
            assert_eq!(c.typed().find(clash), None);
            assert!(matches!(c.probe(clash, None), Probe::Declines(_)));
        }
        assert_eq!(c.typed().find("set-replicas"), Some("set-replicas"));
        assert_eq!(c.typed().find("gcr.io/kpt-fn/set-replicas"), None);
        assert_eq!(c.typed().find("confighub/no-such-function"), None);
        assert!(matches!(
            c.probe("confighub/get-image", None),
            Probe::Serves
        ));
        match c.probe("get-imagex", None) {
            Probe::Declines(reason) => assert_eq!(
                reason,
                "\"get-imagex\" is not one of its functions (`krm-runner functions` lists them)"
            ),
            other => panic!("get-imagex: {other:?}"),
        }
        for name in [
            "set-replicas",
            "confighub/set-image",
            "set-image",
            "no-such-function",
        ] {
            assert_eq!(
                c.function(name),
                pick_function(signatures.clone(), name, |s| s),
                "{name}"
            );
        }
    }
}
