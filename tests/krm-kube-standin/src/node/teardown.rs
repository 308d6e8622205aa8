//! Ending a pod: its containers stopped within the grace period and removed, its directory and
//! address freed, and its deletion confirmed to the store.

use super::{NodeAgent, POD_UID_LABEL, PodRun};
use serde_json::Value;
use std::time::Duration;

impl NodeAgent {
    pub(super) async fn teardown(&self, run: &mut PodRun) {
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
}
