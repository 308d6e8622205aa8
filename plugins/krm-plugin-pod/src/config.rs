//! The pod plugin's `config:` section. Keys are Porch's flag names with underscores, so
//! `--pod-ttl 10m` on the runner's command line lands in `pod_ttl`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use krm_go_duration as go_duration;
use krm_plugin_api::ConfigError;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::docker_config::{DockerConfig, DockerConfigError, PrivateRegistries};
use crate::pod_cache_config::{self, ImageSettings};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PodConfig {
    /// Namespace of function pods and services (Porch: `--pod-namespace`).
    pub pod_namespace: String,
    /// Idle time after which a pod is deleted (Porch: `--pod-ttl`, Go duration).
    pub pod_ttl: String,
    /// How often idle pods are looked for (Porch: `--scan-interval`).
    pub scan_interval: String,
    /// Create the `warm_up` images' pods at start (Porch: `--warm-up-pod-cache`).
    pub warm_up_pod_cache: bool,
    /// Images to start one pod for at start-up.
    pub warm_up: Vec<String>,
    /// Per-pod load at which another pod is started (Porch: `--max-waitlist-length`).
    pub max_waitlist_length: i64,
    /// Pods per image at most (Porch: `--max-parallel-pods-per-function`).
    pub max_parallel_pods_per_function: i64,
    /// Calls per image allowed to wait beyond the pods' preferred load; more are refused
    /// with RESOURCE_EXHAUSTED (Porch queues without limit).
    pub max_queued_calls: usize,
    /// Times a call whose pod could not be reached (UNAVAILABLE) is tried again on another
    /// pod, while the caller's deadline has not passed (Porch: `--max-grpc-retries`); below 0
    /// means none.
    pub max_grpc_retries: i64,
    /// The wrapper-server image (Porch: env `WRAPPER_SERVER_IMAGE`, which is the default here).
    pub wrapper_server_image: Option<String>,
    /// Longest wait for a new pod to become ready, never longer than the caller's deadline.
    pub readiness_timeout: String,
    /// How the runner reaches a pod: `service_dns` (Porch's way), `service_ip` or `pod_ip`.
    pub connect_via: ConnectVia,
    /// A kubeconfig file; default: in-cluster config, else `KUBECONFIG`, else `~/.kube/config`.
    pub kubeconfig: Option<String>,
    /// Names this runner's pods, so that several runners sharing a namespace leave each
    /// other's pods alone. Default: the host name.
    pub owner: Option<String>,
    /// Registries spoken to over plain HTTP (local registries only).
    pub plain_http_registries: Vec<String>,
    /// Authenticate to registries with the docker config JSON at `registry_auth_secret_path`,
    /// and let nodes pull with it: it is kept as Secret `registry_auth_secret_name` (type
    /// `kubernetes.io/dockerconfigjson`) in the pod namespace and named in every function pod's
    /// `imagePullSecrets` (Porch: `--enable-private-registries` and the two flags below).
    pub enable_private_registries: bool,
    pub registry_auth_secret_path: String,
    pub registry_auth_secret_name: String,
    /// Trust the CA in `tls_secret_path` (`ca.crt`, else `ca.pem`) for registries (Porch:
    /// `--enable-private-registries-tls`, `--tls-secret-path`).
    pub enable_private_registries_tls: bool,
    pub tls_secret_path: String,
    /// Porch's older per-image settings file (Porch: `--pod-cache-config`; see
    /// `pod_cache_config.rs`): used for calls no FunctionConfig routes, and its images are
    /// warmed up with `warm_up_pod_cache`.
    pub pod_cache_config: Option<String>,
    /// Accepted for Porch v1.4/v1.5 manifests; the base PodTemplate replaces it.
    pub function_pod_template: Option<String>,
    /// How long a repository's tag list (read to resolve tag constraints) is used before it is
    /// listed again, in the background, while calls go on with the cached one.
    pub tags_refresh_interval: String,
    /// Tags asked for per page of a tag list (registries may cap it).
    pub tags_page_size: usize,
    /// How long a tag's digest is used before the registry is asked again (one HEAD request,
    /// in the background, while calls go on with the known digest); a tag pushed to another
    /// image runs in new pods from the call after the answer (see `digest.rs`).
    pub digest_recheck_interval: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectVia {
    ServiceDns,
    ServiceIp,
    PodIp,
}

impl Default for PodConfig {
    fn default() -> Self {
        Self {
            pod_namespace: "porch-fn-system".into(),
            pod_ttl: "30m".into(),
            scan_interval: "1m".into(),
            warm_up_pod_cache: true,
            warm_up: Vec::new(),
            max_waitlist_length: 2,
            max_parallel_pods_per_function: 1,
            max_queued_calls: 1000,
            max_grpc_retries: 2,
            wrapper_server_image: None,
            readiness_timeout: "60s".into(),
            connect_via: ConnectVia::ServiceDns,
            kubeconfig: None,
            owner: None,
            plain_http_registries: Vec::new(),
            enable_private_registries: false,
            registry_auth_secret_path: "/var/tmp/config-secret/.dockerconfigjson".into(),
            registry_auth_secret_name: "auth-secret".into(),
            enable_private_registries_tls: false,
            tls_secret_path: "/var/tmp/tls-secret/".into(),
            pod_cache_config: None,
            function_pod_template: None,
            tags_refresh_interval: "1m".into(),
            tags_page_size: 1000,
            digest_recheck_interval: "10s".into(),
        }
    }
}

/// The validated settings the pool works with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub ttl: Duration,
    pub scan_interval: Duration,
    pub readiness_timeout: Duration,
    pub preferred_load: usize,
    pub max_pods: usize,
    pub max_queued_calls: usize,
    pub max_grpc_retries: usize,
    pub wrapper_server_image: String,
    pub connect_via: ConnectVia,
    pub owner: String,
    pub max_message_bytes: usize,
    pub default_image_prefix: String,
    pub private_registries: Option<PrivateRegistries>,
    /// The extra CA file registries are checked against.
    pub registry_ca: Option<PathBuf>,
    /// The pod-cache config file's per-image settings, by image as written.
    pub pod_cache: ImageSettings,
    pub tags_refresh_interval: Duration,
    pub tags_page_size: usize,
    pub digest_recheck_interval: Duration,
}

impl PodConfig {
    pub fn settings(
        &self,
        max_message_bytes: usize,
        default_image_prefix: String,
    ) -> Result<Settings, ConfigError> {
        let mut problems = Vec::new();
        let mut duration = |field: &str, value: &str| match go_duration::parse_non_negative(value) {
            Ok(duration) => duration,
            Err(_) => {
                problems.push(format!(
                    "{field}: {value:?} is not a duration such as 30m or 1m30s"
                ));
                Duration::ZERO
            }
        };
        let ttl = duration("pod_ttl", &self.pod_ttl);
        let scan_interval = duration("scan_interval", &self.scan_interval);
        let readiness_timeout = duration("readiness_timeout", &self.readiness_timeout);
        let tags_refresh_interval = duration("tags_refresh_interval", &self.tags_refresh_interval);
        let digest_recheck_interval =
            duration("digest_recheck_interval", &self.digest_recheck_interval);
        let wrapper_server_image = self
            .wrapper_server_image
            .clone()
            .or_else(|| std::env::var("WRAPPER_SERVER_IMAGE").ok())
            .filter(|image| !image.is_empty());
        if wrapper_server_image.is_none() {
            problems.push(
                "wrapper_server_image: not set (nor environment variable WRAPPER_SERVER_IMAGE), \
                 which the pod evaluator needs"
                    .to_owned(),
            );
        }
        if self.pod_namespace.is_empty() {
            problems.push("pod_namespace: empty".to_owned());
        }
        if self.tags_page_size == 0 {
            problems.push("tags_page_size: must be at least 1".to_owned());
        }
        let private_registries = self.enable_private_registries.then(|| PrivateRegistries {
            file: PathBuf::from(&self.registry_auth_secret_path),
            secret_name: self.registry_auth_secret_name.clone(),
        });
        if let Some(private) = &private_registries {
            if let Err(error) = private.read() {
                problems.push(format!("registry_auth_secret_path: {error}"));
            }
            if !is_dns_subdomain(&private.secret_name) {
                problems.push(format!(
                    "registry_auth_secret_name: {:?} is not a Secret name (lower-case letters, digits, '-' and '.', at most 253)",
                    private.secret_name
                ));
            }
        }
        let registry_ca = if self.enable_private_registries_tls {
            let dir = Path::new(&self.tls_secret_path);
            let found = ["ca.crt", "ca.pem"]
                .iter()
                .map(|name| dir.join(name))
                .find(|file| file.is_file());
            if found.is_none() {
                problems.push(format!(
                    "tls_secret_path: no ca.crt or ca.pem in {}",
                    dir.display()
                ));
            }
            found
        } else {
            None
        };
        let pod_cache = match &self.pod_cache_config {
            Some(path) => pod_cache_config::read(Path::new(path)).unwrap_or_else(|error| {
                problems.push(format!("pod_cache_config: {error}"));
                Vec::new()
            }),
            None => Vec::new(),
        };
        if let Some(problems) = ConfigError::all(problems.into_iter().map(ConfigError::new)) {
            return Err(problems);
        }
        let owner = self
            .owner
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .filter(|owner| !owner.is_empty())
            .unwrap_or_else(|| "krm-runner".to_owned());
        Ok(Settings {
            namespace: self.pod_namespace.clone(),
            ttl,
            scan_interval: scan_interval.max(Duration::from_millis(100)),
            readiness_timeout,
            // Porch: values <= 0 fall back to the defaults.
            preferred_load: usize::try_from(self.max_waitlist_length)
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or(2),
            max_pods: usize::try_from(self.max_parallel_pods_per_function)
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or(1),
            max_queued_calls: self.max_queued_calls,
            max_grpc_retries: usize::try_from(self.max_grpc_retries).unwrap_or(0),
            wrapper_server_image: wrapper_server_image.unwrap_or_default(),
            connect_via: self.connect_via,
            owner: label_safe(&owner),
            max_message_bytes,
            default_image_prefix,
            private_registries,
            registry_ca,
            pod_cache,
            tags_refresh_interval,
            tags_page_size: self.tags_page_size,
            digest_recheck_interval,
        })
    }
}

impl Settings {
    /// The private registries' docker config file as it is now; `None` without private
    /// registries.
    pub fn docker_config(&self) -> Result<Option<DockerConfig>, DockerConfigError> {
        self.private_registries
            .as_ref()
            .map(PrivateRegistries::read)
            .transpose()
    }
}

/// A Kubernetes object name of the DNS-subdomain kind (Secrets, ...).
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A Kubernetes label value: at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at the ends.
pub fn label_safe(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values() {
        assert_eq!(label_safe("runner-7f9c/abc"), "runner-7f9c-abc");
        assert_eq!(label_safe("-x-"), "x");
    }

    #[test]
    fn the_digest_recheck_interval_is_a_duration_named_when_wrong() {
        let config = |interval: &str| PodConfig {
            wrapper_server_image: Some("registry.example/wrapper:v1".into()),
            digest_recheck_interval: interval.into(),
            tags_refresh_interval: "often".into(),
            ..PodConfig::default()
        };
        let error = config("soon")
            .settings(1, String::new())
            .unwrap_err()
            .to_string();
        for expected in [
            "digest_recheck_interval: \"soon\" is not a duration",
            "tags_refresh_interval: \"often\" is not a duration",
        ] {
            assert!(error.contains(expected), "{expected} in {error}");
        }
        let settings = PodConfig {
            tags_refresh_interval: "1m".into(),
            ..config("1m30s")
        }
        .settings(1, String::new())
        .unwrap();
        assert_eq!(settings.digest_recheck_interval, Duration::from_secs(90));
    }

    #[test]
    fn private_registry_problems_are_reported_together() {
        let dir = tempfile::tempdir().unwrap();
        let config = PodConfig {
            wrapper_server_image: Some("registry.example/wrapper:v1".into()),
            enable_private_registries: true,
            registry_auth_secret_path: dir.path().join("absent.json").display().to_string(),
            registry_auth_secret_name: "Not_A_Name".into(),
            enable_private_registries_tls: true,
            tls_secret_path: dir.path().display().to_string(),
            ..PodConfig::default()
        };
        let error = config.settings(1, String::new()).unwrap_err().to_string();
        for expected in [
            "registry_auth_secret_path: ",
            "absent.json",
            "registry_auth_secret_name: \"Not_A_Name\"",
            "tls_secret_path: no ca.crt or ca.pem",
        ] {
            assert!(error.contains(expected), "{expected} in {error}");
        }

        std::fs::write(dir.path().join("ca.pem"), "pem").unwrap();
        std::fs::write(dir.path().join("auth.json"), r#"{"auths": {}}"#).unwrap();
        let config = PodConfig {
            registry_auth_secret_path: dir.path().join("auth.json").display().to_string(),
            registry_auth_secret_name: "auth-secret".into(),
            ..config
        };
        let settings = config.settings(1, String::new()).unwrap();
        assert_eq!(settings.registry_ca, Some(dir.path().join("ca.pem")));
        let private = settings.private_registries.unwrap();
        assert_eq!(private.secret_name, "auth-secret");
    }

    #[test]
    fn a_broken_pod_cache_config_names_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pod-cache-config.yaml");
        std::fs::write(&file, "- name: a/b:v1\n  timeToLive: soon\n").unwrap();
        let config = PodConfig {
            wrapper_server_image: Some("registry.example/wrapper:v1".into()),
            pod_cache_config: Some(file.display().to_string()),
            ..PodConfig::default()
        };
        let error = config.settings(1, String::new()).unwrap_err().to_string();
        for expected in [
            "pod_cache_config: ",
            "pod-cache-config.yaml",
            "a/b:v1: timeToLive",
        ] {
            assert!(error.contains(expected), "{expected} in {error}");
        }
        std::fs::write(&file, "- name: a/b:v1\n  maxParallelPodsPerFunction: 3\n").unwrap();
        let settings = config.settings(1, String::new()).unwrap();
        assert_eq!(settings.pod_cache[0].0, "a/b:v1");
        assert_eq!(settings.pod_cache[0].1.max_parallel_executions, Some(3));
    }
}
