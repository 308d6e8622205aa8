//! The `FunctionConfig` resource, field for field as Porch defines it
//! (`api/porchconfig/v1alpha1/function_config_types.go`). The doc comments become the CRD's
//! descriptions, so they speak to the operator reading `kubectl explain`.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, PodSecurityContext, ResourceRequirements};
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::version::truncate;

/// The idle time-to-live the CRD gives a `podExecutor` that does not set one.
pub const DEFAULT_TIME_TO_LIVE: &str = "30m";

/// Which executors serve a function image: built in (goExecutor), as a WebAssembly module
/// (wasmExecutor, krm-runner's extension), as a local binary (binaryExecutor) or in a pod
/// (podExecutor), tried in that order for the tags each lists.
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
    "has(self.podExecutor) || has(self.binaryExecutor) || has(self.goExecutor) || has(self.wasmExecutor)"
).message("at least one of podExecutor, binaryExecutor, goExecutor, wasmExecutor must be set"))]
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
    /// Run a WebAssembly module instead of the image, for the listed tags (krm-runner's
    /// extension: Porch's runner ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm_executor: Option<WasmExecutor>,
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
    /// Answer identical calls from the runner's result cache (krm-runner's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ResultCaching>,
}

/// Marks an executor's calls cacheable, as the operator vouches that the function is pure
/// (same code, functionConfig and input: same output): krm-runner's result cache answers an
/// identical call again until the answer's time-to-live passes. Failed calls are never kept.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResultCaching {
    /// How long an answer is kept, as a Go duration (`10m`, `1h30m`); more than zero, at most
    /// 8760h.
    #[schemars(extend("format" = "duration"))]
    pub time_to_live: String,
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
    /// Answer identical calls from the runner's result cache (krm-runner's extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ResultCaching>,
}

/// A WebAssembly module standing in for the image: a WASI preview 1 command the runner's `wasm`
/// evaluator runs in its sandbox. Exactly one of `path` and `image` says where it comes from.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.path) != has(self.image)")
    .message("exactly one of path, image must be set"))]
pub struct WasmExecutor {
    /// Image tags the module serves.
    #[schemars(length(min = 1))]
    pub tags: Vec<String>,
    /// The module file: absolute, or relative to the runner's functions directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub path: Option<String>,
    /// The module as an OCI artifact (`registry/repository`, kpt's wasm image layout or one
    /// `application/wasm` layer), under a registry prefix of the runner's wasm evaluator. With
    /// `:tag` or `@digest`, that module serves every listed tag; without, the module of the tag
    /// the call runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Answer identical calls from the runner's result cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<ResultCaching>,
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
    /// What the function runner found when it last worked out the executors ahead of time:
    /// `Ready` (every executor can run), `Resolved` (every tag and constraint names a version),
    /// `Failed` (something cannot run; the reason and message say what).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Each executor tag as the function runner last worked it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executors: Option<Vec<ExecutorStatus>>,
}

/// One tag of one executor, as the function runner worked it out ahead of time.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorStatus {
    /// `goExecutor`, `wasmExecutor`, `binaryExecutor` or `podExecutor`.
    pub executor: String,
    /// The function runner's evaluator instance standing for the executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator: Option<String>,
    /// The tag or constraint as the executor's `tags` list it; absent for a podExecutor that
    /// lists none (any tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The version the tag stands for: the highest one satisfying a constraint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_tag: Option<String>,
    /// The image digest of the resolved tag, where the executor fetches it (podExecutor,
    /// wasmExecutor's `image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `Ready`, `Failed`, or `Skipped` (no evaluator instance stands for the executor).
    pub state: String,
    /// Why the tag failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A condition's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn of(holds: bool) -> Self {
        if holds { Self::True } else { Self::False }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// The longest condition message written; Kubernetes allows 32768 bytes.
pub const MAX_CONDITION_MESSAGE: usize = 2048;

impl FunctionConfigStatus {
    /// Sets the condition `type_` as Kubernetes' `meta.SetStatusCondition` does: its
    /// `lastTransitionTime` moves only when its status changes. The message is cut to
    /// [`MAX_CONDITION_MESSAGE`] bytes.
    pub fn set_condition(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
        observed_generation: Option<i64>,
    ) {
        let message = match truncate(message, MAX_CONDITION_MESSAGE) {
            kept if kept.len() < message.len() => format!("{kept}..."),
            _ => message.to_owned(),
        };
        let conditions = self.conditions.get_or_insert_with(Vec::new);
        let fresh = Condition {
            type_: type_.to_owned(),
            status: status.as_str().to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation,
            last_transition_time: Time(jiff::Timestamp::now()),
        };
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(existing) => {
                let since = if existing.status == fresh.status {
                    existing.last_transition_time.clone()
                } else {
                    fresh.last_transition_time.clone()
                };
                *existing = Condition {
                    last_transition_time: since,
                    ..fresh
                };
            }
            None => conditions.push(fresh),
        }
    }

    /// The condition `type_`, if set.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().flatten().find(|c| c.type_ == type_)
    }
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

    /// As `meta.SetStatusCondition`: the transition time stays while the status stays, whatever
    /// else changes; it moves when the status changes. Long messages are cut.
    #[test]
    fn set_condition_keeps_the_transition_time_while_the_status_holds() {
        let mut status: FunctionConfigStatus = serde_json::from_value(json!({
            "error": "",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                            "lastTransitionTime": "2020-01-01T00:00:00Z", "observedGeneration": 1}],
        }))
        .unwrap();
        let since = |status: &FunctionConfigStatus, type_| {
            serde_json::to_value(&status.condition(type_).unwrap().last_transition_time).unwrap()
        };
        status.set_condition("Ready", ConditionStatus::True, "Ready", "still", Some(2));
        let ready = status.condition("Ready").unwrap();
        assert_eq!(
            (ready.message.as_str(), ready.observed_generation),
            ("still", Some(2))
        );
        assert_eq!(since(&status, "Ready"), "2020-01-01T00:00:00Z");

        status.set_condition(
            "Ready",
            ConditionStatus::False,
            "NoVersion",
            "none",
            Some(2),
        );
        assert_ne!(since(&status, "Ready"), "2020-01-01T00:00:00Z");
        assert_eq!(status.condition("Ready").unwrap().status, "False");

        let long = "é".repeat(MAX_CONDITION_MESSAGE);
        status.set_condition("Failed", ConditionStatus::True, "NoVersion", &long, None);
        let failed = status.condition("Failed").unwrap();
        assert!(failed.message.len() <= MAX_CONDITION_MESSAGE + 3);
        assert!(failed.message.ends_with("é..."));
        assert_eq!(status.conditions.as_ref().unwrap().len(), 2);
    }
}
