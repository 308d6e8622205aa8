//! Porch's older per-image pod settings file (`--pod-cache-config`, mounted from the
//! `pod-cache-config` ConfigMap), read into the same per-image settings a FunctionConfig's
//! `podExecutor` gives, so both paths share one pool behaviour. Two shapes exist:
//!
//! ```yaml
//! # v1.4-v1.5.7: image -> idle TTL
//! gcr.io/kpt-fn/apply-replacements:v0.1.1: 30m
//! ---
//! # v1.5.8: a list with per-image limits
//! - name: gcr.io/kpt-fn/set-namespace:v0.4.1
//!   timeToLive: 30m
//!   maxWaitlistLength: 2
//!   maxParallelPodsPerFunction: 3
//!   resources: {limits: {memory: 64Mi}}
//! ```
//!
//! Images match by exact string, as in Porch; every listed image is warmed up.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::ResourceRequirements;
use krm_runner_function_config::config_file::{self, YamlError};
use krm_runner_function_config::{ContainerOverrides, PodExecutor, TemplateOverrides};
use serde::Deserialize;

/// Per-image settings by exact image string, in file order.
pub type ImageSettings = Vec<(String, PodExecutor)>;

#[derive(Deserialize)]
#[serde(untagged)]
enum File {
    Ttls(BTreeMap<String, Ttl>),
    Entries(Vec<Entry>),
}

/// A TTL as written: Go's YAML reads a bare `0` into a string too.
#[derive(Deserialize)]
#[serde(untagged)]
enum Ttl {
    Text(String),
    Number(i64),
}

impl Ttl {
    fn into_text(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Number(number) => number.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    time_to_live: Option<String>,
    #[serde(default)]
    max_waitlist_length: Option<u32>,
    #[serde(default)]
    max_parallel_pods_per_function: Option<u32>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

/// Reads the file; a problem names the file and, for a bad entry, the entry.
pub fn read(path: &Path) -> Result<ImageSettings, String> {
    let text = config_file::read_text(path).map_err(|error| error.to_string())?;
    parse(&text).map_err(|error| format!("{}: {error}", path.display()))
}

fn parse(text: &str) -> Result<ImageSettings, String> {
    let file: File = config_file::from_yaml(text).map_err(|error| match error {
        YamlError::TooDeep { .. } => error.to_string(),
        YamlError::Parse(_) => "neither a map of image to TTL nor a list of {name, timeToLive, \
                                maxWaitlistLength, maxParallelPodsPerFunction, resources}"
            .to_owned(),
    })?;
    let settings: ImageSettings = match file {
        File::Ttls(ttls) => ttls
            .into_iter()
            .map(|(image, ttl)| (image, settings(Some(ttl.into_text()), None, None, None)))
            .collect(),
        File::Entries(entries) => entries
            .into_iter()
            .map(|entry| {
                (
                    entry.name,
                    settings(
                        entry.time_to_live,
                        entry.max_waitlist_length,
                        entry.max_parallel_pods_per_function,
                        entry.resources,
                    ),
                )
            })
            .collect(),
    };
    let problems: Vec<String> = settings
        .iter()
        .filter_map(|(image, settings)| {
            let error = settings.ttl().err()?;
            Some(format!("{image}: timeToLive: {error}"))
        })
        .collect();
    if problems.is_empty() {
        Ok(settings)
    } else {
        Err(problems.join("; "))
    }
}

fn settings(
    time_to_live: Option<String>,
    max_waitlist_length: Option<u32>,
    max_parallel_pods: Option<u32>,
    resources: Option<ResourceRequirements>,
) -> PodExecutor {
    PodExecutor {
        tags: Vec::new(),
        // Empty or zero means the evaluator's default TTL, as in Porch.
        time_to_live: time_to_live.unwrap_or_else(|| "0".to_owned()),
        max_parallel_executions: max_parallel_pods,
        preferred_max_queue_length: max_waitlist_length,
        template_overrides: resources.map(|resources| TemplateOverrides {
            container: Some(ContainerOverrides {
                resources: Some(resources),
                ..ContainerOverrides::default()
            }),
            ..TemplateOverrides::default()
        }),
        cache: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn reads_the_ttl_map() {
        let settings = parse("gcr.io/kpt-fn/apply-replacements:v0.1.1: 30m\nx/y:v1: 0\n").unwrap();
        assert_eq!(settings.len(), 2);
        assert_eq!(settings[0].0, "gcr.io/kpt-fn/apply-replacements:v0.1.1");
        assert_eq!(
            settings[0].1.ttl().unwrap(),
            Some(Duration::from_secs(1800))
        );
        assert_eq!(settings[1].1.ttl().unwrap(), None);
    }

    #[test]
    fn reads_the_list_with_limits() {
        let settings = parse(
            "- name: gcr.io/kpt-fn/set-namespace:v0.4.1\n  timeToLive: 10m\n  maxWaitlistLength: 2\n  maxParallelPodsPerFunction: 3\n  resources: {limits: {memory: 64Mi}}\n- name: other:v1\n",
        )
        .unwrap();
        let (image, first) = &settings[0];
        assert_eq!(image, "gcr.io/kpt-fn/set-namespace:v0.4.1");
        assert_eq!(first.ttl().unwrap(), Some(Duration::from_secs(600)));
        assert_eq!(first.preferred_max_queue_length, Some(2));
        assert_eq!(first.max_parallel_executions, Some(3));
        let limits = first
            .template_overrides
            .as_ref()
            .and_then(|o| o.container.as_ref())
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .unwrap();
        assert_eq!(limits["memory"].0, "64Mi");
        assert_eq!(settings[1].1.ttl().unwrap(), None);
    }

    #[test]
    fn names_the_image_with_a_bad_ttl_and_refuses_other_shapes() {
        let error = parse("a/b:v1: 3x\n").unwrap_err();
        assert!(error.contains("a/b:v1: timeToLive"), "{error}");
        let error = parse("- name: a/b:v1\n  maxWaitlist: 2\n").unwrap_err();
        assert!(error.contains("neither a map"), "{error}");
    }
}
