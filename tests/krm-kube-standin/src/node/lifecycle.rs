//! A pod from binding to deletion: its address, first status, volumes, images and
//! runAsNonRoot check, the init containers in order, then the containers, supervised until the
//! pod is deleted.

use super::address::allocate_ip;
use super::container::VolumeError;
use super::probe::Probe;
use super::{Ctr, Flow, NodeAgent, PodRun, container_name, set_condition};
use crate::util;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

impl NodeAgent {
    pub(super) async fn lifecycle(&self, run: &mut PodRun, notify: &Notify) {
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

        if let Flow::Deleting = self.pull_images(run, notify, &spec, &inits, &mains).await {
            return;
        }
        if let Flow::Deleting = self
            .refuse_root_containers(run, notify, &pod, &inits, &mains)
            .await
        {
            return;
        }
        if let Flow::Deleting = self
            .run_init_containers(run, notify, &pod, &inits, &policy, &volumes)
            .await
        {
            return;
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
            self.remove_leftover_container(&cname).await;
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

    /// Pulls each distinct image of the pod once, retrying with back-off (and the pull secrets
    /// read again, as the kubelet does) and showing ErrImagePull on the containers meanwhile.
    async fn pull_images(
        &self,
        run: &PodRun,
        notify: &Notify,
        spec: &Value,
        inits: &[Value],
        mains: &[Value],
    ) -> Flow {
        let mut images: Vec<(String, String)> = Vec::new();
        for c in inits.iter().chain(mains) {
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
                let authfiles = self.pull_authfiles(run, spec);
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
                            return Flow::Deleting;
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        }
        Flow::Continue
    }

    /// runAsNonRoot is enforced as the kubelet does: against runAsUser, else the image's USER. A
    /// container that breaks it holds the pod in CreateContainerConfigError until deletion.
    async fn refuse_root_containers(
        &self,
        run: &PodRun,
        notify: &Notify,
        pod: &Value,
        inits: &[Value],
        mains: &[Value],
    ) -> Flow {
        for (key, list) in [
            ("initContainerStatuses", &inits),
            ("containerStatuses", &mains),
        ] {
            for (i, c) in list.iter().enumerate() {
                if let Some(msg) = self.non_root_violation(pod, c).await {
                    tracing::info!(pod = %run.name, "{msg}");
                    self.update_status(run, |st| {
                        st[key][i]["state"] =
                            json!({"waiting": {"reason": "CreateContainerConfigError", "message": msg}});
                    });
                    while let Flow::Continue = self.pause(run, notify, Duration::from_secs(5)).await
                    {
                    }
                    return Flow::Deleting;
                }
            }
        }
        Flow::Continue
    }

    /// Runs the init containers in order, each to completion: a failed one is retried with
    /// back-off unless the restartPolicy is Never, which fails the pod.
    async fn run_init_containers(
        &self,
        run: &mut PodRun,
        notify: &Notify,
        pod: &Value,
        inits: &[Value],
        policy: &str,
        volumes: &HashMap<String, PathBuf>,
    ) -> Flow {
        for (i, c) in inits.iter().enumerate() {
            let cname = container_name(
                &self.instance,
                &run.name,
                &run.uid,
                c["name"].as_str().unwrap_or(""),
            );
            let mut restarts = 0i64;
            loop {
                self.remove_leftover_container(&cname).await;
                let started_at = util::now_rfc3339();
                self.update_status(run, |st| {
                    st["initContainerStatuses"][i]["state"] =
                        json!({"running": {"startedAt": started_at}});
                    st["initContainerStatuses"][i]["restartCount"] = restarts.into();
                });
                let args = match self.run_args(run, pod, c, &cname, None, volumes) {
                    Ok(a) => a,
                    Err(m) => {
                        self.fail_pod(run, notify, "CreateContainerConfigError", &m)
                            .await;
                        return Flow::Deleting;
                    }
                };
                if !run.created.contains(&cname) {
                    run.created.push(cname.clone());
                }
                let code = match self.podman.run(&args, Duration::from_secs(60)).await {
                    Ok(_) => match self.wait_exit(run, notify, &cname).await {
                        Some(code) => code,
                        None => return Flow::Deleting,
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
                    self.fail_pod(
                        run,
                        notify,
                        "Init:Error",
                        &format!("init container {} exited with {code}", c["name"]),
                    )
                    .await;
                    return Flow::Deleting;
                }
                restarts += 1;
                let backoff = Duration::from_secs((restarts as u64).min(10));
                if let Flow::Deleting = self.pause(run, notify, backoff).await {
                    return Flow::Deleting;
                }
            }
        }
        if !inits.is_empty() {
            self.update_status(run, |st| set_condition(st, "Initialized", true));
        }
        Flow::Continue
    }

    /// Removes a container left under `cname` by an earlier attempt, so that the name is free
    /// for the next `podman run`.
    async fn remove_leftover_container(&self, cname: &str) {
        let rm = [
            "rm".into(),
            "-f".into(),
            "-t".into(),
            "0".into(),
            cname.to_string(),
        ];
        let _ = self.podman.run(&rm, Duration::from_secs(30)).await;
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
}
