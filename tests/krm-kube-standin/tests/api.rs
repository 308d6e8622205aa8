//! API semantics of the stand-in, exercised through kube-rs (the client the pod evaluator
//! plugin uses), so each test proves both the behaviour and that kube-rs understands the wire
//! format. No podman needed: no node agent runs here.

mod common;

use common::{api_error, client, eventually, namespace, start};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use std::time::Duration;

fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "127.0.0.1:5000/x:1"}]},
    }))
    .unwrap()
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

/// Why: the plugin creates, reads, updates and deletes pods, services and templates, and relies
/// on AlreadyExists / NotFound / Conflict / Invalid being told apart.
#[tokio::test]
async fn crud_resource_versions_and_errors() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "crud").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "crud");

    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"k": "1"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();

    let (code, reason) = api_error(
        cms.create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    let (code, reason) = api_error(cms.get("missing").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(cms.get_opt("missing").await.unwrap().is_none());

    // Update with the current resourceVersion works and bumps it; a stale one conflicts.
    let mut upd = created.clone();
    upd.data = Some([("k".to_string(), "2".to_string())].into());
    let updated = cms
        .replace("a", &PostParams::default(), &upd)
        .await
        .unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1, "resourceVersion is monotonic");
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    let (code, reason) = api_error(
        cms.replace("a", &PostParams::default(), &upd)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    // A merge patch carrying a stale resourceVersion conflicts too.
    let stale = json!({"metadata": {"resourceVersion": rv1.to_string()}, "data": {"k": "3"}});
    let (code, _) = api_error(
        cms.patch("a", &PatchParams::default(), &Patch::Merge(&stale))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 409);

    // generateName
    let gen_cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let g = cms.create(&PostParams::default(), &gen_cm).await.unwrap();
    let gname = g.metadata.name.unwrap();
    assert!(gname.starts_with("gen-") && gname.len() == 9, "{gname}");

    // Validation: a pod without containers is Invalid (422); a bad name too.
    let pods: Api<Pod> = Api::namespaced(c.clone(), "crud");
    let bad: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": []}}))
            .unwrap();
    let (code, reason) = api_error(pods.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    let (code, _) = api_error(
        cms.create(&PostParams::default(), &cm("Bad_Name", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);

    // Namespaces must exist.
    let nowhere: Api<ConfigMap> = Api::namespaced(c.clone(), "nowhere");
    let (code, _) = api_error(
        nowhere
            .create(&PostParams::default(), &cm("x", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 404);

    // dryRun creates nothing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cms.create(&dry, &cm("dry", json!({}))).await.unwrap();
    assert!(cms.get_opt("dry").await.unwrap().is_none());

    // Delete without finalizers removes at once (kube-rs sees a Status: Right).
    let del = cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(del.is_right(), "immediate deletion answers with a Status");
    assert!(cms.get_opt("a").await.unwrap().is_none());

    // Pods default like a real API server's.
    let p = pods
        .create(&PostParams::default(), &pod("p1", json!({})))
        .await
        .unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
}

/// Why: the plugin finds its pods by label (`fn.kpt.dev/image=...`), adoption lists with
/// `exists`, and field selectors pin names and phases.
#[tokio::test]
async fn label_and_field_selectors() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "sel").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "sel");
    for (n, labels) in [
        ("a", json!({"app": "web", "tier": "front"})),
        ("b", json!({"app": "db", "tier": "back"})),
        ("c", json!({"app": "web"})),
    ] {
        pods.create(&PostParams::default(), &pod(n, labels))
            .await
            .unwrap();
    }
    let names = |sel: &'static str| {
        let pods = pods.clone();
        async move {
            let mut v: Vec<String> = pods
                .list(&ListParams::default().labels(sel))
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|p| p.metadata.name.unwrap())
                .collect();
            v.sort();
            v
        }
    };
    assert_eq!(names("app=web").await, ["a", "c"]);
    assert_eq!(names("app==web").await, ["a", "c"]);
    assert_eq!(names("app!=web").await, ["b"]);
    assert_eq!(names("app in (db,web),tier").await, ["a", "b"]);
    assert_eq!(names("tier notin (front)").await, ["b", "c"]);
    assert_eq!(names("!tier").await, ["c"]);
    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(by_name.items.len(), 1);
    let running = pods
        .list(&ListParams::default().fields("status.phase=Running"))
        .await
        .unwrap();
    assert!(running.items.is_empty());
    let pending = pods
        .list(&ListParams::default().fields("status.phase=Pending,metadata.namespace=sel"))
        .await
        .unwrap();
    assert_eq!(pending.items.len(), 3);
    let (code, _) = api_error(
        pods.list(&ListParams::default().labels("a in ("))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 400);

    // Paging: limit + continue.
    let first = pods.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("continue token");
    let rest = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert!(rest.metadata.continue_.as_deref().unwrap_or("").is_empty());

    // All namespaces.
    let all: Api<Pod> = Api::all(c.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
}

async fn next_event<K: Clone + std::fmt::Debug>(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .expect("a watch event within 10 s")
            .expect("stream open")
            .expect("event decodes");
        if !matches!(ev, WatchEvent::Bookmark(_)) {
            return ev;
        }
    }
}

/// Why: readiness and adoption watch pods; kube-rs' watcher resumes from a resourceVersion.
#[tokio::test]
async fn watch_added_modified_deleted_and_resume() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "w").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "w");
    let list = cms.list(&ListParams::default()).await.unwrap();
    let rv0 = list.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default().labels("watched=yes"), &rv0)
        .await
        .unwrap()
        .boxed();

    let mut obj = cm("x", json!({"a": "1"}));
    obj.metadata.labels = Some([("watched".to_string(), "yes".to_string())].into());
    cms.create(&PostParams::default(), &obj).await.unwrap();
    cms.create(&PostParams::default(), &cm("unwatched", json!({})))
        .await
        .unwrap();
    match next_event(&mut s).await {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("x")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    let patched = cms
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap();
    let rv_after_patch = patched.metadata.resource_version.clone().unwrap();
    match next_event(&mut s).await {
        WatchEvent::Modified(o) => assert_eq!(o.data.unwrap()["a"], "2"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    // Leaving the selector looks like a deletion to this watcher.
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"watched": "no"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Deleted(_)));
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"watched": "yes"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    cms.delete("x", &DeleteParams::default()).await.unwrap();
    match next_event(&mut s).await {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("x")),
        other => panic!("expected DELETED, got {other:?}"),
    }

    // Resuming from an older resourceVersion replays what came after it, in order.
    let mut resumed = cms
        .watch(&WatchParams::default(), &rv_after_patch)
        .await
        .unwrap()
        .boxed();
    let mut kinds = Vec::new();
    for _ in 0..3 {
        kinds.push(match next_event(&mut resumed).await {
            WatchEvent::Added(_) => "A",
            WatchEvent::Modified(_) => "M",
            WatchEvent::Deleted(_) => "D",
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(kinds, ["M", "M", "D"]);

    // kube-runtime's watcher (list then watch, the plugin's likely use) sees objects too.
    let stream = kube::runtime::watcher(cms.clone(), kube::runtime::watcher::Config::default());
    let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
    let first = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("unwatched"));
    cms.create(&PostParams::default(), &cm("later", json!({})))
        .await
        .unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(second.metadata.name.as_deref(), Some("later"));

    // The streaming-list flavour (sendInitialEvents + initial-events-end bookmark) works too.
    let cfg = kube::runtime::watcher::Config::default().streaming_lists();
    let stream = kube::runtime::watcher(cms.clone(), cfg);
    let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
    let mut seen = Vec::new();
    for _ in 0..2 {
        let o = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push(o.metadata.name.unwrap());
    }
    seen.sort();
    assert_eq!(seen, ["later", "unwatched"]);
}

/// Why: the plugin deletes pods and must see them linger until terminated; the FunctionConfig
/// reconciler puts finalizers on its objects.
#[tokio::test]
async fn graceful_deletion_and_finalizers() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "gd").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "gd");
    let mut obj = cm("f", json!({}));
    obj.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &obj).await.unwrap();
    let del = cms.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = del.left().expect("deletion in progress");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(
        cms.get("f")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        cms.get_opt("f").await.unwrap().is_none(),
        "gone once finalizers are cleared"
    );

    // A pod bound to a node terminates gracefully: it stays, marked, until the node (or a
    // forced delete) confirms.
    let pods: Api<Pod> = Api::namespaced(c.clone(), "gd");
    let mut bound = pod("bound", json!({}));
    bound.spec.as_mut().unwrap().node_name = Some("elsewhere".into());
    pods.create(&PostParams::default(), &bound).await.unwrap();
    let d = pods
        .delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let p = d.left().expect("graceful");
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pods.get_opt("bound").await.unwrap().is_some());
    let d = pods
        .delete(
            "bound",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(d.is_right());
    assert!(pods.get_opt("bound").await.unwrap().is_none());

    // An unscheduled pod goes at once.
    pods.create(&PostParams::default(), &pod("loose", json!({})))
        .await
        .unwrap();
    assert!(
        pods.delete("loose", &DeleteParams::default())
            .await
            .unwrap()
            .is_right()
    );

    // Preconditions.
    pods.create(&PostParams::default(), &pod("pre", json!({})))
        .await
        .unwrap();
    let (code, _) = api_error(
        pods.delete(
            "pre",
            &DeleteParams::default().preconditions(kube::api::Preconditions {
                uid: Some("not-the-uid".into()),
                resource_version: None,
            }),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 409);

    // deletecollection with a selector.
    for n in ["k1", "k2"] {
        pods.create(&PostParams::default(), &pod(n, json!({"kill": "yes"})))
            .await
            .unwrap();
    }
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("kill=yes"),
    )
    .await
    .unwrap();
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["pre"]);

    // Deleting a namespace deletes its content, then the namespace.
    let nss: Api<Namespace> = Api::all(c.clone());
    nss.delete("gd", &DeleteParams::default()).await.unwrap();
    eventually(5, "namespace gone", || {
        let nss = nss.clone();
        async move { nss.get_opt("gd").await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// Why: kube-rs sends four patch content types; the plugin uses merge patches (labels,
/// finalizers, status), may use strategic merge on pods, JSON patch, and server-side apply.
#[tokio::test]
async fn every_patch_type() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "p").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "p");
    let mut p = pod("p", json!({"a": "1"}));
    p.spec
        .as_mut()
        .unwrap()
        .containers
        .push(serde_json::from_value(json!({"name": "side", "image": "i:2"})).unwrap());
    pods.create(&PostParams::default(), &p).await.unwrap();

    // Merge patch replaces lists wholesale; strategic merges containers by name.
    let smp = json!({"metadata": {"labels": {"b": "2"}}, "spec": {"containers": [{"name": "main", "image": "new:1"}]}});
    let out = pods
        .patch("p", &PatchParams::default(), &Patch::Strategic(&smp))
        .await
        .unwrap();
    let cs = out.spec.unwrap().containers;
    assert_eq!(cs.len(), 2, "strategic merge keeps the other container");
    assert_eq!(cs[0].image.as_deref(), Some("new:1"));
    assert_eq!(out.metadata.labels.unwrap().len(), 2);

    let mp = json!({"metadata": {"labels": {"a": null}, "annotations": {"x": "y"}}});
    let out = pods
        .patch("p", &PatchParams::default(), &Patch::Merge(&mp))
        .await
        .unwrap();
    assert!(!out.metadata.labels.unwrap().contains_key("a"));
    assert_eq!(out.metadata.annotations.unwrap()["x"], "y");

    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels/c", "value": "3"},
        {"op": "test", "path": "/metadata/labels/b", "value": "2"},
    ]))
    .unwrap();
    let out = pods
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(out.metadata.labels.unwrap()["c"], "3");
    let failing: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/metadata/labels/b", "value": "nope"}]),
    )
    .unwrap();
    let (code, _) = api_error(
        pods.patch("p", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);

    // Server-side apply creates when missing and merges when present.
    let svcs: Api<Service> = Api::namespaced(c.clone(), "p");
    let ssa = PatchParams::apply("krm-function-runner").force();
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 9446}], "selector": {"fn.kpt.dev/image": "x"}}});
    let created = svcs.patch("s", &ssa, &Patch::Apply(&svc)).await.unwrap();
    let ip = created.spec.as_ref().unwrap().cluster_ip.clone().unwrap();
    assert!(ip.starts_with("127.0.1."), "cluster IP {ip}");
    let svc2 = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"l": "v"}}});
    let applied = svcs.patch("s", &ssa, &Patch::Apply(&svc2)).await.unwrap();
    assert_eq!(applied.metadata.labels.unwrap()["l"], "v");
    assert_eq!(
        applied.spec.unwrap().cluster_ip.unwrap(),
        ip,
        "cluster IP is kept"
    );

    // Patching the status subresource leaves the spec alone; patching the main resource leaves
    // status alone.
    let st = json!({"status": {"phase": "Running", "podIP": "127.0.0.99"}, "spec": {"nodeName": "ignored"}});
    let out = pods
        .patch_status("p", &PatchParams::default(), &Patch::Merge(&st))
        .await
        .unwrap();
    assert_eq!(
        out.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert!(out.spec.unwrap().node_name.is_none());
    let out = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await
        .unwrap();
    assert_eq!(out.status.unwrap().phase.as_deref(), Some("Running"));
}

fn function_config_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "functionconfigs.config.porch.kpt.dev"},
        "spec": {
            "group": "config.porch.kpt.dev",
            "names": {"kind": "FunctionConfig", "listKind": "FunctionConfigList",
                      "plural": "functionconfigs", "singular": "functionconfig"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "FnRunner Applied", "type": "integer", "jsonPath": ".status.functionRunnerObservedGeneration"}],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "image": {"type": "string"},
                        "podExecutor": {"type": "object", "properties": {
                            "timeToLive": {"type": "string", "default": "30m"}}}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
            }],
        },
    })
}

/// Why: the FunctionConfig issue registers its CRD and reconciles CRs (generation, status
/// subresource, finalizers); the plugin reads them with a dynamic or derived client.
#[tokio::test]
async fn crd_registration_and_custom_resources() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "porch-fn-system").await;
    let crds: Api<DynamicObject> = Api::all_with(
        c.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(function_config_crd()).unwrap();
    let created = crds.create(&PostParams::default(), &crd).await.unwrap();
    let conds = &created.data["status"]["conditions"];
    assert!(
        conds
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    );

    // Discovery sees the new group.
    let discovery = kube::Discovery::new(c.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .find(|g| g.name() == "config.porch.kpt.dev")
        .expect("group discovered")
        .recommended_kind("FunctionConfig")
        .expect("kind discovered");
    assert_eq!(ar.plural, "functionconfigs");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));

    let fcs: Api<DynamicObject> = Api::namespaced_with(c.clone(), "porch-fn-system", &ar);
    let fc: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "config.porch.kpt.dev/v1alpha1", "kind": "FunctionConfig",
        "metadata": {"name": "set-namespace"},
        "spec": {"image": "set-namespace", "podExecutor": {"tags": ["v0.4.1"]}},
        "status": {"error": "dropped on create? no: kept, as the API server keeps it"},
    }))
    .unwrap();
    let created = fcs.create(&PostParams::default(), &fc).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(
        created.data["spec"]["podExecutor"]["timeToLive"], "30m",
        "schema default applied"
    );

    // Metadata-only change: generation unchanged. Spec change: generation + 1.
    let out = fcs
        .patch("set-namespace", &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["config.porch.kpt.dev/functionconfig-function-runner"]}})))
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(1));
    let out = fcs
        .patch(
            "set-namespace",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"prefixes": [""]}})),
        )
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(2));

    // Status subresource: status patch changes status only, and not the generation.
    let out = fcs
        .patch_status("set-namespace", &PatchParams::default(),
            &Patch::Merge(json!({"status": {"functionRunnerObservedGeneration": 2, "error": ""}, "spec": {"image": "ignored"}})))
        .await
        .unwrap();
    assert_eq!(out.metadata.generation, Some(2));
    assert_eq!(out.data["status"]["functionRunnerObservedGeneration"], 2);
    assert_eq!(out.data["spec"]["image"], "set-namespace");
    // ...and main-resource writes keep status.
    let out = fcs
        .patch(
            "set-namespace",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"error": "nope"}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data["status"]["error"], "");
    let got = fcs.get_status("set-namespace").await.unwrap();
    assert_eq!(got.data["status"]["functionRunnerObservedGeneration"], 2);

    // Strategic merge patch is not for custom resources (415), as on a real server.
    let (code, _) = api_error(
        fcs.patch(
            "set-namespace",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 415);

    // Finalizer blocks deletion until removed.
    assert!(
        fcs.delete("set-namespace", &DeleteParams::default())
            .await
            .unwrap()
            .is_left()
    );
    fcs.patch(
        "set-namespace",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert!(fcs.get_opt("set-namespace").await.unwrap().is_none());

    // Deleting the CRD unregisters the type.
    fcs.create(&PostParams::default(), &fc).await.unwrap();
    crds.delete(
        "functionconfigs.config.porch.kpt.dev",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    let (code, _) = api_error(fcs.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(code, 404);
}

/// Why: Porch's readiness check reads the Service's v1 Endpoints; the plugin may read
/// EndpointSlices. Here pod status is written by hand (no node agent).
#[tokio::test]
async fn endpoints_and_slices_follow_ready_pods() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "ep").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "ep");
    let svcs: Api<Service> = Api::namespaced(c.clone(), "ep");
    let eps: Api<Endpoints> = Api::namespaced(c.clone(), "ep");
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "ep");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "fn"},
        "spec": {"selector": {"app": "fn"}, "ports": [{"port": 9446, "targetPort": 9446}]}}))
    .unwrap();
    svcs.create(&PostParams::default(), &svc).await.unwrap();
    let e = eps.get("fn").await.unwrap();
    assert!(e.subsets.unwrap_or_default().is_empty());

    pods.create(&PostParams::default(), &pod("fn-1", json!({"app": "fn"})))
        .await
        .unwrap();
    let ready = |r: &str| {
        json!({"status": {"phase": "Running", "podIP": "127.0.0.42",
        "conditions": [{"type": "Ready", "status": r}]}})
    };
    pods.patch_status(
        "fn-1",
        &PatchParams::default(),
        &Patch::Merge(ready("False")),
    )
    .await
    .unwrap();
    let e = eps.get("fn").await.unwrap();
    let s = &e.subsets.unwrap()[0];
    assert!(s.addresses.as_ref().is_none_or(|a| a.is_empty()));
    assert_eq!(s.not_ready_addresses.as_ref().unwrap()[0].ip, "127.0.0.42");

    pods.patch_status(
        "fn-1",
        &PatchParams::default(),
        &Patch::Merge(ready("True")),
    )
    .await
    .unwrap();
    let e = eps.get("fn").await.unwrap();
    let s = &e.subsets.unwrap()[0];
    let a = &s.addresses.as_ref().unwrap()[0];
    assert_eq!(a.ip, "127.0.0.42");
    assert_eq!(a.target_ref.as_ref().unwrap().name.as_deref(), Some("fn-1"));
    assert_eq!(s.ports.as_ref().unwrap()[0].port, 9446);
    let sl = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=fn"))
        .await
        .unwrap();
    assert_eq!(sl.items.len(), 1);
    let ep0 = &sl.items[0].endpoints.as_ref().unwrap()[0];
    assert_eq!(ep0.addresses, ["127.0.0.42"]);
    assert_eq!(ep0.conditions.as_ref().unwrap().ready, Some(true));

    pods.delete("fn-1", &DeleteParams::default()).await.unwrap();
    let e = eps.get("fn").await.unwrap();
    assert!(e.subsets.unwrap_or_default().is_empty());
    svcs.delete("fn", &DeleteParams::default()).await.unwrap();
    assert!(eps.get_opt("fn").await.unwrap().is_none());
    assert!(
        slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// Why: error bodies must be `Status` objects for kube-rs, and discovery must list the core
/// resources the plugin needs.
#[tokio::test]
async fn discovery_and_raw_status_bodies() {
    let env = start();
    let c = client(&env.standin).await;
    let v = c.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    let d = kube::Discovery::new(c.clone()).run().await.unwrap();
    let core = d.groups().find(|g| g.name() == "").expect("core group");
    let kinds: Vec<String> = core
        .recommended_resources()
        .into_iter()
        .map(|(ar, _)| ar.plural)
        .collect();
    for want in [
        "pods",
        "services",
        "endpoints",
        "podtemplates",
        "secrets",
        "namespaces",
        "events",
    ] {
        assert!(kinds.iter().any(|k| k == want), "{want} in {kinds:?}");
    }
    assert!(d.groups().any(|g| g.name() == "discovery.k8s.io"));
    let req = http::Request::get("/api/v1/namespaces/default/pods/nope")
        .body(Vec::new())
        .unwrap();
    let err = c.request_text(req).await.unwrap_err();
    let (code, reason) = api_error(err);
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
}

/// Why: leader election / ownership between runner replicas is built on Leases with
/// optimistic concurrency (replace with the read resourceVersion; the loser gets 409).
#[tokio::test]
async fn leases_with_optimistic_concurrency() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "lease").await;
    let leases: Api<Lease> = Api::namespaced(c.clone(), "lease");
    let l: Lease = serde_json::from_value(json!({
        "metadata": {"name": "runner"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"},
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &l).await.unwrap();
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let mut theirs = created.clone();
    theirs.spec.as_mut().unwrap().holder_identity = Some("c".into());
    leases
        .replace("runner", &PostParams::default(), &mine)
        .await
        .unwrap();
    let (code, reason) = api_error(
        leases
            .replace("runner", &PostParams::default(), &theirs)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    let got = leases.get("runner").await.unwrap();
    assert_eq!(got.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

/// Why: the pod evaluator's benchmark and tests count the API requests a warm call costs (the
/// target is zero), so the counter must see every request, failed ones included, and nothing else.
#[tokio::test]
async fn every_request_is_counted() {
    let env = start();
    let c = client(&env.standin).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let before = env.standin.api_requests();
    pods.list(&Default::default()).await.unwrap();
    pods.get_opt("absent").await.unwrap();
    pods.create(&PostParams::default(), &pod("counted", json!({})))
        .await
        .unwrap();
    assert_eq!(env.standin.api_requests() - before, 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        env.standin.api_requests() - before,
        3,
        "nothing counted while no one asks"
    );
}

/// Why: the pod evaluator makes its function pods dependents of the runner's Pod and each
/// Service a dependent of its pod; only a collector that deletes orphans shows that works.
#[tokio::test]
async fn garbage_collection_by_owner_references() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "gc").await;
    namespace(&c, "elsewhere").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "gc");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "gc");
    let services: Api<Service> = Api::namespaced(c.clone(), "gc");
    let pp = PostParams::default();
    let owner = pods.create(&pp, &pod("owner", json!({}))).await.unwrap();
    let owner_uid = owner.metadata.uid.clone().unwrap();
    let reference = |kind: &str, name: &str, uid: &str| json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": uid});
    let dependent = |name: &str, owners: Value| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": owners}}))
            .unwrap()
    };
    // A chain: owner Pod <- dependent Pod <- Service; and a ConfigMap with two owners.
    let mut child = pod("child", json!({}));
    child.metadata.owner_references = Some(vec![
        serde_json::from_value(reference("Pod", "owner", &owner_uid)).unwrap(),
    ]);
    let child = pods.create(&pp, &child).await.unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "child", "ownerReferences": [reference("Pod", "child", child.metadata.uid.as_deref().unwrap())]},
        "spec": {"ports": [{"port": 80}]},
    }))
    .unwrap();
    services.create(&pp, &service).await.unwrap();
    let other = cms.create(&pp, &cm("other", json!({}))).await.unwrap();
    cms.create(
        &pp,
        &dependent(
            "two-owners",
            json!([
                reference("Pod", "owner", &owner_uid),
                reference("ConfigMap", "other", other.metadata.uid.as_deref().unwrap())
            ]),
        ),
    )
    .await
    .unwrap();
    // Owners of unknown kinds count as present.
    cms.create(
        &pp,
        &dependent("unknown-kind", json!([reference("Gadget", "g", "1")])),
    )
    .await
    .unwrap();

    // Owners that are absent from the start: a wrong uid, or another namespace (where the
    // real collector does not look either).
    cms.create(
        &pp,
        &dependent(
            "wrong-uid",
            json!([reference("Pod", "owner", "not-its-uid")]),
        ),
    )
    .await
    .unwrap();
    let elsewhere: Api<Pod> = Api::namespaced(c.clone(), "elsewhere");
    let far = elsewhere.create(&pp, &pod("far", json!({}))).await.unwrap();
    cms.create(
        &pp,
        &dependent(
            "cross-namespace",
            json!([reference(
                "Pod",
                "far",
                far.metadata.uid.as_deref().unwrap()
            )]),
        ),
    )
    .await
    .unwrap();
    for name in ["wrong-uid", "cross-namespace"] {
        assert!(cms.get_opt(name).await.unwrap().is_none(), "{name}");
    }

    // Deleting the owner deletes the chain, and not what another owner still holds.
    pods.delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    assert!(pods.get_opt("child").await.unwrap().is_none());
    assert!(services.get_opt("child").await.unwrap().is_none());
    for name in ["two-owners", "unknown-kind", "other"] {
        assert!(cms.get_opt(name).await.unwrap().is_some(), "{name}");
    }
    cms.delete("other", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("two-owners").await.unwrap().is_none());
}

/// Why: the pod evaluator must survive a restarting API server; the stand-in must cut every
/// connection, watches included, and serve the same objects again afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_outage_cuts_connections_and_keeps_objects() {
    let env = start();
    let c = client(&env.standin).await;
    namespace(&c, "outage").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "outage");
    cms.create(&PostParams::default(), &cm("kept", json!({"k": "v"})))
        .await
        .unwrap();
    let mut watch = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        watch.try_next().await.unwrap(),
        Some(WatchEvent::Added(_))
    ));

    let standin = &env.standin;
    tokio::task::block_in_place(|| standin.stop_api());
    assert!(
        std::net::TcpStream::connect(standin.addr).is_err(),
        "the port refuses connections"
    );
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.try_next())
        .await
        .expect("the watch is cut at once");
    assert!(!matches!(ended, Ok(Some(_))), "{ended:?}");
    assert!(cms.get("kept").await.is_err());

    tokio::task::block_in_place(|| standin.start_api());
    let kept = cms.get("kept").await.expect("served again");
    assert_eq!(kept.data.unwrap()["k"], "v");
}
