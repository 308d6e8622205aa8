//! End to end with real containers: a scratch busybox image built with podman and pushed to a
//! local docker-registry, pods run by the node agent with podman, reached on their own loopback
//! addresses. Why: the pod evaluator's end-to-end tests depend on exactly this working (init
//! container filling an emptyDir, a served port on the pod IP, an exec readiness probe,
//! Endpoints following readiness, deletion stopping containers and freeing the address).
//!
//! Needs podman, runc, docker-registry and busybox-static (tests/run.sh installs them). Missing
//! outside CI: skipped with a loud message. Under CI=true: a failure.

mod common;

use common::{client, eventually, namespace};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use krm_kube_standin::fixture::Cluster;
use krm_kube_standin::image::ScratchImage;
use krm_kube_standin::node::INSTANCE_LABEL;
use krm_kube_standin::podman::Podman;
use krm_kube_standin::registry::http_get;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::net::SocketAddr;
use std::time::Duration;

fn prerequisites() -> bool {
    krm_kube_standin::fixture::require_podman("podman end-to-end test")
}

fn web_pod(name: &str, image: &str, greeting: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "volumes": [{"name": "www", "emptyDir": {}}],
            "initContainers": [{
                "name": "fill", "image": image,
                "command": ["/bin/sh", "-c", "echo \"hello from init: $GREETING\" > /www/index.html"],
                "env": [{"name": "GREETING", "value": greeting}],
                "volumeMounts": [{"name": "www", "mountPath": "/www"}],
            }],
            "containers": [{
                "name": "httpd", "image": image,
                "command": ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"],
                "ports": [{"containerPort": 8080}],
                "volumeMounts": [{"name": "www", "mountPath": "/www", "readOnly": true}],
                "readinessProbe": {"exec": {"command": ["/bin/wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/index.html"]}},
                "securityContext": {"runAsUser": 65534, "runAsGroup": 65534, "allowPrivilegeEscalation": false,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
            "terminationGracePeriodSeconds": 2,
        },
    }))
    .unwrap()
}

async fn wait_ready(pods: &Api<Pod>, name: &str) -> String {
    eventually(90, &format!("pod {name} Ready with an IP"), || {
        let pods = pods.clone();
        let name = name.to_string();
        async move {
            let p = pods.get(&name).await.ok()?;
            let st = p.status?;
            let ready = st
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (ready && st.phase.as_deref() == Some("Running")).then_some(st.pod_ip?)
        }
    })
    .await
}

fn ip_free(ip: &str) -> bool {
    let octet: u8 = ip.rsplit('.').next().unwrap().parse().unwrap();
    // Take every free address up to and including this one, then let them go.
    let mut held = Vec::new();
    let mut free = false;
    while let Some(a) = krm_kube_standin::node::allocate_ip() {
        let o = a.addr().octets()[3];
        held.push(a);
        if o == octet {
            free = true;
            break;
        }
        if o > octet {
            break;
        }
    }
    free
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_for_real_with_podman() {
    if !prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Registry, image builder and stand-in with a podman node, all under one directory.
    let cluster = Cluster::start(dir.path()).expect("registry, builder and stand-in start");
    let reg = &cluster.registry;
    let image = cluster
        .push(&ScratchImage::busybox(), "standin/busybox:1")
        .expect("scratch busybox image built and pushed");
    assert!(
        reg.has("standin/busybox", "1"),
        "the registry serves the manifest"
    );

    let standin = &cluster.standin;
    let agent_podman = standin.node().unwrap().podman.clone();
    let instance = standin.node().unwrap().instance.clone();
    let c = client(standin).await;
    namespace(&c, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "e2e");
    let svcs: Api<Service> = Api::namespaced(c.clone(), "e2e");
    let eps: Api<Endpoints> = Api::namespaced(c.clone(), "e2e");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}))
    .unwrap();
    svcs.create(&PostParams::default(), &svc).await.unwrap();

    let t_start = std::time::Instant::now();
    // Two pods serving the same port, each on its own loopback address.
    pods.create(&PostParams::default(), &web_pod("web-a", &image, "a"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &web_pod("web-b", &image, "b"))
        .await
        .unwrap();
    let ip_a = wait_ready(&pods, "web-a").await;
    let ip_b = wait_ready(&pods, "web-b").await;
    eprintln!(
        "two pods (pull, init container, container, exec probe) Ready in {:?}",
        t_start.elapsed()
    );
    assert_ne!(ip_a, ip_b);
    for (ip, who) in [(&ip_a, "a"), (&ip_b, "b")] {
        assert!(ip.starts_with("127.0.0."), "{ip}");
        assert!(ip.rsplit('.').next().unwrap().parse::<u8>().unwrap() >= 10);
        let addr: SocketAddr = format!("{ip}:8080").parse().unwrap();
        let (code, body) =
            http_get(addr, "/index.html", Duration::from_secs(5)).expect("pod port reachable");
        assert_eq!(code, 200);
        assert_eq!(
            String::from_utf8_lossy(&body).trim(),
            format!("hello from init: {who}")
        );
    }
    let p = pods.get("web-a").await.unwrap();
    let st = p.status.unwrap();
    let cs = &st.container_statuses.unwrap()[0];
    assert!(cs.ready && cs.state.as_ref().unwrap().running.is_some());
    let ics = &st.init_container_statuses.unwrap()[0];
    assert_eq!(
        ics.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        0
    );
    for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(
            st.conditions
                .as_ref()
                .unwrap()
                .iter()
                .any(|c| c.type_ == t && c.status == "True"),
            "{t}"
        );
    }

    // The Service's Endpoints list both pods.
    let e = eventually(20, "endpoints with both pods", || {
        let eps = eps.clone();
        async move {
            let e = eps.get("web").await.ok()?;
            let n = e.subsets.as_ref()?.first()?.addresses.as_ref()?.len();
            (n == 2).then_some(e)
        }
    })
    .await;
    let subset = &e.subsets.unwrap()[0];
    assert_eq!(subset.ports.as_ref().unwrap()[0].port, 8080);

    // The service IP forwards to the ready pods (port 80 -> targetPort 8080), round robin.
    let cluster_ip = svcs
        .get("web")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let (code, body) = http_get(
            format!("{cluster_ip}:80").parse().unwrap(),
            "/index.html",
            Duration::from_secs(5),
        )
        .expect("service IP reachable");
        assert_eq!(code, 200);
        seen.insert(String::from_utf8_lossy(&body).trim().to_string());
    }
    assert_eq!(
        seen.len(),
        2,
        "both pods answered through the service IP: {seen:?}"
    );

    // kubectl shows the running pods with their IPs.
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&standin.kubeconfig)
            .arg("--cache-dir")
            .arg(dir.path().join("kubectl-cache"))
            .args(["get", "pods", "-n", "e2e", "-o", "wide"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.contains("1/1") && out.contains("Running") && out.contains(&ip_a),
            "{out}"
        );
    }
    // A steady pod's status is not rewritten on every probe tick (no resourceVersion churn).
    let rv1 = pods.get("web-b").await.unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let rv2 = pods.get("web-b").await.unwrap().metadata.resource_version;
    assert_eq!(
        rv1, rv2,
        "a Ready pod's object stays unchanged between probes"
    );
    let uid_a = pods.get("web-a").await.unwrap().metadata.uid.unwrap();

    // Delete one pod: containers stop and go, the address is freed, Endpoints follow.
    let t0 = std::time::Instant::now();
    pods.delete("web-a", &DeleteParams::default())
        .await
        .unwrap();
    eventually(60, "web-a removed", || {
        let pods = pods.clone();
        async move { pods.get_opt("web-a").await.ok()?.is_none().then_some(()) }
    })
    .await;
    eprintln!(
        "pod deleted (containers stopped and removed) in {:?}",
        t0.elapsed()
    );
    let left = agent_podman.labelled_blocking(&format!("krm-kube-standin.pod-uid={uid_a}"));
    assert!(
        left.is_empty(),
        "containers of the deleted pod remain: {left:?}"
    );
    assert!(ip_free(&ip_a), "{ip_a} is free again");
    let e = eps.get("web").await.unwrap();
    let addrs = e.subsets.unwrap()[0].addresses.clone().unwrap();
    assert_eq!(addrs.len(), 1);
    assert_eq!(addrs[0].ip, ip_b);
    assert!(
        http_get(
            format!("{ip_a}:8080").parse().unwrap(),
            "/",
            Duration::from_secs(2)
        )
        .is_err()
    );

    // A container that exits 1 under restartPolicy Never fails the pod.
    let failing: Pod = serde_json::from_value(json!({
        "metadata": {"name": "fails"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": image, "command": ["/bin/sh", "-c", "echo oops >&2; exit 1"]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &failing).await.unwrap();
    eventually(60, "pod fails", || {
        let pods = pods.clone();
        async move {
            let st = pods.get("fails").await.ok()?.status?;
            let code = st
                .container_statuses?
                .first()?
                .state
                .clone()?
                .terminated?
                .exit_code;
            (st.phase.as_deref() == Some("Failed") && code == 1).then_some(())
        }
    })
    .await;
    let logs = pods.logs("fails", &Default::default()).await.unwrap();
    assert!(logs.contains("oops"), "{logs}");

    // An image the registry does not have: the pod waits with ErrImagePull.
    let missing: Pod = serde_json::from_value(json!({
        "metadata": {"name": "missing"},
        "spec": {"containers": [{"name": "c", "image": format!("{}/standin/nope:1", reg.host)}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &missing).await.unwrap();
    eventually(60, "ErrImagePull", || {
        let pods = pods.clone();
        async move {
            let st = pods.get("missing").await.ok()?.status?;
            let w = st.container_statuses?.first()?.state.clone()?.waiting?;
            (w.reason.as_deref() == Some("ErrImagePull") && st.phase.as_deref() == Some("Pending"))
                .then_some(())
        }
    })
    .await;

    // runAsNonRoot with an image that runs as root: the container is refused, as by a kubelet.
    let rootish: Pod = serde_json::from_value(json!({
        "metadata": {"name": "rootish"},
        "spec": {"securityContext": {"runAsNonRoot": true},
                 "containers": [{"name": "c", "image": image, "command": ["/bin/sleep", "60"]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &rootish).await.unwrap();
    eventually(60, "CreateContainerConfigError", || {
        let pods = pods.clone();
        async move {
            let st = pods.get("rootish").await.ok()?.status?;
            let w = st.container_statuses?.first()?.state.clone()?.waiting?;
            (w.reason.as_deref() == Some("CreateContainerConfigError")).then_some(())
        }
    })
    .await;

    // restartPolicy Always restarts a crashing container.
    let crashing: Pod = serde_json::from_value(json!({
        "metadata": {"name": "crashing"},
        "spec": {"containers": [{"name": "c", "image": image, "command": ["/bin/sh", "-c", "sleep 0.2; exit 2"]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &crashing)
        .await
        .unwrap();
    eventually(60, "a restart", || {
        let pods = pods.clone();
        async move {
            let st = pods.get("crashing").await.ok()?.status?;
            let cs = st.container_statuses?.first()?.clone();
            (cs.restart_count >= 1 && cs.last_state?.terminated?.exit_code == 2).then_some(())
        }
    })
    .await;

    // Dropping the stand-in removes every container it made.
    drop(cluster);
    let left = agent_podman.labelled_blocking(&format!("{INSTANCE_LABEL}={instance}"));
    assert!(left.is_empty(), "containers left after drop: {left:?}");
    assert!(ip_free(&ip_b), "{ip_b} is free after drop");
}

/// Why: a test process killed mid-run (a CI timeout) leaves containers publishing ports on
/// loopback addresses that later pods will reuse; the next stand-in removes them.
#[test]
fn containers_of_dead_processes_are_swept() {
    if !prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pm = Podman::new(&dir.path().join("podman")).unwrap();
    // Whatever happens, nothing of this test outlives it.
    struct Cleanup(Podman);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = self.0.run_blocking(&["rm", "-a", "-f", "-t", "0"]);
        }
    }
    let _cleanup = Cleanup(pm.clone());
    let ctx = dir.path().join("ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    ScratchImage::busybox().write_context(&ctx).unwrap();
    pm.run_blocking(&[
        "build",
        "--network",
        "none",
        "-t",
        "localhost/sweep:1",
        ctx.to_str().unwrap(),
    ])
    .unwrap();
    pm.run_blocking(&[
        "run",
        "-d",
        "--name",
        "abandoned",
        "localhost/sweep:1",
        "/bin/sleep",
        "300",
    ])
    .unwrap();
    let running = pm.run_blocking(&["ps", "-q"]).unwrap();
    assert!(!running.trim().is_empty(), "the abandoned container runs");
    // A record of a process that is gone.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    std::fs::create_dir_all("/tmp/krm-kube-standin-roots").unwrap();
    let record =
        std::path::Path::new("/tmp/krm-kube-standin-roots").join(format!("sweep-test-{pid}.json"));
    std::fs::write(&record, json!({"pid": pid, "dir": pm.dir}).to_string()).unwrap();
    Podman::sweep_abandoned();
    let left = pm.run_blocking(&["ps", "-aq"]).unwrap();
    assert!(left.trim().is_empty(), "containers left: {left}");
    assert!(!record.exists());
}

/// Why: function pods pull from private registries with the runner's pull Secret, so the node
/// must pull as a kubelet does: with the credentials of the pod's `imagePullSecrets`, and
/// without them the pull is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_pull_from_a_private_registry_with_their_pull_secrets() {
    use base64::Engine as _;
    use k8s_openapi::api::core::v1::Secret;
    use krm_kube_standin::registry::LocalRegistry;
    if !prerequisites() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path()).expect("registry, builder and stand-in start");
    let private = LocalRegistry::start_with_login(&dir.path().join("private"), "puller", "s3cret")
        .expect("registry with a login");
    assert!(private.refuses_anonymous(), "anonymous requests get 401");
    let image = cluster
        .push_to(&private, &ScratchImage::busybox(), "private/busybox:1")
        .expect("pushed with the login");
    assert!(private.has("private/busybox", "1"));

    let c = client(&cluster.standin).await;
    namespace(&c, "private").await;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "private");
    let auth = base64::engine::general_purpose::STANDARD.encode("puller:s3cret");
    let docker_config = json!({"auths": {private.host.clone(): {"auth": auth}}}).to_string();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pull"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(docker_config)},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let pods: Api<Pod> = Api::namespaced(c.clone(), "private");
    let sleeper = |name: &str, pull_secrets: serde_json::Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "imagePullSecrets": pull_secrets,
                // Always: the image the other pod pulled is no way around the login.
                "containers": [{"name": "c", "image": image, "imagePullPolicy": "Always",
                                "command": ["/bin/sleep", "600"]}],
                "terminationGracePeriodSeconds": 1,
            },
        }))
        .unwrap()
    };
    pods.create(&PostParams::default(), &sleeper("anonymous", json!([])))
        .await
        .unwrap();
    // A missing secret is skipped (as by a kubelet); the existing one does the pull.
    pods.create(
        &PostParams::default(),
        &sleeper(
            "authenticated",
            json!([{"name": "absent"}, {"name": "pull"}]),
        ),
    )
    .await
    .unwrap();
    wait_ready(&pods, "authenticated").await;
    let refused = eventually(60, "ErrImagePull without credentials", || {
        let pods = pods.clone();
        async move {
            let st = pods.get("anonymous").await.ok()?.status?;
            let w = st.container_statuses?.first()?.state.clone()?.waiting?;
            (w.reason.as_deref() == Some("ErrImagePull")).then_some(w.message.unwrap_or_default())
        }
    })
    .await;
    let refused = refused.to_lowercase();
    assert!(
        refused.contains("authentication required") || refused.contains("unauthorized"),
        "{refused}"
    );
}
