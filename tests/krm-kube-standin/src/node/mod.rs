//! The node agent: runs each pod for real with podman.
//!
//! For every pod it binds (sets `spec.nodeName`), it allocates a loopback address 127.0.0.N
//! (N from 10 up, held with a lock file so that no two stand-ins — even in different processes —
//! use one at the same time) as the pod IP, creates emptyDir/secret/configMap volumes as host
//! directories, pulls the images (plain HTTP, loopback registries only, with the credentials of
//! the pod's `imagePullSecrets`), runs the init containers
//! in order, then the containers with their command, args, env, mounts, working directory and
//! security context, publishing every declared containerPort on 127.0.0.N. It runs readiness
//! probes (exec via `podman exec`, tcpSocket, httpGet; grpc is checked as a TCP connect) and
//! reports phase, conditions, pod IP and container statuses. When the pod is deleted it stops
//! the containers within the grace period, removes them, frees the address and confirms the
//! deletion.
//!
//! Containers of one pod do not share a network namespace here (each has its own, with its
//! ports published on the pod's address); they share volumes.
//!
//! A pod's way through the agent: [`lifecycle`] starts it (with the podman arguments from
//! [`container`], images from [`image`], the address from [`address`]), [`supervise`] keeps its
//! containers and status current (readiness from [`probe`]), and [`teardown`] ends it.

use crate::podman::Podman;
use crate::store::{Gr, Store};
use crate::util::{self, meta_str};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

mod address;
mod container;
mod image;
mod lifecycle;
mod probe;
mod supervise;
mod teardown;

pub use address::{PodIp, allocate_ip};
use probe::Probe;

/// Label on every container: which stand-in instance owns it.
pub const INSTANCE_LABEL: &str = "krm-kube-standin.instance";
/// Label on every container: uid of its pod.
pub const POD_UID_LABEL: &str = "krm-kube-standin.pod-uid";

/// Node agent settings.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Readiness probe periods are capped at this (default 1 s) so tests do not wait out
    /// Kubernetes' 10 s default. `None` honours the pods' periods.
    pub max_probe_period: Option<Duration>,
    /// Name of the node (and of its Node object).
    pub node_name: String,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            max_probe_period: Some(Duration::from_secs(1)),
            node_name: "krm-standin-node".into(),
        }
    }
}

/// The agent.
pub struct NodeAgent {
    store: Arc<Store>,
    /// The podman environment the pods run in.
    pub podman: Podman,
    opts: NodeOptions,
    /// Value of [`INSTANCE_LABEL`] on this agent's containers.
    pub instance: String,
    pods_dir: PathBuf,
    workers: Mutex<HashMap<String, Arc<Notify>>>,
}

fn pods_gr() -> Gr {
    (String::new(), "pods".into())
}

fn cond(t: &str, ok: bool) -> Value {
    json!({"type": t, "status": if ok { "True" } else { "False" },
           "lastTransitionTime": util::now_rfc3339(), "lastProbeTime": null})
}

/// Sets condition `t` keeping its transition time when the status does not change.
fn set_condition(status: &mut Value, t: &str, ok: bool) {
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let conds = status["conditions"].as_array_mut().expect("array");
    let want = if ok { "True" } else { "False" };
    match conds.iter_mut().find(|c| c["type"] == t) {
        Some(c) if c["status"] == want => {}
        Some(c) => *c = cond(t, ok),
        None => conds.push(cond(t, ok)),
    }
}

/// A pod's main container as the agent tracks it between looks at podman.
#[derive(Debug, Clone)]
struct Ctr {
    spec: Value,
    name: String,
    cname: String,
    started: Option<Instant>,
    started_at: String,
    restarts: i64,
    last_exit: Option<(i64, String)>,
    state: Value,
    probe: Probe,
    last_restart: Option<Instant>,
}

/// One pod the agent runs: which pod, its address and directory while it holds them, and the
/// containers it created (what teardown stops).
struct PodRun {
    ns: String,
    name: String,
    uid: String,
    ip: Option<PodIp>,
    dir: PathBuf,
    created: Vec<String>,
}

/// Whether a pod's worker goes on, or stops because the pod is being deleted.
enum Flow {
    Continue,
    Deleting,
}

fn container_name(instance: &str, pod: &str, uid: &str, c: &str) -> String {
    let pod: String = pod.chars().take(40).collect();
    format!(
        "ksi-{}-{pod}-{}-{c}",
        &instance[..8.min(instance.len())],
        &uid[..8.min(uid.len())]
    )
}

impl NodeAgent {
    /// Creates the agent (does not start it).
    pub fn new(store: Arc<Store>, podman: Podman, state_dir: &Path, opts: NodeOptions) -> Self {
        Self {
            store,
            podman,
            opts,
            instance: util::new_uid(),
            pods_dir: state_dir.join("pods"),
            workers: Mutex::new(HashMap::new()),
        }
    }

    fn lock_workers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the Node object and handles pods until the runtime stops.
    pub async fn run(self: Arc<Self>) {
        let node = json!({
            "metadata": {"name": self.opts.node_name, "labels": {"kubernetes.io/hostname": self.opts.node_name}},
            "status": {
                "conditions": [cond("Ready", true)],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.opts.node_name}],
                "nodeInfo": {"containerRuntimeVersion": "podman (krm-kube-standin)", "kubeletVersion": "v1.32.0-krm-kube-standin",
                              "operatingSystem": "linux", "architecture": "amd64"},
            },
        });
        let _ = self
            .store
            .create_internal(&(String::new(), "nodes".into()), node);
        let mut rx = self.store.subscribe();
        for pod in self.store.all(&pods_gr()) {
            self.consider(&pod);
        }
        loop {
            match rx.recv().await {
                Ok(ev) if ev.gr == pods_gr() => self.consider(&ev.object),
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    for pod in self.store.all(&pods_gr()) {
                        self.consider(&pod);
                    }
                    let workers: Vec<Arc<Notify>> = self.lock_workers().values().cloned().collect();
                    for w in workers {
                        w.notify_one();
                    }
                }
                Err(_) => return,
            }
        }
    }

    fn consider(self: &Arc<Self>, pod: &Value) {
        let uid = meta_str(pod, "uid").unwrap_or("").to_string();
        if let Some(n) = self.lock_workers().get(&uid) {
            n.notify_one();
            return;
        }
        let node = util::path_str(pod, "spec.nodeName");
        if !node.is_empty() && node != self.opts.node_name {
            return; // someone else's
        }
        let ns = meta_str(pod, "namespace").unwrap_or("").to_string();
        let name = meta_str(pod, "name").unwrap_or("").to_string();
        let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
        let done = matches!(util::path_str(pod, "status.phase"), "Succeeded" | "Failed");
        if deleting || (done && !node.is_empty()) {
            if deleting && node == self.opts.node_name {
                // Not ours to run any more (e.g. left from before): confirm.
                self.store.finish_pod_termination(&ns, &name, &uid);
            }
            return;
        }
        let notify = Arc::new(Notify::new());
        self.lock_workers().insert(uid.clone(), notify.clone());
        if node.is_empty() {
            let node_name = self.opts.node_name.clone();
            self.store.mutate(&pods_gr(), &ns, &name, &uid, |p| {
                p["spec"]["nodeName"] = node_name.into();
                let mut st = p.get("status").cloned().unwrap_or_else(|| json!({}));
                set_condition(&mut st, "PodScheduled", true);
                p["status"] = st;
            });
        }
        let me = self.clone();
        tokio::spawn(async move {
            let mut run = PodRun {
                dir: me.pods_dir.join(&uid),
                ns,
                name,
                uid: uid.clone(),
                ip: None,
                created: Vec::new(),
            };
            me.lifecycle(&mut run, &notify).await;
            me.teardown(&mut run).await;
            me.lock_workers().remove(&uid);
        });
    }

    fn current(&self, run: &PodRun) -> Option<Value> {
        self.store
            .get_gr(&pods_gr(), &run.ns, &run.name)
            .filter(|p| meta_str(p, "uid") == Some(run.uid.as_str()))
    }

    fn deleting(&self, run: &PodRun) -> bool {
        self.current(run)
            .is_none_or(|p| p.pointer("/metadata/deletionTimestamp").is_some())
    }

    fn update_status(&self, run: &PodRun, f: impl FnOnce(&mut Value)) {
        self.store
            .mutate(&pods_gr(), &run.ns, &run.name, &run.uid, |p| {
                let mut st = p.get("status").cloned().unwrap_or_else(|| json!({}));
                f(&mut st);
                p["status"] = st;
            });
    }

    /// Sleeps `d` or until the pod changes; reports whether it is being deleted.
    async fn pause(&self, run: &PodRun, notify: &Notify, d: Duration) -> Flow {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = notify.notified() => {}
        }
        if self.deleting(run) {
            Flow::Deleting
        } else {
            Flow::Continue
        }
    }

    async fn fail_pod(&self, run: &PodRun, notify: &Notify, reason: &str, message: &str) {
        tracing::info!(pod = %run.name, reason, message, "pod failed");
        self.update_status(run, |st| {
            st["phase"] = "Failed".into();
            st["reason"] = reason.into();
            st["message"] = message.into();
            set_condition(st, "Ready", false);
            set_condition(st, "ContainersReady", false);
        });
        while let Flow::Continue = self.pause(run, notify, Duration::from_secs(5)).await {}
    }

    /// Container logs for `pods/log`.
    pub async fn logs(
        &self,
        ns: &str,
        name: &str,
        container: Option<&str>,
    ) -> Result<String, String> {
        let pod = self
            .store
            .get_gr(&pods_gr(), ns, name)
            .ok_or_else(|| format!("pod {name} not found"))?;
        let uid = meta_str(&pod, "uid").unwrap_or("");
        let c = match container {
            Some(c) => c.to_string(),
            None => pod
                .pointer("/spec/containers/0/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        };
        let cname = container_name(&self.instance, name, uid, &c);
        let mut cmd = self.podman.command();
        cmd.args(["logs", &cname]);
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .map_err(|_| "podman logs timed out".to_string())?
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "container {c:?} of pod {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(text)
    }

    /// Kills every running container of the pod with uid `pod_uid` (SIGKILL, as a crash or the
    /// OOM killer would); its `restartPolicy` decides what follows. Returns how many it killed.
    pub fn kill_pod_blocking(&self, pod_uid: &str) -> anyhow::Result<usize> {
        let running = self.podman.run_blocking(&[
            "ps",
            "-q",
            "--filter",
            &format!("label={POD_UID_LABEL}={pod_uid}"),
        ])?;
        let ids: Vec<&str> = running.split_whitespace().collect();
        if !ids.is_empty() {
            let mut kill = vec!["kill", "--signal", "KILL"];
            kill.extend(&ids);
            self.podman.run_blocking(&kill)?;
        }
        Ok(ids.len())
    }

    /// Removes every container of this agent, forcibly (used on drop).
    pub fn remove_all_blocking(&self) {
        self.podman
            .remove_labelled_blocking(&format!("{INSTANCE_LABEL}={}", self.instance));
    }
}
