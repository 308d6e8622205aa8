//! Per-image pool settings: idle TTL, pod count, preferred load and template overrides. They come
//! from the call's FunctionConfig route (`podExecutor`), else from the pod-cache config file's
//! entry for the image, else from the plugin's flags. Each image's are worked out once and kept:
//! calls only compare what they were told with what was last told.

use std::time::Duration;

use krm_plugin_api::{EvalError, FunctionConfigRoute};
use krm_runner_function_config::{PodExecutor, TemplateOverrides};
use sha2::{Digest, Sha256};

use crate::config::Settings;

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub ttl: Duration,
    pub max_pods: usize,
    pub preferred_load: usize,
    pub overrides: Option<TemplateOverrides>,
    /// Identifies `overrides` on the pods made with them; empty without overrides.
    pub overrides_hash: String,
}

impl Limits {
    /// The plugin's own settings, for images nothing says more about.
    pub fn defaults(settings: &Settings) -> Self {
        Self {
            ttl: settings.ttl,
            max_pods: settings.max_pods,
            preferred_load: settings.preferred_load,
            overrides: None,
            overrides_hash: String::new(),
        }
    }

    /// A `podExecutor` section over `defaults`: unset, zero or negative values keep the default
    /// (Porch's rule).
    pub fn from_pod_executor(pod: &PodExecutor, defaults: &Self) -> Result<Self, String> {
        let ttl = pod
            .ttl()
            .map_err(|error| format!("timeToLive: {error}"))?
            .unwrap_or(defaults.ttl);
        let positive = |value: Option<u32>, default: usize| {
            value
                .filter(|n| *n > 0)
                .map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let overrides = pod
            .template_overrides
            .clone()
            .filter(|o| *o != TemplateOverrides::default());
        let overrides_hash = overrides.as_ref().map(hash).unwrap_or_default();
        Ok(Self {
            ttl,
            max_pods: positive(pod.max_parallel_executions, defaults.max_pods),
            preferred_load: positive(pod.preferred_max_queue_length, defaults.preferred_load),
            overrides,
            overrides_hash,
        })
    }

    /// The settings a `podExecutor` route carries; an error names its FunctionConfig.
    pub fn from_route(route: &FunctionConfigRoute, defaults: &Self) -> Result<Self, EvalError> {
        let pod = route.settings::<PodExecutor>()?;
        Self::from_pod_executor(&pod, defaults).map_err(|error| {
            EvalError::internal(format!(
                "FunctionConfig {}: podExecutor.{error}",
                route.function_config
            ))
        })
    }
}

/// The first 16 hex digits of the SHA-256 of the overrides' JSON: stable across runs and
/// versions, so a restarted runner recognises the pods it made.
fn hash(overrides: &TemplateOverrides) -> String {
    let json = serde_json::to_vec(overrides).expect("overrides serialize");
    Sha256::digest(&json)
        .iter()
        .take(8)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn defaults() -> Limits {
        Limits {
            ttl: Duration::from_secs(1800),
            max_pods: 1,
            preferred_load: 2,
            overrides: None,
            overrides_hash: String::new(),
        }
    }

    fn pod(value: serde_json::Value) -> PodExecutor {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn unset_and_zero_values_keep_the_defaults() {
        let limits = Limits::from_pod_executor(
            &pod(json!({"timeToLive": "0", "maxParallelExecutions": 0})),
            &defaults(),
        )
        .unwrap();
        assert_eq!(limits, defaults());
        let limits = Limits::from_pod_executor(
            &pod(json!({"timeToLive": "-5m", "templateOverrides": {}})),
            &defaults(),
        )
        .unwrap();
        assert_eq!(limits, defaults(), "negative TTL and empty overrides");
    }

    #[test]
    fn set_values_win_and_overrides_are_identified() {
        let section = json!({
            "timeToLive": "90s",
            "maxParallelExecutions": 3,
            "preferredMaxQueueLength": 1,
            "templateOverrides": {"container": {"env": [{"name": "A", "value": "1"}]}},
        });
        let limits = Limits::from_pod_executor(&pod(section.clone()), &defaults()).unwrap();
        assert_eq!(
            (limits.ttl, limits.max_pods, limits.preferred_load),
            (Duration::from_secs(90), 3, 1)
        );
        assert_eq!(limits.overrides_hash.len(), 16);
        let again = Limits::from_pod_executor(&pod(section), &defaults()).unwrap();
        assert_eq!(again.overrides_hash, limits.overrides_hash, "stable");
        let other = Limits::from_pod_executor(
            &pod(
                json!({"templateOverrides": {"container": {"env": [{"name": "A", "value": "2"}]}}}),
            ),
            &defaults(),
        )
        .unwrap();
        assert_ne!(other.overrides_hash, limits.overrides_hash);
    }

    #[test]
    fn a_bad_route_names_its_function_config() {
        let route = FunctionConfigRoute {
            function_config: "fns/identity".into(),
            executor: krm_plugin_api::FunctionConfigExecutor::PodExecutor,
            settings: json!({"timeToLive": "soon"}),
        };
        let error = Limits::from_route(&route, &defaults()).unwrap_err();
        assert!(error.message.contains("fns/identity"), "{}", error.message);
        assert!(error.message.contains("timeToLive"), "{}", error.message);
    }
}
