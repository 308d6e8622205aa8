//! What the API server does to an object before storing it: defaults, validation, cluster IPs,
//! Secrets' `stringData`.

use super::Inner;
use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::util;
use serde_json::{Value, json};
use std::collections::BTreeSet;

pub(super) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

pub(super) fn is_dns_label(s: &str) -> bool {
    is_dns_subdomain(s) && s.len() <= 63 && !s.contains('.')
}

pub(super) fn default_and_validate_pod(
    def: &ResourceDef,
    name: &str,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let spec = pod
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ApiError::invalid(def, name, "spec: Required value"))?;
    let mut errors = Vec::new();
    if spec
        .get("containers")
        .and_then(Value::as_array)
        .is_none_or(|c| c.is_empty())
    {
        errors.push("spec.containers: Required value".to_string());
    }
    let defaults: [(&str, Value); 5] = [
        ("restartPolicy", "Always".into()),
        ("terminationGracePeriodSeconds", 30.into()),
        ("dnsPolicy", "ClusterFirst".into()),
        ("schedulerName", "default-scheduler".into()),
        ("securityContext", json!({})),
    ];
    for (k, v) in defaults {
        spec.entry(k).or_insert(v);
    }
    let mut seen = BTreeSet::new();
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for (i, c) in cs.iter_mut().enumerate() {
            let cname = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !is_dns_label(&cname) {
                errors.push(format!("spec.{list}[{i}].name: Invalid value: {cname:?}"));
            } else if !seen.insert(cname.clone()) {
                errors.push(format!("spec.{list}[{i}].name: Duplicate value: {cname:?}"));
            }
            let image = c
                .get("image")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if image.is_empty() {
                errors.push(format!("spec.{list}[{i}].image: Required value"));
            }
            let Some(cm) = c.as_object_mut() else {
                continue;
            };
            cm.entry("terminationMessagePath")
                .or_insert("/dev/termination-log".into());
            cm.entry("terminationMessagePolicy")
                .or_insert("File".into());
            let tagged = image
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains(':') || last.contains('@'));
            let policy = if !tagged || image.ends_with(":latest") {
                "Always"
            } else {
                "IfNotPresent"
            };
            cm.entry("imagePullPolicy").or_insert(policy.into());
            cm.entry("resources").or_insert(json!({}));
            if let Some(ports) = cm.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    if let Some(pm) = p.as_object_mut() {
                        pm.entry("protocol").or_insert("TCP".into());
                    }
                }
            }
            for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                if let Some(pm) = cm.get_mut(probe).and_then(Value::as_object_mut) {
                    pm.entry("periodSeconds").or_insert(10.into());
                    pm.entry("timeoutSeconds").or_insert(1.into());
                    pm.entry("successThreshold").or_insert(1.into());
                    pm.entry("failureThreshold").or_insert(3.into());
                }
            }
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(def, name, errors.join(", ")));
    }
    pod["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
    Ok(())
}

pub(super) fn default_and_validate_service(
    def: &ResourceDef,
    name: &str,
    svc: &mut Value,
) -> Result<(), ApiError> {
    if !svc.get("spec").is_some_and(Value::is_object) {
        svc["spec"] = json!({});
    }
    let spec = svc["spec"].as_object_mut().expect("object");
    spec.entry("type").or_insert("ClusterIP".into());
    spec.entry("sessionAffinity").or_insert("None".into());
    spec.entry("ipFamilies").or_insert(json!(["IPv4"]));
    spec.entry("ipFamilyPolicy").or_insert("SingleStack".into());
    spec.entry("internalTrafficPolicy")
        .or_insert("Cluster".into());
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports = spec.get_mut("ports").and_then(Value::as_array_mut);
    match ports {
        Some(ps) if !ps.is_empty() => {
            for (i, p) in ps.iter_mut().enumerate() {
                let Some(pm) = p.as_object_mut() else {
                    continue;
                };
                let port = pm.get("port").and_then(Value::as_i64).unwrap_or(0);
                if !(1..=65535).contains(&port) {
                    return Err(ApiError::invalid(
                        def,
                        name,
                        format!(
                            "spec.ports[{i}].port: Invalid value: {port}: must be between 1 and 65535, inclusive"
                        ),
                    ));
                }
                pm.entry("protocol").or_insert("TCP".into());
                pm.entry("targetPort").or_insert(port.into());
            }
        }
        _ if headless => {}
        _ => return Err(ApiError::invalid(def, name, "spec.ports: Required value")),
    }
    svc["status"] = json!({"loadBalancer": {}});
    Ok(())
}

pub(super) fn allocate_cluster_ip(
    inner: &mut Inner,
    ns: &str,
    name: &str,
    svc: &mut Value,
) -> Result<(), ApiError> {
    let requested = svc
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if requested == "None" {
        svc["spec"]["clusterIPs"] = json!(["None"]);
        return Ok(());
    }
    let addr = |o: u8| std::net::Ipv4Addr::new(127, 0, 1, o);
    let (octet, lock) = if requested.is_empty() {
        (1..=254u8)
            .filter(|o| !inner.cluster_ips.contains_key(o))
            .find_map(|o| util::lock_address(addr(o)).map(|f| (o, f)))
            .ok_or_else(|| ApiError::internal("no cluster IP left in 127.0.1.0/24"))?
    } else {
        let o = requested
            .strip_prefix("127.0.1.")
            .and_then(|o| o.parse::<u8>().ok())
            .filter(|o| *o > 0 && *o < 255)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "spec.clusterIP {requested:?}: the stand-in only allocates from 127.0.1.0/24"
                ))
            })?;
        let lock = (!inner.cluster_ips.contains_key(&o))
            .then(|| util::lock_address(addr(o)))
            .flatten()
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "spec.clusterIP {requested:?}: provided IP is already allocated"
                ))
            })?;
        (o, lock)
    };
    inner
        .cluster_ips
        .insert(octet, ((ns.to_string(), name.to_string()), lock));
    let ip = format!("127.0.1.{octet}");
    svc["spec"]["clusterIP"] = ip.clone().into();
    svc["spec"]["clusterIPs"] = json!([ip]);
    Ok(())
}

/// Secrets: `stringData` is write-only and folds into base64 `data`, as on a real server.
pub(super) fn fold_string_data(secret: &mut Value) {
    use base64::Engine;
    let Some(m) = secret.as_object_mut() else {
        return;
    };
    let Some(Value::Object(sd)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (k, v) in sd {
        let s = v.as_str().unwrap_or("").to_string();
        data[k.as_str()] = base64::engine::general_purpose::STANDARD.encode(s).into();
    }
}
