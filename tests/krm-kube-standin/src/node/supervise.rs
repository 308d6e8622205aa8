//! Supervising a pod's running containers: their state from podman, restarts by the pod's
//! restartPolicy with back-off, readiness, and the pod status that follows from them.

use super::probe::Probe;
use super::{Ctr, NodeAgent, PodRun, set_condition};
use crate::util;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};

impl NodeAgent {
    /// Inspects containers, restarts per policy, runs due probes and writes the pod status.
    /// Returns whether the pod reached a terminal phase.
    pub(super) async fn observe(
        &self,
        run: &PodRun,
        policy: &str,
        ip: &str,
        ctrs: &mut [Ctr],
    ) -> bool {
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
            self.update_readiness(c, ip).await;
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
}
