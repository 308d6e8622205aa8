//! The cluster source: FunctionConfigs in one namespace, watched with kube-rs as Porch's
//! runner-side reconciler does. The runner puts its finalizer on each object, takes it off when
//! the object is deleted, and reports in `status` the generation it applied or why it could not.

use std::sync::Arc;

use futures_util::StreamExt;
use krm_runner_function_config::{FunctionConfig, FunctionConfigStatus, Sourced, config_file};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::Store;
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
    client: kube::Client,
    namespace: String,
    synced: tokio::sync::oneshot::Sender<()>,
) {
    // Objects are decoded one by one: with a typed list, one object this runner cannot read
    // (e.g. a negative count, which Porch's CRD allows) would stop the whole watch.
    let resource = ApiResource::erase::<FunctionConfig>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
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
                apply(&store, &api, object).await;
            }
            Ok(Event::InitDone) => {
                store.retain_cluster_objects(&listed);
                if let Some(synced) = synced.take() {
                    let _ = synced.send(());
                }
            }
            Ok(Event::Apply(object)) => apply(&store, &api, object).await,
            Ok(Event::Delete(object)) => store.remove_cluster_object(&key(&object)),
            Err(error) => tracing::warn!(%namespace, "watching FunctionConfigs: {error}"),
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

async fn apply(store: &Store, api: &Api<DynamicObject>, object: DynamicObject) {
    let key = key(&object);
    let name = object.metadata.name.clone().unwrap_or_default();
    let finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    let ours = finalizers.iter().any(|f| f == FINALIZER);
    if object.metadata.deletion_timestamp.is_some() {
        store.remove_cluster_object(&key);
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
    let decoded = serde_json::to_value(&object)
        .map_err(|error| error.to_string())
        .and_then(|value| {
            config_file::from_json_value::<FunctionConfig>(value).map_err(|e| e.to_string())
        })
        .map_err(|error| format!("FunctionConfig {key} (cluster) is unreadable: {error}"))
        .and_then(|typed| Sourced::from_cluster(typed).map_err(|invalid| invalid.to_string()));
    let error = match decoded {
        Ok(sourced) => {
            let id = sourced.id();
            store.put_cluster_object(key.clone(), sourced);
            store.conflict_of(&id).unwrap_or_default()
        }
        Err(problem) => {
            tracing::error!("function_configs: {problem}; not applied");
            store.remove_cluster_object(&key);
            problem
        }
    };
    let status = FunctionConfigStatus {
        function_runner_observed_generation: generation,
        error: Some(error),
        ..previous.clone()
    };
    // Writing an unchanged status would wake every watcher, this one included, for nothing.
    if status != previous {
        let patch = serde_json::json!({"status": {
            "functionRunnerObservedGeneration": status.function_runner_observed_generation,
            "error": status.error,
        }});
        if let Err(error) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(%key, "cannot update the FunctionConfig's status: {error}");
        }
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
