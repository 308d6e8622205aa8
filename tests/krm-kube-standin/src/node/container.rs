//! A container spec as podman arguments: command, env, mounts, security context, published
//! ports, and the pod's volumes as host directories.

use super::{INSTANCE_LABEL, NodeAgent, POD_UID_LABEL, PodRun};
use crate::util;
use base64::Engine;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A security context setting of container `c`: its own, else the pod's.
fn security_setting<'a>(pod: &'a Value, c: &'a Value, key: &str) -> Option<&'a Value> {
    let set = |context: Option<&'a Value>| context?.get(key).filter(|v| !v.is_null());
    set(c.get("securityContext")).or_else(|| set(pod.pointer("/spec/securityContext")))
}

pub(super) enum VolumeError {
    Unsupported(String),
    Missing(String),
}

impl NodeAgent {
    /// The kubelet's runAsNonRoot check, or `None` when the container may start.
    pub(super) async fn non_root_violation(&self, pod: &Value, c: &Value) -> Option<String> {
        let pick = |k: &str| security_setting(pod, c, k);
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

    pub(super) fn lookup_key(&self, ns: &str, kind: &str, name: &str, key: &str) -> Option<String> {
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

    pub(super) fn run_args(
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
        // Security context: the container's settings override the pod's; the rest are the
        // container's alone.
        let pick = |k: &str| security_setting(pod, c, k);
        let csc = &c["securityContext"];
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

    pub(super) fn prepare_volumes(
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
}
