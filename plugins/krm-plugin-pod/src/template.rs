//! The pod and service each function pod gets.
//!
//! The base is the namespace's `PodTemplate/base-pod-template` when it exists (operators tune
//! resources, tolerations, security there), else an inline default with secure settings Porch's
//! lacks: non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp,
//! no service-account token. The pod's template version is the PodTemplate's resourceVersion
//! (`inline-v1` for the inline default): pods of another version are replaced.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, ExecAction, LocalObjectReference,
    Pod, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecurityContext,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use krm_runner_function_config::{ContainerOverrides, TemplateOverrides};

use crate::image::by_digest;

pub const BASE_TEMPLATE_NAME: &str = "base-pod-template";
pub const INLINE_TEMPLATE_VERSION: &str = "inline-v1";
pub const WRAPPER_PORT: i32 = 9446;
pub const FUNCTION_CONTAINER: &str = "function";
const TOOLS_VOLUME: &str = "wrapper-server-tools";
const TOOLS_DIR: &str = "/wrapper-server-tools";

/// Porch's label: selects the pod for its service.
pub const IMAGE_LABEL: &str = "fn.kpt.dev/image";
pub const TEMPLATE_VERSION_ANNOTATION: &str = "fn.kpt.dev/template-version";
/// Which runner owns the pod: runners sharing a namespace only touch their own pods.
pub const OWNER_LABEL: &str = "krm-runner.dev/owner";
/// The runner Pod that made the pod (`<namespace>/<name>`) and its uid: once that Pod is gone,
/// any runner may reclaim the pod.
pub const OWNER_POD_ANNOTATION: &str = "krm-runner.dev/owner-pod";
pub const OWNER_UID_ANNOTATION: &str = "krm-runner.dev/owner-uid";
/// The full image reference (label values cannot hold one).
pub const IMAGE_ANNOTATION: &str = "krm-runner.dev/image";
/// Which template overrides the pod was made with (absent: none): a pod made with other
/// overrides than its image now has is not used.
pub const OVERRIDES_ANNOTATION: &str = "krm-runner.dev/template-overrides";

/// The Pod the runner runs in (from the downward API), which its function pods name as their
/// owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl RunnerPod {
    /// `<namespace>/<name>`, as [`OWNER_POD_ANNOTATION`] holds it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A reference making the cluster's garbage collector delete the dependent once the Pod
/// `name` (with `uid`) is gone. Only valid within one namespace: a collector takes an owner in
/// another namespace for absent and deletes the dependent at once.
fn owned_by_pod(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

/// The inline default base template.
pub fn inline_template(wrapper_server_image: &str) -> PodTemplateSpec {
    let tools_mount = VolumeMount {
        name: TOOLS_VOLUME.into(),
        mount_path: TOOLS_DIR.into(),
        ..Default::default()
    };
    let locked_down = SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        read_only_root_filesystem: Some(false),
        ..Default::default()
    };
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            annotations: Some(BTreeMap::from([(
                "cluster-autoscaler.kubernetes.io/safe-to-evict".into(),
                "true".into(),
            )])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            automount_service_account_token: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                run_as_group: Some(65532),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            volumes: Some(vec![Volume {
                name: TOOLS_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            // Function images may have no shell and no `cp`: the wrapper copies itself.
            init_containers: Some(vec![Container {
                name: "copy-wrapper-server".into(),
                image: Some(wrapper_server_image.into()),
                command: Some(vec![
                    "/home/nonroot/wrapper-server/wrapper-server".into(),
                    "install".into(),
                    TOOLS_DIR.into(),
                ]),
                volume_mounts: Some(vec![tools_mount.clone()]),
                security_context: Some(locked_down.clone()),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: FUNCTION_CONTAINER.into(),
                image: Some("placeholder".into()),
                command: Some(vec![format!("{TOOLS_DIR}/wrapper-server")]),
                ports: Some(vec![ContainerPort {
                    container_port: WRAPPER_PORT,
                    name: Some("grpc".into()),
                    ..Default::default()
                }]),
                readiness_probe: Some(Probe {
                    exec: Some(ExecAction {
                        command: Some(vec![
                            format!("{TOOLS_DIR}/grpc-health-probe"),
                            "-addr".into(),
                            format!("localhost:{WRAPPER_PORT}"),
                        ]),
                    }),
                    period_seconds: Some(1),
                    ..Default::default()
                }),
                volume_mounts: Some(vec![tools_mount]),
                security_context: Some(locked_down),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

/// What one function pod needs.
pub struct PodRequest<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    /// The image, pinned to a digest when it is known (`name:tag@digest`): the node pulls it
    /// by digest alone.
    pub image: &'a str,
    pub entrypoint: &'a [String],
    pub owner: &'a str,
    /// The runner's own Pod, when known.
    pub runner: Option<&'a RunnerPod>,
    pub template_version: &'a str,
    pub max_message_bytes: usize,
    pub wrapper_server_image: &'a str,
    /// The private-registry pull Secret, added to the template's `imagePullSecrets`.
    pub image_pull_secret: Option<&'a str>,
    /// The image's template overrides and their hash.
    pub overrides: Option<&'a TemplateOverrides>,
    pub overrides_hash: &'a str,
}

/// The pod for `request`, from the base template.
pub fn pod(base: &PodTemplateSpec, request: &PodRequest<'_>) -> Result<Pod, String> {
    let mut metadata = base.metadata.clone().unwrap_or_default();
    let mut spec = base
        .spec
        .clone()
        .ok_or("the base pod template has no spec")?;
    if let Some(secret) = request.image_pull_secret {
        let secrets = spec.image_pull_secrets.get_or_insert_with(Vec::new);
        if !secrets.iter().any(|known| known.name == secret) {
            secrets.push(LocalObjectReference {
                name: secret.into(),
            });
        }
    }
    if let Some(init) = spec.init_containers.as_mut().and_then(|c| c.first_mut()) {
        init.image = Some(request.wrapper_server_image.into());
    }
    let function = spec
        .containers
        .iter_mut()
        .find(|c| c.name == FUNCTION_CONTAINER)
        .ok_or("the base pod template has no container named \"function\"")?;
    function.image = Some(by_digest(request.image));
    let args = function.args.get_or_insert_with(Vec::new);
    args.extend([
        "--port".into(),
        WRAPPER_PORT.to_string(),
        "--max-request-body-size".into(),
        request.max_message_bytes.to_string(),
        "--".into(),
    ]);
    args.extend(request.entrypoint.iter().cloned());
    if let Some(overrides) = request.overrides {
        apply_overrides(&mut spec, overrides);
    }

    metadata.name = Some(request.name.into());
    metadata.namespace = Some(request.namespace.into());
    metadata.generate_name = None;
    let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(IMAGE_LABEL.into(), request.name.into());
    labels.insert(OWNER_LABEL.into(), request.owner.into());
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        TEMPLATE_VERSION_ANNOTATION.into(),
        request.template_version.into(),
    );
    annotations.insert(IMAGE_ANNOTATION.into(), request.image.into());
    if !request.overrides_hash.is_empty() {
        annotations.insert(OVERRIDES_ANNOTATION.into(), request.overrides_hash.into());
    }
    if let Some(runner) = request.runner {
        annotations.insert(OWNER_POD_ANNOTATION.into(), runner.key());
        annotations.insert(OWNER_UID_ANNOTATION.into(), runner.uid.clone());
        if runner.namespace == request.namespace {
            metadata
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(owned_by_pod(&runner.name, &runner.uid));
        }
    }
    Ok(Pod {
        metadata,
        spec: Some(spec),
        status: None,
    })
}

/// A FunctionConfig's `templateOverrides`, as Porch applies them: the service account and the
/// security context replace the pod's; `initContainer` applies to the first init container and
/// `container` to the function container (Porch's `containers[0]`), where requests and limits
/// each replace the template's when set, and `env` and `envFrom` replace it wholesale.
fn apply_overrides(spec: &mut PodSpec, overrides: &TemplateOverrides) {
    if let Some(account) = &overrides.service_account_name {
        spec.service_account_name = Some(account.clone());
    }
    if let Some(context) = &overrides.security_context {
        spec.security_context = Some(context.clone());
    }
    let init = spec.init_containers.as_mut().and_then(|c| c.first_mut());
    if let (Some(init), Some(wanted)) = (init, &overrides.init_container) {
        apply_container_overrides(init, wanted);
    }
    let function = spec
        .containers
        .iter_mut()
        .find(|c| c.name == FUNCTION_CONTAINER);
    if let (Some(function), Some(wanted)) = (function, &overrides.container) {
        apply_container_overrides(function, wanted);
    }
}

fn apply_container_overrides(container: &mut Container, wanted: &ContainerOverrides) {
    if let Some(resources) = &wanted.resources {
        let current = container.resources.get_or_insert_with(Default::default);
        if resources.requests.is_some() {
            current.requests = resources.requests.clone();
        }
        if resources.limits.is_some() {
            current.limits = resources.limits.clone();
        }
    }
    if let Some(env) = &wanted.env {
        container.env = Some(env.clone());
    }
    if let Some(env_from) = &wanted.env_from {
        container.env_from = Some(env_from.clone());
    }
}

/// One ClusterIP service per pod, named like it, selecting it alone, and owned by it: whoever
/// deletes the pod (a runner, an operator, the garbage collector) deletes its service too.
pub fn service(name: &str, namespace: &str, owner: &str, pod_uid: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(OWNER_LABEL.into(), owner.into())])),
            owner_references: Some(vec![owned_by_pod(name, pod_uid)]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(BTreeMap::from([(IMAGE_LABEL.into(), name.into())])),
            ports: Some(vec![ServicePort {
                port: WRAPPER_PORT,
                target_port: Some(IntOrString::Int(WRAPPER_PORT)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_image_is_pulled_by_digest_and_annotated_as_pinned() {
        let base = inline_template("registry/wrapper:v1");
        let pinned = "registry/set-labels:v0.4.1@sha256:0123abcd";
        let pod = pod(
            &base,
            &PodRequest {
                name: "set-labels-v041-0123abcd-abcde",
                namespace: "fns",
                image: pinned,
                entrypoint: &["/fn".to_owned()],
                owner: "runner-a",
                runner: None,
                template_version: INLINE_TEMPLATE_VERSION,
                max_message_bytes: 100,
                wrapper_server_image: "registry/wrapper:v1",
                image_pull_secret: None,
                overrides: None,
                overrides_hash: "",
            },
        )
        .unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some("registry/set-labels@sha256:0123abcd")
        );
        assert_eq!(pod.metadata.annotations.unwrap()[IMAGE_ANNOTATION], pinned);
    }

    #[test]
    fn pod_from_the_inline_template() {
        let base = inline_template("registry/wrapper:v1");
        let entrypoint = vec!["/fn".to_owned(), "--flag".to_owned()];
        let pod = pod(
            &base,
            &PodRequest {
                name: "set-labels-v041-12345678-abcde",
                namespace: "fns",
                image: "registry/set-labels:v0.4.1",
                entrypoint: &entrypoint,
                owner: "runner-a",
                runner: None,
                template_version: INLINE_TEMPLATE_VERSION,
                max_message_bytes: 100,
                wrapper_server_image: "registry/wrapper:v1",
                image_pull_secret: None,
                overrides: None,
                overrides_hash: "",
            },
        )
        .unwrap();
        let spec = pod.spec.unwrap();
        let function = &spec.containers[0];
        assert_eq!(
            function.image.as_deref(),
            Some("registry/set-labels:v0.4.1")
        );
        assert_eq!(
            function.args.as_ref().unwrap(),
            &[
                "--port",
                "9446",
                "--max-request-body-size",
                "100",
                "--",
                "/fn",
                "--flag"
            ]
        );
        assert_eq!(spec.automount_service_account_token, Some(false));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[OWNER_LABEL], "runner-a");
        assert_eq!(labels[IMAGE_LABEL], "set-labels-v041-12345678-abcde");
        assert_eq!(spec.image_pull_secrets, None);
    }

    #[test]
    fn the_runner_pod_owns_function_pods_in_its_own_namespace_only() {
        let base = inline_template("registry/wrapper:v1");
        let runner = |namespace: &str| RunnerPod {
            namespace: namespace.into(),
            name: "runner-7f9c".into(),
            uid: "1111-2222".into(),
        };
        let request = |runner| PodRequest {
            name: "fn-latest-12345678-abcde",
            namespace: "fns",
            image: "registry/fn",
            entrypoint: &[],
            owner: "runner-7f9c",
            runner,
            template_version: INLINE_TEMPLATE_VERSION,
            max_message_bytes: 100,
            wrapper_server_image: "registry/wrapper:v1",
            image_pull_secret: None,
            overrides: None,
            overrides_hash: "",
        };
        let (in_fns, in_porch_system) = (runner("fns"), runner("porch-system"));
        let same = pod(&base, &request(Some(&in_fns))).unwrap().metadata;
        let owners = same.owner_references.unwrap();
        assert_eq!(
            (
                owners[0].kind.as_str(),
                owners[0].name.as_str(),
                owners[0].uid.as_str()
            ),
            ("Pod", "runner-7f9c", "1111-2222")
        );
        let other = pod(&base, &request(Some(&in_porch_system)))
            .unwrap()
            .metadata;
        assert_eq!(
            other.owner_references, None,
            "a collector would delete it at once"
        );
        let annotations = other.annotations.unwrap();
        assert_eq!(
            annotations[OWNER_POD_ANNOTATION],
            "porch-system/runner-7f9c"
        );
        assert_eq!(annotations[OWNER_UID_ANNOTATION], "1111-2222");
        let service = service("fn-latest-12345678-abcde", "fns", "runner-7f9c", "3333");
        let owners = service.metadata.owner_references.unwrap();
        assert_eq!(
            (owners[0].name.as_str(), owners[0].uid.as_str()),
            ("fn-latest-12345678-abcde", "3333")
        );
    }

    #[test]
    fn pull_secret_is_appended_once() {
        let mut base = inline_template("registry/wrapper:v1");
        let reference = |name: &str| LocalObjectReference { name: name.into() };
        base.spec.as_mut().unwrap().image_pull_secrets = Some(vec![
            reference("operators-secret"),
            reference("auth-secret"),
        ]);
        let request = |secret| PodRequest {
            name: "fn-latest-12345678-abcde",
            namespace: "fns",
            image: "registry/fn",
            entrypoint: &[],
            owner: "runner-a",
            runner: None,
            template_version: INLINE_TEMPLATE_VERSION,
            max_message_bytes: 100,
            wrapper_server_image: "registry/wrapper:v1",
            image_pull_secret: Some(secret),
            overrides: None,
            overrides_hash: "",
        };
        let secrets = |pod: Pod| pod.spec.unwrap().image_pull_secrets.unwrap();
        assert_eq!(
            secrets(pod(&base, &request("auth-secret")).unwrap()),
            [reference("operators-secret"), reference("auth-secret")]
        );
        assert_eq!(
            secrets(pod(&base, &request("other")).unwrap()),
            [
                reference("operators-secret"),
                reference("auth-secret"),
                reference("other")
            ]
        );
    }

    #[test]
    fn overrides_replace_resources_each_env_wholesale_and_pod_settings() {
        let mut base = inline_template("registry/wrapper:v1");
        let function = &mut base.spec.as_mut().unwrap().containers[0];
        function.resources = Some(
            serde_json::from_value(serde_json::json!({
                "requests": {"cpu": "100m"}, "limits": {"memory": "1Gi"}
            }))
            .unwrap(),
        );
        function.env = Some(vec![
            serde_json::from_value(serde_json::json!({"name": "OLD", "value": "x"})).unwrap(),
        ]);
        let overrides: TemplateOverrides = serde_json::from_value(serde_json::json!({
            "serviceAccountName": "fn-runner",
            "securityContext": {"runAsUser": 1000},
            "initContainer": {"resources": {"requests": {"cpu": "10m"}}},
            "container": {
                "resources": {"limits": {"memory": "64Mi"}},
                "env": [{"name": "NEW", "value": "y"}],
            },
        }))
        .unwrap();
        let pod = pod(
            &base,
            &PodRequest {
                name: "fn-v1-12345678-abcde",
                namespace: "fns",
                image: "registry/fn:v1",
                entrypoint: &[],
                owner: "runner-a",
                runner: None,
                template_version: INLINE_TEMPLATE_VERSION,
                max_message_bytes: 100,
                wrapper_server_image: "registry/wrapper:v1",
                image_pull_secret: None,
                overrides: Some(&overrides),
                overrides_hash: "0123456789abcdef",
            },
        )
        .unwrap();
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[OVERRIDES_ANNOTATION],
            "0123456789abcdef"
        );
        let spec = serde_json::to_value(pod.spec.unwrap()).unwrap();
        assert_eq!(spec["serviceAccountName"], "fn-runner");
        assert_eq!(
            spec["securityContext"],
            serde_json::json!({"runAsUser": 1000})
        );
        assert_eq!(
            spec["initContainers"][0]["resources"],
            serde_json::json!({"requests": {"cpu": "10m"}})
        );
        let function = &spec["containers"][0];
        assert_eq!(
            function["resources"],
            serde_json::json!({"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}}),
            "limits replaced, requests kept"
        );
        assert_eq!(
            function["env"],
            serde_json::json!([{"name": "NEW", "value": "y"}])
        );
    }
}
