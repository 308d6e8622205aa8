//! Pulling a pod's images: loopback registries only, over plain HTTP, with the credentials of
//! the pod's `imagePullSecrets`.

use super::{NodeAgent, PodRun};
use base64::Engine;
use serde_json::Value;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

pub(super) fn is_loopback_host(image: &str) -> bool {
    let first = image.split('/').next().unwrap_or("");
    if !image.contains('/') {
        return false;
    }
    let host = first.rsplit_once(':').map(|(h, _)| h).unwrap_or(first);
    host == "localhost" || host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

impl NodeAgent {
    /// The pod's `imagePullSecrets` that exist and are of type `kubernetes.io/dockerconfigjson`,
    /// written out as podman auth files (the kubelet skips missing ones too).
    pub(super) fn pull_authfiles(&self, run: &PodRun, spec: &Value) -> Vec<PathBuf> {
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
    pub(super) async fn ensure_image(
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
}
