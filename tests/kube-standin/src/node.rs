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

/// A pod IP held for as long as this value lives.
#[derive(Debug)]
pub struct PodIp {
    octet: u8,
    _lock: std::fs::File,
}

impl PodIp {
    /// The address.
    pub fn addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(127, 0, 0, self.octet)
    }
}

/// Allocates the lowest free 127.0.0.N (N = 10..=254), held by an `flock` on a lock file (see
/// [`util::lock_address`]) across threads and processes.
pub fn allocate_ip() -> Option<PodIp> {
    (10..=254u8).find_map(|octet| {
        util::lock_address(Ipv4Addr::new(127, 0, 0, octet)).map(|f| PodIp { octet, _lock: f })
    })
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

fn is_loopback_host(image: &str) -> bool {
    let first = image.split('/').next().unwrap_or("");
    if !image.contains('/') {
        return false;
    }
    let host = first.rsplit_once(':').map(|(h, _)| h).unwrap_or(first);
    host == "localhost" || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
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

    async fn probe(&self, cname: &str, c: &Value, probe: &Value, ip: &str) -> bool {
        let timeout = Duration::from_secs(probe["timeoutSeconds"].as_u64().unwrap_or(1).max(3));
        let port_of = |p: &Value| -> Option<u16> {
            if let Some(n) = p.as_u64() {
                return u16::try_from(n).ok();
            }
            let name = p.as_str()?;
            c.get("ports")?
                .as_array()?
                .iter()
                .find(|cp| cp["name"] == name)?["containerPort"]
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
        };
        let addr =
            |port: u16| SocketAddr::new(ip.parse().unwrap_or(Ipv4Addr::LOCALHOST).into(), port);
        if let Some(cmd) = probe.pointer("/exec/command").and_then(Value::as_array) {
            let mut args = vec!["exec".to_string(), cname.to_string()];
            args.extend(cmd.iter().filter_map(|x| x.as_str().map(String::from)));
            return self.podman.run(&args, timeout).await.is_ok();
        }
        if let Some(p) = probe.pointer("/tcpSocket/port").and_then(port_of) {
            return tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr(p)))
                .await
                .is_ok_and(|r| r.is_ok());
        }
        if let Some(p) = probe
            .pointer("/grpc/port")
            .and_then(|p| p.as_u64())
            .and_then(|n| u16::try_from(n).ok())
        {
            // Not a real gRPC health check: a TCP connect.
            return tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr(p)))
                .await
                .is_ok_and(|r| r.is_ok());
        }
        if let Some(p) = probe.pointer("/httpGet/port").and_then(port_of) {
            let path = probe
                .pointer("/httpGet/path")
                .and_then(Value::as_str)
                .unwrap_or("/")
                .to_string();
            let fut = async move {
                let mut s = tokio::net::TcpStream::connect(addr(p)).await.ok()?;
                s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", addr(p)).as_bytes())
                    .await
                    .ok()?;
                let mut buf = vec![0u8; 64];
                let n = s.read(&mut buf).await.ok()?;
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                head.split_whitespace().nth(1)?.parse::<u16>().ok()
            };
            return matches!(tokio::time::timeout(timeout, fut).await, Ok(Some(code)) if (200..400).contains(&code));
        }
        false
    }

    /// The kubelet's runAsNonRoot check, or `None` when the container may start.
    async fn non_root_violation(&self, pod: &Value, c: &Value) -> Option<String> {
        let psc = pod
            .pointer("/spec/securityContext")
            .cloned()
            .unwrap_or_default();
        let csc = c.get("securityContext").cloned().unwrap_or_default();
        let pick = |k: &str| {
            csc.get(k)
                .filter(|v| !v.is_null())
                .or_else(|| psc.get(k).filter(|v| !v.is_null()))
                .cloned()
        };
        if pick("runAsNonRoot").and_then(|v| v.as_bool()) != Some(true) {
            return None;
        }
        match pick("runAsUser").and_then(|v| v.as_i64()) {
            Some(0) => return Some("container's runAsUser breaks non-root policy".into()),
            Some(_) => return None,
            None => {}
        }
        let image = c["image"].as_str().unwrap_or("");
        let user = self
            .podman
            .run(
                &[
                    "image".into(),
                    "inspect".into(),
                    "--format".into(),
                    "{{.Config.User}}".into(),
                    image.into(),
                ],
                Duration::from_secs(30),
            )
            .await
            .ok()?
            .trim()
            .to_string();
        let uid = user.split(':').next().unwrap_or("");
        match uid.parse::<u32>() {
            Ok(0) => Some("container has runAsNonRoot and image will run as root".into()),
            Ok(_) => None,
            Err(_) if uid.is_empty() || uid == "root" => {
                Some("container has runAsNonRoot and image will run as root".into())
            }
            Err(_) => Some(format!(
                "container has runAsNonRoot and image has non-numeric user ({uid}), cannot verify user is non-root"
            )),
        }
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

    /// The pod's `imagePullSecrets` that exist and are of type `kubernetes.io/dockerconfigjson`,
    /// written out as podman auth files (the kubelet skips missing ones too).
    fn pull_authfiles(&self, run: &PodRun, spec: &Value) -> Vec<PathBuf> {
        let secrets_gr = (String::new(), "secrets".to_string());
        let mut files = Vec::new();
        for reference in spec["imagePullSecrets"].as_array().into_iter().flatten() {
            let Some(name) = reference["name"].as_str() else {
                continue;
            };
            let secret = self.store.get_gr(&secrets_gr, &run.ns, name);
            let config = secret
                .filter(|s| s["type"] == "kubernetes.io/dockerconfigjson")
                .and_then(|s| s["data"][".dockerconfigjson"].as_str().map(String::from))
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok());
            let Some(config) = config else {
                tracing::info!(pod = %run.name, secret = name, "image pull secret missing or not a dockerconfigjson");
                continue;
            };
            let file = run.dir.join(format!("pull-secret-{name}.json"));
            let written =
                std::fs::create_dir_all(&run.dir).and_then(|()| std::fs::write(&file, config));
            match written {
                Ok(()) => files.push(file),
                Err(e) => tracing::warn!(pod = %run.name, "writing {}: {e}", file.display()),
            }
        }
        files
    }

    /// Pulls `image` unless present (per `pull` policy), with each auth file in turn until one
    /// works, anonymously when there are none.
    async fn ensure_image(
        &self,
        image: &str,
        pull: &str,
        authfiles: &[PathBuf],
    ) -> anyhow::Result<()> {
        let present = self
            .podman
            .run(
                &["image".into(), "exists".into(), image.into()],
                Duration::from_secs(30),
            )
            .await
            .is_ok();
        if present && pull != "Always" {
            return Ok(());
        }
        if pull == "Never" {
            anyhow::bail!("image {image} is not present and imagePullPolicy is Never");
        }
        if !is_loopback_host(image) {
            if present {
                return Ok(());
            }
            anyhow::bail!(
                "the stand-in pulls only from registries on loopback addresses (127.0.0.0/8, localhost), not {image}"
            );
        }
        let credentials: Vec<Option<&PathBuf>> = if authfiles.is_empty() {
            vec![None]
        } else {
            authfiles.iter().map(Some).collect()
        };
        let mut failures = Vec::new();
        for authfile in credentials {
            let mut args: Vec<String> =
                vec!["pull".into(), "--tls-verify=false".into(), "--quiet".into()];
            if let Some(file) = authfile {
                args.extend(["--authfile".into(), file.display().to_string()]);
            }
            args.push(image.into());
            match self.podman.run(&args, Duration::from_secs(120)).await {
                Ok(_) => return Ok(()),
                Err(e) => failures.push(e.to_string()),
            }
        }
        anyhow::bail!("{}", failures.join("; "))
    }

    fn lookup_key(&self, ns: &str, kind: &str, name: &str, key: &str) -> Option<String> {
        let obj = self
            .store
            .get_gr(&(String::new(), kind.to_string()), ns, name)?;
        if kind == "secrets" {
            let b64 = obj.get("data")?.get(key)?.as_str()?;
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            String::from_utf8(bytes).ok()
        } else {
            obj.get("data")?.get(key)?.as_str().map(String::from)
        }
    }

    fn run_args(
        &self,
        run: &PodRun,
        pod: &Value,
        c: &Value,
        cname: &str,
        publish_on: Option<&str>,
        volumes: &HashMap<String, PathBuf>,
    ) -> Result<Vec<String>, String> {
        let mut a: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--name".into(),
            cname.into(),
            "--pull=never".into(),
            "--label".into(),
            format!("{INSTANCE_LABEL}={}", self.instance),
            "--label".into(),
            format!("{POD_UID_LABEL}={}", run.uid),
            "--label".into(),
            format!("krm-kube-standin.pod={}.{}", run.ns, run.name),
            "--hostname".into(),
            run.name.chars().take(63).collect(),
        ];
        let ip = util::path_str(pod, "status.podIP").to_string();
        let field = |path: &str| -> String {
            match path {
                "status.podIP" => publish_on.map(String::from).unwrap_or(ip.clone()),
                "status.hostIP" => "127.0.0.1".into(),
                "spec.nodeName" => self.opts.node_name.clone(),
                other => util::path(pod, other)
                    .map(|v| {
                        v.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| v.to_string())
                    })
                    .unwrap_or_default(),
            }
        };
        for src in c
            .get("envFrom")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let prefix = src["prefix"].as_str().unwrap_or("");
            let (kind, name) =
                if let Some(n) = src.pointer("/configMapRef/name").and_then(Value::as_str) {
                    ("configmaps", n)
                } else if let Some(n) = src.pointer("/secretRef/name").and_then(Value::as_str) {
                    ("secrets", n)
                } else {
                    continue;
                };
            let Some(obj) = self
                .store
                .get_gr(&(String::new(), kind.into()), &run.ns, name)
            else {
                return Err(format!("{kind} {name:?} not found"));
            };
            for k in obj
                .get("data")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if let Some(v) = self.lookup_key(&run.ns, kind, name, &k) {
                    a.push("-e".into());
                    a.push(format!("{prefix}{k}={v}"));
                }
            }
        }
        for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or("");
            let value = if let Some(v) = e.get("value").and_then(Value::as_str) {
                v.to_string()
            } else if let Some(p) = e
                .pointer("/valueFrom/fieldRef/fieldPath")
                .and_then(Value::as_str)
            {
                field(p)
            } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
                self.lookup_key(
                    &run.ns,
                    "secrets",
                    r["name"].as_str().unwrap_or(""),
                    r["key"].as_str().unwrap_or(""),
                )
                .ok_or_else(|| format!("secret key for env {name} not found"))?
            } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
                self.lookup_key(
                    &run.ns,
                    "configmaps",
                    r["name"].as_str().unwrap_or(""),
                    r["key"].as_str().unwrap_or(""),
                )
                .ok_or_else(|| format!("configmap key for env {name} not found"))?
            } else {
                String::new()
            };
            a.push("-e".into());
            a.push(format!("{name}={value}"));
        }
        for m in c
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let vname = m["name"].as_str().unwrap_or("");
            let Some(src) = volumes.get(vname) else {
                return Err(format!("volumeMount refers to unknown volume {vname:?}"));
            };
            let mut src = src.clone();
            if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
                src = src.join(sub);
                let _ = std::fs::create_dir_all(&src);
            }
            let ro = if m["readOnly"].as_bool() == Some(true) {
                ":ro"
            } else {
                ""
            };
            a.push("-v".into());
            a.push(format!(
                "{}:{}{ro}",
                src.display(),
                m["mountPath"].as_str().unwrap_or("")
            ));
        }
        if let Some(w) = c["workingDir"].as_str().filter(|w| !w.is_empty()) {
            a.push("-w".into());
            a.push(w.into());
        }
        if let Some(ip) = publish_on {
            for p in c
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(port) = p["containerPort"].as_u64() else {
                    continue;
                };
                let proto = p["protocol"].as_str().unwrap_or("TCP").to_lowercase();
                a.push("-p".into());
                a.push(format!("{ip}:{port}:{port}/{proto}"));
            }
        }
        // Security context: the container's settings override the pod's.
        let psc = pod
            .pointer("/spec/securityContext")
            .cloned()
            .unwrap_or_default();
        let csc = c.get("securityContext").cloned().unwrap_or_default();
        let pick = |k: &str| {
            csc.get(k)
                .filter(|v| !v.is_null())
                .or_else(|| psc.get(k).filter(|v| !v.is_null()))
                .cloned()
        };
        match (
            pick("runAsUser").and_then(|v| v.as_i64()),
            pick("runAsGroup").and_then(|v| v.as_i64()),
        ) {
            (Some(u), Some(g)) => a.extend(["--user".into(), format!("{u}:{g}")]),
            (Some(u), None) => a.extend(["--user".into(), u.to_string()]),
            (None, Some(g)) => a.extend(["--group-add".into(), g.to_string()]),
            (None, None) => {}
        }
        if csc["readOnlyRootFilesystem"].as_bool() == Some(true) {
            a.push("--read-only".into());
        }
        if csc["allowPrivilegeEscalation"].as_bool() == Some(false) {
            a.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        if csc["privileged"].as_bool() == Some(true) {
            a.push("--privileged".into());
        }
        for cap in csc
            .pointer("/capabilities/drop")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            a.extend([
                "--cap-drop".into(),
                cap.as_str().unwrap_or("").to_lowercase(),
            ]);
        }
        for cap in csc
            .pointer("/capabilities/add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            a.extend([
                "--cap-add".into(),
                cap.as_str().unwrap_or("").to_lowercase(),
            ]);
        }
        if let Some(cmd) = c
            .get("command")
            .and_then(Value::as_array)
            .filter(|c| !c.is_empty())
        {
            a.push("--entrypoint".into());
            a.push(Value::Array(cmd.clone()).to_string());
        }
        a.push(c["image"].as_str().unwrap_or("").into());
        for arg in c
            .get("args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            a.push(
                arg.as_str()
                    .map(String::from)
                    .unwrap_or_else(|| arg.to_string()),
            );
        }
        Ok(a)
    }

    fn prepare_volumes(
        &self,
        run: &PodRun,
        pod: &Value,
    ) -> Result<HashMap<String, PathBuf>, VolumeError> {
        let mut out = HashMap::new();
        for v in pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = v["name"].as_str().unwrap_or("").to_string();
            let dir = run.dir.join("volumes").join(&name);
            let mkdir = |d: &Path| -> Result<(), VolumeError> {
                std::fs::create_dir_all(d).map_err(|e| VolumeError::Unsupported(e.to_string()))?;
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))
                    .map_err(|e| VolumeError::Unsupported(e.to_string()))
            };
            if v.get("emptyDir").is_some() {
                mkdir(&dir)?;
                out.insert(name, dir);
            } else if let Some(p) = v.pointer("/hostPath/path").and_then(Value::as_str) {
                out.insert(name, PathBuf::from(p));
            } else if let Some(src) = v.get("secret").or_else(|| v.get("configMap")) {
                let (kind, key) = if v.get("secret").is_some() {
                    ("secrets", "secretName")
                } else {
                    ("configmaps", "name")
                };
                let oname = src[key].as_str().unwrap_or("");
                let optional = src["optional"].as_bool() == Some(true);
                mkdir(&dir)?;
                match self
                    .store
                    .get_gr(&(String::new(), kind.into()), &run.ns, oname)
                {
                    None if optional => {}
                    None => {
                        return Err(VolumeError::Missing(format!("{kind} {oname:?} not found")));
                    }
                    Some(obj) => {
                        let data: Map<String, Value> = obj
                            .get("data")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default();
                        let items: Vec<(String, String)> =
                            match src.get("items").and_then(Value::as_array) {
                                Some(items) => items
                                    .iter()
                                    .map(|i| {
                                        (
                                            i["key"].as_str().unwrap_or("").to_string(),
                                            i["path"].as_str().unwrap_or("").to_string(),
                                        )
                                    })
                                    .collect(),
                                None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                            };
                        for (k, path) in items {
                            let Some(val) = data.get(&k).and_then(Value::as_str) else {
                                continue;
                            };
                            let bytes = if kind == "secrets" {
                                base64::engine::general_purpose::STANDARD
                                    .decode(val)
                                    .unwrap_or_default()
                            } else {
                                val.as_bytes().to_vec()
                            };
                            let to = dir.join(&path);
                            if let Some(p) = to.parent() {
                                let _ = std::fs::create_dir_all(p);
                            }
                            std::fs::write(&to, bytes)
                                .map_err(|e| VolumeError::Unsupported(e.to_string()))?;
                            let _ = std::fs::set_permissions(
                                &to,
                                std::fs::Permissions::from_mode(0o644),
                            );
                        }
                    }
                }
                out.insert(name, dir);
            } else {
                return Err(VolumeError::Unsupported(format!(
                    "volume {name:?}: only emptyDir, hostPath, secret and configMap volumes are supported by the stand-in"
                )));
            }
        }
        Ok(out)
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

enum VolumeError {
    Unsupported(String),
    Missing(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_only() {
        assert!(is_loopback_host("127.0.0.1:5000/a/b:1"));
        assert!(is_loopback_host("localhost:5000/a:1"));
        assert!(is_loopback_host("127.3.2.1/a"));
        assert!(!is_loopback_host("ghcr.io/kptdev/x:1"));
        assert!(!is_loopback_host("busybox"));
        assert!(!is_loopback_host("10.0.0.1:5000/x"));
    }

    #[test]
    fn addresses_are_exclusive_and_freed() {
        let a = allocate_ip().unwrap();
        let b = allocate_ip().unwrap();
        assert_ne!(a.addr(), b.addr());
        assert!(a.addr().octets()[3] >= 10);
        drop(a);
        let c = allocate_ip().unwrap();
        assert_ne!(c.addr(), b.addr());
    }
}
