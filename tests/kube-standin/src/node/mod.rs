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

use crate::podman::Podman;
use crate::store::{Gr, Store};
use crate::util::{self, meta_str};
use base64::Engine;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

mod address;
mod container;
mod image;
mod probe;

pub use address::{PodIp, allocate_ip};
use container::VolumeError;

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

#[derive(Debug, Clone, Default)]
struct Probe {
    ready: bool,
    successes: u32,
    failures: u32,
    last: Option<Instant>,
}

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

struct PodRun {
    ns: String,
    name: String,
    uid: String,
    ip: Option<PodIp>,
    dir: PathBuf,
    created: Vec<String>,
}

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

    async fn lifecycle(&self, run: &mut PodRun, notify: &Notify) {
        let Some(pod) = self.current(run) else { return };
        let spec = pod.get("spec").cloned().unwrap_or_default();
        let inits: Vec<Value> = spec
            .get("initContainers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mains: Vec<Value> = spec
            .get("containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let policy = spec
            .get("restartPolicy")
            .and_then(Value::as_str)
            .unwrap_or("Always")
            .to_string();

        // Address.
        let Some(ip) = allocate_ip() else {
            return self
                .fail_pod(
                    run,
                    notify,
                    "OutOfAddresses",
                    "no free address in 127.0.0.10-254",
                )
                .await;
        };
        let ip_s = ip.addr().to_string();
        run.ip = Some(ip);
        let waiting = |cs: &[Value], reason: &str| -> Vec<Value> {
            cs.iter()
                .map(|c| {
                    json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": false,
                           "restartCount": 0, "started": false,
                           "state": {"waiting": {"reason": reason}}})
                })
                .collect()
        };
        let init_st = waiting(&inits, "PodInitializing");
        let main_st = waiting(
            &mains,
            if inits.is_empty() {
                "ContainerCreating"
            } else {
                "PodInitializing"
            },
        );
        self.update_status(run, |st| {
            st["phase"] = "Pending".into();
            st["hostIP"] = "127.0.0.1".into();
            st["hostIPs"] = json!([{"ip": "127.0.0.1"}]);
            st["podIP"] = ip_s.clone().into();
            st["podIPs"] = json!([{"ip": ip_s}]);
            st["startTime"] = util::now_rfc3339().into();
            set_condition(st, "PodScheduled", true);
            set_condition(st, "Initialized", inits.is_empty());
            set_condition(st, "ContainersReady", false);
            set_condition(st, "Ready", false);
            if !inits.is_empty() {
                st["initContainerStatuses"] = Value::Array(init_st);
            }
            st["containerStatuses"] = Value::Array(main_st);
        });

        // Volumes.
        let volumes = loop {
            match self.prepare_volumes(run, &pod) {
                Ok(v) => break v,
                Err(VolumeError::Unsupported(m)) => {
                    return self.fail_pod(run, notify, "UnsupportedVolume", &m).await;
                }
                Err(VolumeError::Missing(m)) => {
                    tracing::info!(pod = %run.name, "waiting for volume source: {m}");
                    if let Flow::Deleting = self.pause(run, notify, Duration::from_secs(1)).await {
                        return;
                    }
                }
            }
        };

        // Images.
        let mut images: Vec<(String, String)> = Vec::new();
        for c in inits.iter().chain(&mains) {
            let image = c["image"].as_str().unwrap_or("").to_string();
            let pull = c["imagePullPolicy"]
                .as_str()
                .unwrap_or("IfNotPresent")
                .to_string();
            if !images.iter().any(|(i, _)| *i == image) {
                images.push((image, pull));
            }
        }
        for (image, pull) in &images {
            let mut backoff = Duration::from_secs(1);
            loop {
                // Read at every attempt, as the kubelet does: the secret may appear later.
                let authfiles = self.pull_authfiles(run, &spec);
                match self.ensure_image(image, pull, &authfiles).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::info!(pod = %run.name, %image, "pull failed: {e}");
                        let msg = e.to_string();
                        self.update_status(run, |st| {
                            for key in ["initContainerStatuses", "containerStatuses"] {
                                if let Some(cs) = st.get_mut(key).and_then(Value::as_array_mut) {
                                    for c in cs.iter_mut().filter(|c| c["image"] == image.as_str()) {
                                        c["state"] = json!({"waiting": {"reason": "ErrImagePull", "message": msg}});
                                    }
                                }
                            }
                        });
                        if let Flow::Deleting = self.pause(run, notify, backoff).await {
                            return;
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        }

        // runAsNonRoot is enforced as the kubelet does: against runAsUser, else the image's USER.
        for (key, list) in [
            ("initContainerStatuses", &inits),
            ("containerStatuses", &mains),
        ] {
            for (i, c) in list.iter().enumerate() {
                if let Some(msg) = self.non_root_violation(&pod, c).await {
                    tracing::info!(pod = %run.name, "{msg}");
                    self.update_status(run, |st| {
                        st[key][i]["state"] =
                            json!({"waiting": {"reason": "CreateContainerConfigError", "message": msg}});
                    });
                    while let Flow::Continue = self.pause(run, notify, Duration::from_secs(5)).await
                    {
                    }
                    return;
                }
            }
        }

        // Init containers, in order, to completion.
        for (i, c) in inits.iter().enumerate() {
            let cname = container_name(
                &self.instance,
                &run.name,
                &run.uid,
                c["name"].as_str().unwrap_or(""),
            );
            let mut restarts = 0i64;
            loop {
                let _ = self
                    .podman
                    .run(
                        &[
                            "rm".into(),
                            "-f".into(),
                            "-t".into(),
                            "0".into(),
                            cname.clone(),
                        ],
                        Duration::from_secs(30),
                    )
                    .await;
                let started_at = util::now_rfc3339();
                self.update_status(run, |st| {
                    st["initContainerStatuses"][i]["state"] =
                        json!({"running": {"startedAt": started_at}});
                    st["initContainerStatuses"][i]["restartCount"] = restarts.into();
                });
                let args = match self.run_args(run, &pod, c, &cname, None, &volumes) {
                    Ok(a) => a,
                    Err(m) => {
                        return self
                            .fail_pod(run, notify, "CreateContainerConfigError", &m)
                            .await;
                    }
                };
                if !run.created.contains(&cname) {
                    run.created.push(cname.clone());
                }
                let code = match self.podman.run(&args, Duration::from_secs(60)).await {
                    Ok(_) => match self.wait_exit(run, notify, &cname).await {
                        Some(code) => code,
                        None => return, // deleting
                    },
                    Err(e) => {
                        tracing::info!(pod = %run.name, "init container did not start: {e}");
                        128
                    }
                };
                let reason = if code == 0 { "Completed" } else { "Error" };
                let finished = util::now_rfc3339();
                self.update_status(run, |st| {
                    st["initContainerStatuses"][i]["state"] = json!({"terminated": {
                        "exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": finished}});
                    st["initContainerStatuses"][i]["ready"] = (code == 0).into();
                });
                if code == 0 {
                    break;
                }
                if policy == "Never" {
                    return self
                        .fail_pod(
                            run,
                            notify,
                            "Init:Error",
                            &format!("init container {} exited with {code}", c["name"]),
                        )
                        .await;
                }
                restarts += 1;
                let backoff = Duration::from_secs((restarts as u64).min(10));
                if let Flow::Deleting = self.pause(run, notify, backoff).await {
                    return;
                }
            }
        }
        if !inits.is_empty() {
            self.update_status(run, |st| set_condition(st, "Initialized", true));
        }

        // Containers.
        let mut ctrs: Vec<Ctr> = Vec::new();
        for c in &mains {
            let cname = container_name(
                &self.instance,
                &run.name,
                &run.uid,
                c["name"].as_str().unwrap_or(""),
            );
            let args = match self.run_args(run, &pod, c, &cname, Some(&ip_s), &volumes) {
                Ok(a) => a,
                Err(m) => {
                    return self
                        .fail_pod(run, notify, "CreateContainerConfigError", &m)
                        .await;
                }
            };
            let _ = self
                .podman
                .run(
                    &[
                        "rm".into(),
                        "-f".into(),
                        "-t".into(),
                        "0".into(),
                        cname.clone(),
                    ],
                    Duration::from_secs(30),
                )
                .await;
            run.created.push(cname.clone());
            let mut ctr = Ctr {
                spec: c.clone(),
                name: c["name"].as_str().unwrap_or("").to_string(),
                cname: cname.clone(),
                started: None,
                started_at: String::new(),
                restarts: 0,
                last_exit: None,
                state: json!({"waiting": {"reason": "ContainerCreating"}}),
                probe: Probe::default(),
                last_restart: None,
            };
            match self.podman.run(&args, Duration::from_secs(60)).await {
                Ok(_) => {
                    ctr.started = Some(Instant::now());
                    ctr.started_at = util::now_rfc3339();
                }
                Err(e) => {
                    tracing::info!(pod = %run.name, container = %ctr.name, "start failed: {e}");
                    ctr.state = json!({"terminated": {"exitCode": 128, "reason": "StartError",
                        "message": e.to_string(), "finishedAt": util::now_rfc3339()}});
                    ctr.last_exit = Some((128, "StartError".into()));
                }
            }
            ctrs.push(ctr);
        }

        // Watch the containers and probe them until the pod is deleted.
        let tick = ctrs
            .iter()
            .filter_map(|c| {
                c.spec
                    .pointer("/readinessProbe/periodSeconds")
                    .and_then(Value::as_u64)
            })
            .map(Duration::from_secs)
            .chain(self.opts.max_probe_period)
            .min()
            .unwrap_or(Duration::from_secs(1))
            .max(Duration::from_millis(200));
        loop {
            let terminal = self.observe(run, &policy, &ip_s, &mut ctrs).await;
            let wait = if terminal {
                Duration::from_secs(5)
            } else {
                tick
            };
            if let Flow::Deleting = self.pause(run, notify, wait).await {
                return;
            }
        }
    }

    /// Inspects containers, restarts per policy, runs due probes and writes the pod status.
    /// Returns whether the pod reached a terminal phase.
    async fn observe(&self, run: &PodRun, policy: &str, ip: &str, ctrs: &mut [Ctr]) -> bool {
        let names: Vec<String> = ctrs
            .iter()
            .filter(|c| c.started.is_some())
            .map(|c| c.cname.clone())
            .collect();
        let mut states: HashMap<String, Value> = HashMap::new();
        if !names.is_empty() {
            let mut args = vec!["inspect".to_string()];
            args.extend(names);
            if let Ok(out) = self.podman.run(&args, Duration::from_secs(30)).await
                && let Ok(Value::Array(items)) = serde_json::from_str::<Value>(&out)
            {
                for it in items {
                    let n = it["Name"]
                        .as_str()
                        .unwrap_or("")
                        .trim_start_matches('/')
                        .to_string();
                    states.insert(n, it["State"].clone());
                }
            }
        }
        for c in ctrs.iter_mut() {
            let Some(st) = states.get(&c.cname) else {
                continue;
            };
            let status = st["Status"].as_str().unwrap_or("");
            if status == "running" {
                c.state = json!({"running": {"startedAt": c.started_at}});
                continue;
            }
            if !matches!(status, "exited" | "stopped") {
                c.state = json!({"waiting": {"reason": "ContainerCreating"}});
                continue;
            }
            let code = st["ExitCode"].as_i64().unwrap_or(0);
            let reason = if code == 0 { "Completed" } else { "Error" };
            // podman's own finish time (UTC), so that repeated observations change nothing.
            let finished = st["FinishedAt"]
                .as_str()
                .and_then(|f| f.get(..19))
                .map(|f| format!("{f}Z"))
                .unwrap_or_else(util::now_rfc3339);
            c.state = json!({"terminated": {"exitCode": code, "reason": reason,
                "startedAt": c.started_at, "finishedAt": finished}});
            c.probe = Probe::default();
            let restart = policy == "Always" || (policy == "OnFailure" && code != 0);
            if restart {
                let backoff =
                    Duration::from_secs(1u64 << c.restarts.min(4)).min(Duration::from_secs(10));
                if c.last_restart.is_none_or(|t| t.elapsed() >= backoff) {
                    c.last_exit = Some((code, reason.into()));
                    c.restarts += 1;
                    c.last_restart = Some(Instant::now());
                    if self
                        .podman
                        .run(&["start".into(), c.cname.clone()], Duration::from_secs(30))
                        .await
                        .is_ok()
                    {
                        c.started = Some(Instant::now());
                        c.started_at = util::now_rfc3339();
                        c.state = json!({"running": {"startedAt": c.started_at}});
                    }
                } else {
                    c.state = json!({"waiting": {"reason": "CrashLoopBackOff",
                        "message": format!("back-off restarting failed container {}", c.name)}});
                }
            }
        }
        // Readiness probes.
        for c in ctrs.iter_mut() {
            let running = c.state.get("running").is_some();
            if !running {
                c.probe.ready = false;
                continue;
            }
            let Some(probe) = c.spec.get("readinessProbe").cloned() else {
                c.probe.ready = true;
                continue;
            };
            let delay = probe["initialDelaySeconds"].as_u64().unwrap_or(0);
            if c.started
                .is_some_and(|s| s.elapsed() < Duration::from_secs(delay))
            {
                continue;
            }
            let mut period =
                Duration::from_secs(probe["periodSeconds"].as_u64().unwrap_or(10).max(1));
            if let Some(cap) = self.opts.max_probe_period {
                period = period.min(cap);
            }
            if c.probe.last.is_some_and(|t| t.elapsed() < period) {
                continue;
            }
            c.probe.last = Some(Instant::now());
            let ok = self.probe(&c.cname, &c.spec, &probe, ip).await;
            if ok {
                c.probe.successes += 1;
                c.probe.failures = 0;
                if c.probe.successes >= probe["successThreshold"].as_u64().unwrap_or(1) as u32 {
                    c.probe.ready = true;
                }
            } else {
                c.probe.failures += 1;
                c.probe.successes = 0;
                if !c.probe.ready
                    || c.probe.failures >= probe["failureThreshold"].as_u64().unwrap_or(3) as u32
                {
                    c.probe.ready = false;
                }
            }
        }
        let all_terminated = ctrs.iter().all(|c| c.state.get("terminated").is_some());
        let phase = if all_terminated {
            if ctrs.iter().all(|c| {
                c.state
                    .pointer("/terminated/exitCode")
                    .and_then(Value::as_i64)
                    == Some(0)
            }) {
                "Succeeded"
            } else {
                "Failed"
            }
        } else {
            "Running"
        };
        let all_ready = phase == "Running" && ctrs.iter().all(|c| c.probe.ready);
        let statuses: Vec<Value> = ctrs
            .iter()
            .map(|c| {
                let mut s = json!({
                    "name": c.name, "image": c.spec["image"], "imageID": "",
                    "containerID": format!("podman://{}", c.cname),
                    "ready": c.probe.ready && c.state.get("running").is_some(),
                    "started": c.state.get("running").is_some(),
                    "restartCount": c.restarts, "state": c.state,
                });
                if let Some((code, reason)) = &c.last_exit {
                    s["lastState"] = json!({"terminated": {"exitCode": code, "reason": reason}});
                }
                s
            })
            .collect();
        self.update_status(run, |st| {
            st["phase"] = phase.into();
            st["containerStatuses"] = Value::Array(statuses);
            set_condition(st, "ContainersReady", all_ready);
            set_condition(st, "Ready", all_ready);
        });
        phase != "Running"
    }

    /// Waits for a container to exit (returns its code), or for the pod's deletion (`None`).
    async fn wait_exit(&self, run: &PodRun, notify: &Notify, cname: &str) -> Option<i64> {
        let mut cmd = self.podman.command();
        cmd.args(["wait", cname]);
        let waiter = cmd.output();
        tokio::pin!(waiter);
        loop {
            tokio::select! {
                out = &mut waiter => {
                    let out = out.ok()?;
                    return Some(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(128));
                }
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = notify.notified() => {}
            }
            if self.deleting(run) {
                return None;
            }
        }
    }

    async fn teardown(&self, run: &mut PodRun) {
        let grace = self
            .current(run)
            .and_then(|p| {
                p.pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(0)
            .max(0);
        if !run.created.is_empty() {
            let mut stop = vec![
                "stop".to_string(),
                "-i".into(),
                "-t".into(),
                grace.to_string(),
            ];
            stop.extend(run.created.iter().cloned());
            if let Err(e) = self
                .podman
                .run(&stop, Duration::from_secs(grace as u64 + 30))
                .await
            {
                tracing::warn!(pod = %run.name, "stopping containers: {e}");
            }
        }
        // Everything carrying the pod's uid, including anything a cancelled start left behind.
        if let Ok(ids) = self
            .podman
            .run(
                &[
                    "ps".into(),
                    "-aq".into(),
                    "--filter".into(),
                    format!("label={POD_UID_LABEL}={}", run.uid),
                ],
                Duration::from_secs(30),
            )
            .await
        {
            let mut rm = vec![
                "rm".to_string(),
                "-f".into(),
                "-i".into(),
                "-t".into(),
                "0".into(),
            ];
            let ids: Vec<String> = ids.split_whitespace().map(String::from).collect();
            if !ids.is_empty() {
                rm.extend(ids);
                if let Err(e) = self.podman.run(&rm, Duration::from_secs(60)).await {
                    tracing::warn!(pod = %run.name, "removing containers: {e}");
                }
            }
        }
        let _ = std::fs::remove_dir_all(&run.dir);
        run.ip = None; // frees the address
        self.store
            .finish_pod_termination(&run.ns, &run.name, &run.uid);
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
