//! The Kubernetes requests the pool makes: only on the cold path (creating, deleting, adopting
//! and scanning pods), never per warm call.

use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, PodTemplate, PodTemplateSpec, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Error};

use crate::config::{ConnectVia, Settings};
use crate::template::{
    self, BASE_TEMPLATE_NAME, INLINE_TEMPLATE_VERSION, OWNER_LABEL, RunnerPod, inline_template,
};

pub struct Cluster {
    client: Client,
    /// The Pod this runner runs in, when known.
    runner: Option<RunnerPod>,
    pods: Api<Pod>,
    services: Api<Service>,
    templates: Api<PodTemplate>,
    secrets: Api<Secret>,
    namespace: String,
    owner: String,
    connect_via: ConnectVia,
}

/// The Secret type and key image pull secrets have.
const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

/// How often a starting pod's status is read.
const READY_POLL: Duration = Duration::from_millis(100);

fn is_status(error: &Error, code: u16) -> bool {
    matches!(error, Error::Api(status) if status.code == code)
}

impl Cluster {
    pub fn new(client: Client, settings: &Settings) -> Self {
        let namespace = settings.namespace.as_str();
        Self {
            client: client.clone(),
            runner: None,
            pods: Api::namespaced(client.clone(), namespace),
            services: Api::namespaced(client.clone(), namespace),
            templates: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            owner: settings.owner.clone(),
            connect_via: settings.connect_via,
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn runner(&self) -> Option<&RunnerPod> {
        self.runner.as_ref()
    }

    /// Learns the Pod this runner runs in, as the downward API tells it: `name` (`POD_NAME`),
    /// `namespace` (`POD_NAMESPACE`; default: the client's, which in a cluster is the service
    /// account's) and `uid` (`POD_UID`; default: read from the Pod).
    pub async fn identify(
        &mut self,
        name: String,
        namespace: Option<String>,
        uid: Option<String>,
    ) -> Result<(), String> {
        let namespace = namespace.unwrap_or_else(|| self.client.default_namespace().to_owned());
        let uid = match uid {
            Some(uid) => uid,
            None => Api::<Pod>::namespaced(self.client.clone(), &namespace)
                .get(&name)
                .await
                .map_err(|e| format!("cannot read this runner's pod {namespace}/{name}: {e}"))?
                .metadata
                .uid
                .ok_or_else(|| format!("this runner's pod {namespace}/{name} has no uid"))?,
        };
        self.runner = Some(RunnerPod {
            namespace,
            name,
            uid,
        });
        Ok(())
    }

    /// Whether the runner Pod `key` (`<namespace>/<name>`) with `uid` is gone: deleted, or
    /// replaced by another Pod of that name. `false` when that cannot be known (the API failed).
    pub async fn runner_gone(&self, key: &str, uid: &str) -> bool {
        let Some((namespace, name)) = key.split_once('/') else {
            return false;
        };
        match Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
        {
            Ok(None) => true,
            Ok(Some(pod)) => pod.metadata.uid.as_deref() != Some(uid),
            Err(error) => {
                tracing::warn!(
                    runner = key,
                    "cannot tell whether a runner pod is gone: {error}"
                );
                false
            }
        }
    }

    /// The base template and its version: `PodTemplate/base-pod-template` if it exists.
    pub async fn base_template(
        &self,
        wrapper_server_image: &str,
    ) -> Result<(PodTemplateSpec, String), String> {
        match self.templates.get_opt(BASE_TEMPLATE_NAME).await {
            Ok(Some(template)) => {
                let version = template
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default();
                let spec = template
                    .template
                    .ok_or_else(|| format!("PodTemplate {BASE_TEMPLATE_NAME} has no template"))?;
                Ok((spec, version))
            }
            Ok(None) => Ok((
                inline_template(wrapper_server_image),
                INLINE_TEMPLATE_VERSION.to_owned(),
            )),
            Err(error) => Err(format!(
                "cannot read PodTemplate {BASE_TEMPLATE_NAME}: {error}"
            )),
        }
    }

    /// Makes Secret `name` a `kubernetes.io/dockerconfigjson` Secret holding `docker_config`:
    /// created when missing, updated when its content differs (Porch's `InspectOrCreateSecret`).
    /// A Secret of that name and another type is an error: the type cannot be changed.
    pub async fn ensure_pull_secret(&self, name: &str, docker_config: &[u8]) -> Result<(), String> {
        let wanted = BTreeMap::from([(
            DOCKER_CONFIG_JSON_KEY.to_owned(),
            ByteString(docker_config.to_vec()),
        )]);
        // A conflict means another runner changed it meanwhile: look again.
        for _ in 0..3 {
            let outcome = match self.secrets.get_opt(name).await {
                Ok(None) => {
                    let secret = Secret {
                        metadata: ObjectMeta {
                            name: Some(name.to_owned()),
                            namespace: Some(self.namespace.clone()),
                            ..Default::default()
                        },
                        type_: Some(DOCKER_CONFIG_JSON_TYPE.to_owned()),
                        data: Some(wanted.clone()),
                        ..Default::default()
                    };
                    self.secrets.create(&manager(), &secret).await.map(|_| ())
                }
                Ok(Some(existing)) => {
                    let kind = existing.type_.as_deref().unwrap_or("Opaque");
                    if kind != DOCKER_CONFIG_JSON_TYPE {
                        return Err(format!(
                            "Secret {name} exists with type {kind}, not {DOCKER_CONFIG_JSON_TYPE}: \
                             delete it or choose another registry_auth_secret_name"
                        ));
                    }
                    if existing.data.as_ref() == Some(&wanted) {
                        return Ok(());
                    }
                    tracing::info!(secret = name, "updating the registry pull secret");
                    let updated = Secret {
                        data: Some(wanted.clone()),
                        string_data: None,
                        ..existing
                    };
                    self.secrets
                        .replace(name, &manager(), &updated)
                        .await
                        .map(|_| ())
                }
                Err(error) => Err(error),
            };
            match outcome {
                Ok(()) => return Ok(()),
                Err(error) if is_status(&error, 409) => continue,
                Err(error) => return Err(format!("cannot ensure Secret {name}: {error}")),
            }
        }
        Err(format!(
            "cannot ensure Secret {name}: it kept changing while being written"
        ))
    }

    /// Creates the pod, then its service (owned by the pod).
    pub async fn create(&self, pod: &Pod) -> Result<(), String> {
        let params = manager();
        let created = self
            .pods
            .create(&params, pod)
            .await
            .map_err(|e| format!("cannot create pod: {e}"))?;
        let name = created.metadata.name.unwrap_or_default();
        let uid = created.metadata.uid.unwrap_or_default();
        let service = template::service(&name, &self.namespace, &self.owner, &uid);
        match self.services.create(&params, &service).await {
            Ok(_) => Ok(()),
            Err(error) if is_status(&error, 409) => Ok(()),
            Err(error) => Err(format!("cannot create service: {error}")),
        }
    }

    /// Deletes a pod and its service; already gone is fine.
    pub async fn delete(&self, name: &str) {
        for outcome in [
            self.pods
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
            self.services
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ] {
            if let Err(error) = outcome
                && !is_status(&error, 404)
            {
                tracing::warn!(pod = name, "cannot delete: {error}");
            }
        }
    }

    /// Waits until the pod is Ready, then returns the address to call it at. `Ok(Err(_))` is a
    /// pod that was not ready by `until`.
    pub async fn wait_ready(
        &self,
        name: &str,
        until: Instant,
    ) -> Result<Result<String, String>, String> {
        loop {
            let pod = self
                .pods
                .get_opt(name)
                .await
                .map_err(|e| format!("cannot read pod {name}: {e}"))?
                .ok_or_else(|| format!("pod {name} was deleted while starting"))?;
            let status = pod.status.clone().unwrap_or_default();
            if status.phase.as_deref() == Some("Failed") {
                return Err(format!("pod {name} failed: {}", describe_failure(&pod)));
            }
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready && let Some(address) = self.address(name, &pod).await? {
                return Ok(Ok(address));
            }
            if Instant::now() + READY_POLL > until {
                return Ok(Err(format!(
                    "pod {name} was not ready in time (phase {}): {}",
                    status.phase.as_deref().unwrap_or("unknown"),
                    describe_failure(&pod)
                )));
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    async fn address(&self, name: &str, pod: &Pod) -> Result<Option<String>, String> {
        Ok(match self.connect_via {
            ConnectVia::PodIp => pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
            ConnectVia::ServiceDns => Some(format!("{name}.{}.svc.cluster.local", self.namespace)),
            ConnectVia::ServiceIp => self
                .services
                .get_opt(name)
                .await
                .map_err(|e| format!("cannot read service {name}: {e}"))?
                .and_then(|service| service.spec)
                .and_then(|spec| spec.cluster_ip)
                .filter(|ip| !ip.is_empty() && ip != "None"),
        })
    }

    /// The function pods of every runner in the namespace (by owner label).
    pub async fn function_pods(&self) -> Result<Vec<Pod>, String> {
        self.pods
            .list(&ListParams::default().labels(OWNER_LABEL))
            .await
            .map(|list| list.items)
            .map_err(|e| format!("cannot list pods: {e}"))
    }

    /// The address of an adopted, ready pod.
    pub async fn ready_address(&self, pod: &Pod) -> Option<String> {
        let name = pod.metadata.name.as_deref()?;
        let ready = pod
            .status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if !ready || pod.metadata.deletion_timestamp.is_some() {
            return None;
        }
        self.address(name, pod).await.ok().flatten()
    }
}

/// Porch's field manager, for everything the runner creates.
fn manager() -> PostParams {
    PostParams {
        field_manager: Some("krm-function-runner".into()),
        ..Default::default()
    }
}

/// The most useful words about why a pod is not running: waiting or terminated reasons.
fn describe_failure(pod: &Pod) -> String {
    let status = pod.status.clone().unwrap_or_default();
    let reasons: Vec<String> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| {
            let state = c.state.as_ref()?;
            if let Some(waiting) = &state.waiting {
                return Some(format!(
                    "{}: {} {}",
                    c.name,
                    waiting.reason.as_deref().unwrap_or("waiting"),
                    waiting.message.as_deref().unwrap_or("")
                ));
            }
            state.terminated.as_ref().map(|t| {
                format!(
                    "{}: exited {} {}",
                    c.name,
                    t.exit_code,
                    t.message.as_deref().or(t.reason.as_deref()).unwrap_or("")
                )
            })
        })
        .collect();
    if reasons.is_empty() {
        status
            .message
            .unwrap_or_else(|| "no container status yet".to_owned())
    } else {
        reasons.join("; ")
    }
}
