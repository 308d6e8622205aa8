//! The `FunctionConfig` resource, field for field as Porch defines it
//! (`api/porchconfig/v1alpha1/function_config_types.go`). The doc comments become the CRD's
//! descriptions, so they speak to the operator reading `kubectl explain`.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, PodSecurityContext, ResourceRequirements};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The idle time-to-live the CRD gives a `podExecutor` that does not set one.
pub const DEFAULT_TIME_TO_LIVE: &str = "30m";

/// Which executors serve a function image: built in (goExecutor), as a local binary
/// (binaryExecutor) or in a pod (podExecutor), tried in that order for the tags each lists.
// Each `printcolumn(...)` says `type_ = "integer"`; clippy takes the repeats for a duplicated
// attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "config.porch.kpt.dev",
    version = "v1alpha1",
    kind = "FunctionConfig",
    plural = "functionconfigs",
    singular = "functionconfig",
    namespaced,
    status = "FunctionConfigStatus",
    derive = "PartialEq",
    doc = "Configures how the function runner executes one KRM function image.",
    printcolumn(
        name = "Server Applied",
        type_ = "integer",
        json_path = ".status.apiServerObservedGeneration"
    ),
    printcolumn(
        name = "FnRunner Applied",
        type_ = "integer",
        json_path = ".status.functionRunnerObservedGeneration"
    ),
    printcolumn(
        name = "Controller Applied",
        type_ = "integer",
        json_path = ".status.controllerObservedGeneration"
    )
)]
#[x_kube(validation = Rule::new(
    "has(self.podExecutor) || has(self.binaryExecutor) || has(self.goExecutor)"
).message("at least one of podExecutor, binaryExecutor, goExecutor must be set"))]
#[serde(rename_all = "camelCase")]
pub struct FunctionConfigSpec {
    /// Short name of the function image, without registry or tag (e.g. `set-namespace`).
    #[schemars(length(min = 1))]
    pub image: String,
    /// Registries the image may come from; `""` stands for the runner's default image prefix.
    /// Absent or empty: any registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefixes: Option<Vec<String>>,
    /// Run the image in a pod, with these settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_executor: Option<PodExecutor>,
    /// Run a local executable instead of the image, for the listed tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_executor: Option<BinaryExecutor>,
    /// Run a function compiled into the runner instead of the image, for the listed tags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub go_executor: Option<GoExecutor>,
}

/// How the pod evaluator runs the image.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodExecutor {
    /// Image tags these settings apply to; empty: every tag. The first tag is warmed up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// How long an idle pod is kept, as a Go duration (`30m`, `1h30m`, `90s`); zero or less:
    /// the runner's default.
    #[serde(default = "default_time_to_live")]
    #[schemars(extend("format" = "duration"))]
    pub time_to_live: String,
    /// Most pods run at once for this image; absent or 0: the runner's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel_executions: Option<u32>,
    /// Calls queued on one pod before another pod is started; absent or 0: the runner's
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_max_queue_length: Option<u32>,
    /// Changes to the pod template for this image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_overrides: Option<TemplateOverrides>,
}

fn default_time_to_live() -> String {
    DEFAULT_TIME_TO_LIVE.to_owned()
}

/// Replacements applied to the pod template for one image.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TemplateOverrides {
    /// Replaces the pod's service account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Replaces the pod's security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// Applied to the pod's first init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container: Option<ContainerOverrides>,
    /// Applied to the pod's first container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerOverrides>,
}

/// Replacements applied to one container of the pod template.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ContainerOverrides {
    /// Requests and limits, each replacing the template's when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Replaces the container's `envFrom` wholesale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,
    /// Replaces the container's `env` wholesale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
}

/// A local executable standing in for the image.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct BinaryExecutor {
    /// Image tags the executable serves.
    #[schemars(length(min = 1))]
    pub tags: Vec<String>,
    /// Absolute path of the executable, or a path relative to the runner's functions directory.
    #[schemars(length(min = 1))]
    pub path: String,
}

/// A function compiled into the runner standing in for the image.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
pub struct GoExecutor {
    /// Image tags the built-in function serves.
    #[schemars(length(min = 1))]
    pub tags: Vec<String>,
    /// Name of the built-in function; absent: the FunctionConfig's `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// What each component last applied.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FunctionConfigStatus {
    /// Generation the Porch API server applied to its built-in runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_server_observed_generation: Option<i64>,
    /// Generation the function runner applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_runner_observed_generation: Option<i64>,
    /// Generation the Porch controllers applied to their built-in runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_observed_generation: Option<i64>,
    /// Why the last attempt to apply this FunctionConfig failed; empty after a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Plugins receive their executor section as JSON: the wire names are Porch's camelCase, and
    /// a pod section without `timeToLive` means the CRD's default, as it would from the cluster.
    #[test]
    fn executor_sections_read_and_write_porchs_json() {
        let pod = json!({
            "tags": ["v1"],
            "timeToLive": "5m",
            "maxParallelExecutions": 2,
            "preferredMaxQueueLength": 3,
            "templateOverrides": {
                "serviceAccountName": "fn",
                "securityContext": {"runAsUser": 1000},
                "initContainer": {"env": [{"name": "A", "value": "1"}]},
                "container": {
                    "resources": {"limits": {"memory": "64Mi"}},
                    "envFrom": [{"configMapRef": {"name": "settings"}}],
                },
            },
        });
        let parsed: PodExecutor = serde_json::from_value(pod.clone()).unwrap();
        assert_eq!(parsed.preferred_max_queue_length, Some(3));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), pod);

        let defaulted: PodExecutor = serde_json::from_value(json!({})).unwrap();
        assert_eq!(defaulted.time_to_live, DEFAULT_TIME_TO_LIVE);
        assert!(defaulted.tags.is_empty());

        let binary = json!({"tags": ["v1"], "path": "/bin/fn"});
        let parsed: BinaryExecutor = serde_json::from_value(binary.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), binary);

        let go = json!({"tags": ["v1"], "id": "set-namespace"});
        let parsed: GoExecutor = serde_json::from_value(go.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), go);
    }
}
