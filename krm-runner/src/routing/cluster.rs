//! The cluster source: FunctionConfigs in one namespace, watched with kube-rs as Porch's
//! runner-side reconciler does. The runner puts its finalizer on each object, takes it off when
//! the object is deleted, and reports in `status` the generation it applied or why it could not,
//! and what each ahead-of-time round found (conditions and executors, see `status`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures_util::StreamExt;
use krm_runner_function_config::{
    FunctionConfig, FunctionConfigStatus, Source, Sourced, config_file,
};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::{Report, Router, Store, status};
use crate::config::ClusterSource;

/// Porch's runner-side finalizer.
const FINALIZER: &str = "config.porch.kpt.dev/functionconfig-function-runner";

/// Connects to the cluster named by `source` (or in-cluster / `KUBECONFIG`).
pub async fn client(source: &ClusterSource) -> Result<kube::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match &source.kubeconfig {
        Some(path) => {
            let problem = |e: &dyn std::fmt::Display| {
                format!("function_configs.cluster.kubeconfig: {}: {e}", path.display())
            };
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| problem(&e))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| problem(&e))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            format!("function_configs.cluster: no Kubernetes configuration (in-cluster or KUBECONFIG): {e}")
        })?,
    };
    kube::Client::try_from(config).map_err(|e| format!("function_configs.cluster: {e}"))
}

/// Watches until the process ends; `synced` fires once the first full list is applied.
pub async fn watch(
    store: Arc<Store>,
    writer: Arc<StatusWriter>,
    synced: tokio::sync::oneshot::Sender<()>,
) {
    let api = &writer.api;
    let mut synced = Some(synced);
    let mut listed = Vec::new();
    let mut events = watcher::watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(object)) => {
                listed.push(key(&object));
                apply(&store, &writer, object).await;
            }
            Ok(Event::InitDone) => {
                store.retain_cluster_objects(&listed);
                writer.retain(&listed).await;
                if let Some(synced) = synced.take() {
                    let _ = synced.send(());
                }
            }
            Ok(Event::Apply(object)) => apply(&store, &writer, object).await,
            Ok(Event::Delete(object)) => {
                let key = key(&object);
                store.remove_cluster_object(&key);
                writer.forget(&key).await;
            }
            Err(error) => {
                tracing::warn!(namespace = %writer.namespace, "watching FunctionConfigs: {error}")
            }
        }
    }
}

fn key(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default()
    )
}

async fn apply(store: &Store, writer: &StatusWriter, object: DynamicObject) {
    let api = &writer.api;
    let key = key(&object);
    let name = object.metadata.name.clone().unwrap_or_default();
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    let ours = finalizers.iter().any(|f| f == FINALIZER);
    if object.metadata.deletion_timestamp.is_some() {
        store.remove_cluster_object(&key);
        writer.forget(&key).await;
        if ours {
            let remaining: Vec<_> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
            patch_finalizers(api, &name, &finalizers, &remaining).await;
        }
        return;
    }
    if !ours {
        let mut with_ours: Vec<_> = finalizers.iter().collect();
        let finalizer = FINALIZER.to_owned();
        with_ours.push(&finalizer);
        patch_finalizers(api, &name, &finalizers, &with_ours).await;
    }
    let generation = object.metadata.generation;
    let previous: FunctionConfigStatus = object
        .data
        .get("status")
        .and_then(|status| config_file::from_json_value(status.clone()).ok())
        .unwrap_or_default();
    // Routing reads the spec: without the status and the version, a status write (this
    // runner's among them) does not count as a change and start another round.
    let mut routed = object;
    if let Some(data) = routed.data.as_object_mut() {
        data.remove("status");
    }
    routed.metadata.resource_version = None;
    routed.metadata.managed_fields = None;
    let decoded = serde_json::to_value(&routed)
        .map_err(|error| error.to_string())
        .and_then(|value| {
            config_file::from_json_value::<FunctionConfig>(value).map_err(|e| e.to_string())
        })
        .map_err(|error| format!("FunctionConfig {key} (cluster) is unreadable: {error}"))
        .and_then(|typed| Sourced::from_cluster(typed).map_err(|invalid| invalid.to_string()));
    let refusal = match decoded {
        Ok(sourced) => {
            let id = sourced.id();
            store.put_cluster_object(key.clone(), sourced);
            store
                .conflict_of(&id)
                .map(|conflict| ("Conflict", conflict))
        }
        Err(problem) => {
            tracing::error!("function_configs: {problem}; not applied");
            store.remove_cluster_object(&key);
            Some(("Invalid", problem))
        }
    };
    writer
        .applied(&key, &name, previous, generation, refusal)
        .await;
}

/// Writes the runner's part of each cluster FunctionConfig's status: the generation applied,
/// `error`, and what the ahead-of-time rounds found. Only what changed is written: a write
/// wakes every watcher of the object, this runner's included.
pub struct StatusWriter {
    api: Api<DynamicObject>,
    namespace: String,
    /// Each object's status as last seen (in a watch event, or in the answer to a write), by
    /// `namespace/name`. Held across a write, so that the watch's and the rounds' writes do not
    /// interleave.
    seen: tokio::sync::Mutex<HashMap<String, FunctionConfigStatus>>,
}

impl StatusWriter {
    pub fn new(client: kube::Client, namespace: String) -> Self {
        // Objects are decoded one by one: with a typed list, one object this runner cannot read
        // (e.g. a negative count, which Porch's CRD allows) would stop the whole watch.
        let resource = ApiResource::erase::<FunctionConfig>(&());
        Self {
            api: Api::namespaced_with(client, &namespace, &resource),
            namespace,
            seen: tokio::sync::Mutex::default(),
        }
    }

    /// Records `previous`, the status of an object just seen, and writes the generation applied
    /// and `error` (empty, or why the object is not applied: `refusal`, whose reason also goes
    /// into the conditions).
    async fn applied(
        &self,
        key: &str,
        name: &str,
        previous: FunctionConfigStatus,
        generation: Option<i64>,
        refusal: Option<(&str, String)>,
    ) {
        let mut seen = self.seen.lock().await;
        let mut wanted = FunctionConfigStatus {
            function_runner_observed_generation: generation,
            error: Some(
                refusal
                    .as_ref()
                    .map(|(_, why)| why.clone())
                    .unwrap_or_default(),
            ),
            ..previous.clone()
        };
        let mut patch = serde_json::json!({
            "functionRunnerObservedGeneration": wanted.function_runner_observed_generation,
            "error": wanted.error,
        });
        if let Some((reason, why)) = &refusal {
            wanted = status::refused(&wanted, reason, why, generation);
            patch["conditions"] = serde_json::json!(wanted.conditions);
            patch["executors"] = serde_json::json!(wanted.executors);
        }
        let written = self.write(key, name, &previous, &wanted, patch).await;
        seen.insert(key.to_owned(), written.unwrap_or(previous));
    }

    /// Writes what one ahead-of-time round found on each cluster object it worked out.
    pub async fn write_round(&self, router: &Router, reports: &[Report]) {
        let mut by_object: BTreeMap<String, Vec<&Report>> = BTreeMap::new();
        for report in reports
            .iter()
            .filter(|report| report.object.source == Source::Cluster)
        {
            let key = format!(
                "{}/{}",
                report.object.namespace.as_deref().unwrap_or_default(),
                report.object.name
            );
            by_object.entry(key).or_default().push(report);
        }
        for (key, reports) in by_object {
            let mut seen = self.seen.lock().await;
            let Some(previous) = seen.get(&key) else {
                continue;
            };
            // A round that started before the object changed leaves it to the next round (or,
            // for an object no longer applied, to the watch).
            let (object, generation) = (&reports[0].object, reports[0].generation);
            if !router.table().objects().any(|sourced| {
                sourced.id() == *object && sourced.object().metadata.generation == generation
            }) {
                continue;
            }
            let wanted = status::worked_out(previous, &reports, generation);
            let patch = serde_json::json!({
                "conditions": wanted.conditions,
                "executors": wanted.executors,
            });
            let name = object.name.clone();
            if let Some(written) = self.write(&key, &name, previous, &wanted, patch).await {
                seen.insert(key, written);
            }
        }
    }

    /// Patches `status` with `patch` when `wanted` differs from `previous`; the status the API
    /// answers with, when written.
    async fn write(
        &self,
        key: &str,
        name: &str,
        previous: &FunctionConfigStatus,
        wanted: &FunctionConfigStatus,
        patch: serde_json::Value,
    ) -> Option<FunctionConfigStatus> {
        if wanted == previous {
            return None;
        }
        let patch = serde_json::json!({ "status": patch });
        match self
            .api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(object) => Some(
                object
                    .data
                    .get("status")
                    .and_then(|status| config_file::from_json_value(status.clone()).ok())
                    .unwrap_or_else(|| wanted.clone()),
            ),
            Err(error) => {
                tracing::warn!(%key, "cannot update the FunctionConfig's status: {error}");
                None
            }
        }
    }

    /// Forgets the objects not in `keys` (after a full re-list).
    async fn retain(&self, keys: &[String]) {
        self.seen.lock().await.retain(|key, _| keys.contains(key));
    }

    /// Forgets a deleted object.
    async fn forget(&self, key: &str) {
        self.seen.lock().await.remove(key);
    }
}

/// Replaces the finalizer list, guarded by a test of the list as read: a concurrent change makes
/// the patch fail (and the next event retries) instead of being overwritten.
async fn patch_finalizers(
    api: &Api<DynamicObject>,
    name: &str,
    read: &[String],
    wanted: &[&String],
) {
    // Adding the list where there is none cannot be guarded by a test of it.
    let mut operations = Vec::new();
    if !read.is_empty() {
        operations
            .push(serde_json::json!({"op": "test", "path": "/metadata/finalizers", "value": read}));
    }
    operations
        .push(serde_json::json!({"op": "add", "path": "/metadata/finalizers", "value": wanted}));
    let patch: json_patch::Patch =
        match serde_json::from_value(serde_json::Value::Array(operations)) {
            Ok(patch) => patch,
            Err(error) => {
                tracing::error!("building the finalizer patch: {error}");
                return;
            }
        };
    if let Err(error) = api
        .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        tracing::warn!(
            name,
            "cannot update the FunctionConfig's finalizers: {error}"
        );
    }
}
