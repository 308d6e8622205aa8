//! The controllers a real cluster would run, reduced to what the stand-in's clients see:
//! endpoints and EndpointSlices for services, garbage collection of owned objects, namespace
//! termination.

use super::delete::finalizers_empty;
use super::{DeleteOptions, Gr, Inner, Store, gr, pods_gr};
use crate::resources::ResourceDef;
use crate::selector::LabelSelector;
use crate::util::{self, meta_mut, meta_str};
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Label the EndpointSlice controller puts on the slices it manages.
pub const SLICE_MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// Pod readiness as endpoints see it.
pub fn pod_ready(pod: &Value) -> bool {
    pod.get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

impl Inner {
    /// Runs the controllers until nothing is left to do.
    pub(super) fn settle(&mut self) {
        loop {
            let eps = std::mem::take(&mut self.dirty_endpoints);
            let nss = std::mem::take(&mut self.dirty_namespaces);
            let garbage = std::mem::take(&mut self.collect_garbage);
            if eps.is_empty() && nss.is_empty() && !garbage {
                return;
            }
            for ns in eps {
                self.sync_endpoints(&ns);
            }
            for ns in nss {
                self.maybe_finish_namespace(&ns);
            }
            if garbage {
                self.delete_orphans();
            }
        }
    }

    /// kube-controller-manager's garbage collector, background propagation: an object whose
    /// owners are all gone is deleted (a pod gracefully). An owner is looked up by kind in the
    /// dependent's own namespace (cluster-wide for cluster-scoped kinds) and must carry the
    /// referenced uid, so an owner in another namespace counts as gone, as on a real cluster.
    /// Owners of unknown kinds count as present; dangling references next to a live owner are
    /// left in place (a real collector removes them).
    fn delete_orphans(&mut self) {
        let by_kind: HashMap<(&str, &str), &Arc<ResourceDef>> = self
            .defs
            .values()
            .map(|def| ((def.group.as_str(), def.kind.as_str()), def))
            .collect();
        let owner_present = |ns: &str, reference: &Value| {
            let group = reference
                .get("apiVersion")
                .and_then(Value::as_str)
                .and_then(|v| v.rsplit_once('/'))
                .map_or("", |(group, _)| group);
            let kind = reference.get("kind").and_then(Value::as_str).unwrap_or("");
            let Some(def) = by_kind.get(&(group, kind)) else {
                return true;
            };
            let ns = if def.namespaced { ns } else { "" };
            let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
            self.get(&def.gr(), ns, name).is_some_and(|owner| {
                meta_str(owner, "uid") == reference.get("uid").and_then(Value::as_str)
            })
        };
        let orphans: Vec<(Gr, String, String)> = self
            .objects
            .iter()
            .flat_map(|(g, objects)| {
                objects
                    .iter()
                    .filter(|(_, object)| {
                        object.pointer("/metadata/deletionTimestamp").is_none()
                            && object
                                .pointer("/metadata/ownerReferences")
                                .and_then(Value::as_array)
                                .is_some_and(|owners| !owners.is_empty())
                    })
                    .filter(|((ns, _), object)| {
                        let owners = object["metadata"]["ownerReferences"].as_array();
                        !owners.into_iter().flatten().any(|r| owner_present(ns, r))
                    })
                    .map(|((ns, name), _)| (g.clone(), ns.clone(), name.clone()))
            })
            .collect();
        for (g, ns, name) in orphans {
            let Some(def) = self.defs.get(&g).cloned() else {
                continue;
            };
            tracing::info!(kind = %def.kind, namespace = %ns, name = %name, "garbage collector: every owner is gone");
            let _ = Store::delete_locked(self, &def, &ns, &name, &DeleteOptions::default());
        }
    }

    fn maybe_finish_namespace(&mut self, ns: &str) {
        let nsg = gr("", "namespaces");
        let Some(obj) = self.get(&nsg, "", ns) else {
            return;
        };
        if obj
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_none()
        {
            return;
        }
        let empty = self
            .objects
            .iter()
            .all(|(_, m)| !m.keys().any(|(n, _)| n == ns));
        if empty && finalizers_empty(obj) {
            self.commit(&nsg, "", ns, None);
        }
    }

    /// Creates or updates a controller-owned object when its content differs.
    fn reconcile_owned(&mut self, g: &Gr, ns: &str, name: &str, desired: Value) {
        match self.get(g, ns, name).cloned() {
            Some(cur) => {
                let mut next = cur.clone();
                for (k, v) in desired.as_object().expect("object") {
                    if k == "metadata" {
                        let m = meta_mut(&mut next);
                        for (mk, mv) in v.as_object().expect("object") {
                            m.insert(mk.clone(), mv.clone());
                        }
                    } else {
                        next[k] = v.clone();
                    }
                }
                if let Some(m) = next.as_object_mut()
                    && desired.get("subsets").is_none()
                    && g.1 == "endpoints"
                {
                    m.remove("subsets");
                }
                if next != cur {
                    self.commit(g, ns, name, Some(next));
                }
            }
            None => {
                let mut obj = desired;
                Self::new_object_meta(&mut obj);
                self.commit(g, ns, name, Some(obj));
            }
        }
    }

    /// The endpoints and EndpointSlice controllers, for one namespace.
    fn sync_endpoints(&mut self, ns: &str) {
        let services: Vec<Value> = self
            .objects
            .get(&gr("", "services"))
            .map(|m| {
                m.iter()
                    .filter(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        let pods: Vec<Value> = self
            .objects
            .get(&pods_gr())
            .map(|m| {
                m.iter()
                    .filter(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        let epg = gr("", "endpoints");
        let slg = gr("discovery.k8s.io", "endpointslices");
        let mut wanted: BTreeSet<String> = BTreeSet::new();
        for svc in &services {
            let name = meta_str(svc, "name").unwrap_or("").to_string();
            let Some(sel) = svc
                .get("spec")
                .and_then(|s| s.get("selector"))
                .and_then(Value::as_object)
                .filter(|m| !m.is_empty())
            else {
                continue;
            };
            wanted.insert(name.clone());
            let sel = LabelSelector::from_map(sel);
            let mut members: Vec<&Value> = pods
                .iter()
                .filter(|p| sel.matches(p) && !util::path_str(p, "status.podIP").is_empty())
                .filter(|p| !matches!(util::path_str(p, "status.phase"), "Succeeded" | "Failed"))
                .collect();
            members.sort_by_key(|p| {
                let ip: std::net::Ipv4Addr = util::path_str(p, "status.podIP")
                    .parse()
                    .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
                (ip, meta_str(p, "name").unwrap_or("").to_string())
            });
            let svc_ports: Vec<Value> = svc
                .get("spec")
                .and_then(|s| s.get("ports"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let resolve = |port: &Value| -> Option<i64> {
                let target = port.get("targetPort").or_else(|| port.get("port"))?;
                if let Some(n) = target.as_i64() {
                    return Some(n);
                }
                let want = target.as_str()?;
                if let Ok(n) = want.parse() {
                    return Some(n);
                }
                members.iter().find_map(|p| {
                    p.get("spec")?
                        .get("containers")?
                        .as_array()?
                        .iter()
                        .flat_map(|c| {
                            c.get("ports")
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                        })
                        .find(|cp| cp.get("name").and_then(Value::as_str) == Some(want))?
                        .get("containerPort")?
                        .as_i64()
                })
            };
            let ports: Vec<Value> = svc_ports
                .iter()
                .filter_map(|p| {
                    let mut o = json!({
                        "port": resolve(p)?,
                        "protocol": p.get("protocol").and_then(Value::as_str).unwrap_or("TCP"),
                    });
                    if let Some(n) = p
                        .get("name")
                        .and_then(Value::as_str)
                        .filter(|n| !n.is_empty())
                    {
                        o["name"] = n.into();
                    }
                    Some(o)
                })
                .collect();
            let address = |p: &Value| {
                let mut a = json!({
                    "ip": util::path_str(p, "status.podIP"),
                    "targetRef": {
                        "kind": "Pod",
                        "namespace": ns,
                        "name": meta_str(p, "name").unwrap_or(""),
                        "uid": meta_str(p, "uid").unwrap_or(""),
                    },
                });
                let node = util::path_str(p, "spec.nodeName");
                if !node.is_empty() {
                    a["nodeName"] = node.into();
                }
                a
            };
            let terminating = |p: &Value| {
                p.get("metadata")
                    .and_then(|m| m.get("deletionTimestamp"))
                    .is_some()
            };
            let ready: Vec<Value> = members
                .iter()
                .filter(|p| pod_ready(p) && !terminating(p))
                .map(|p| address(p))
                .collect();
            let not_ready: Vec<Value> = members
                .iter()
                .filter(|p| !pod_ready(p) && !terminating(p))
                .map(|p| address(p))
                .collect();
            let labels = svc
                .get("metadata")
                .and_then(|m| m.get("labels"))
                .cloned()
                .unwrap_or_else(|| json!({}));
            let mut ep = json!({
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
            });
            if !ready.is_empty() || !not_ready.is_empty() {
                let mut subset = json!({"ports": ports});
                if !ready.is_empty() {
                    subset["addresses"] = Value::Array(ready);
                }
                if !not_ready.is_empty() {
                    subset["notReadyAddresses"] = Value::Array(not_ready);
                }
                ep["subsets"] = json!([subset]);
            }
            self.reconcile_owned(&epg, ns, &name, ep);

            // EndpointSlice
            let slice_eps: Vec<Value> = members
                .iter()
                .map(|p| {
                    let term = terminating(p);
                    let ready = pod_ready(p);
                    let a = address(p);
                    let mut e = json!({
                        "addresses": [a["ip"]],
                        "conditions": {"ready": ready && !term, "serving": ready, "terminating": term},
                        "targetRef": a["targetRef"],
                    });
                    if let Some(n) = a.get("nodeName") {
                        e["nodeName"] = n.clone();
                    }
                    e
                })
                .collect();
            let slice_ports: Vec<Value> = ports
                .iter()
                .map(|p| {
                    let mut q = p.clone();
                    if q.get("name").is_none() {
                        q["name"] = "".into();
                    }
                    q
                })
                .collect();
            let existing = self.objects.get(&slg).and_then(|m| {
                m.iter()
                    .find(|((n, _), v)| {
                        n == ns
                            && v.pointer("/metadata/labels/kubernetes.io~1service-name")
                                .and_then(Value::as_str)
                                == Some(name.as_str())
                            && v.pointer("/metadata/labels/endpointslice.kubernetes.io~1managed-by")
                                .and_then(Value::as_str)
                                == Some(SLICE_MANAGED_BY)
                    })
                    .map(|((_, n), _)| n.clone())
            });
            let slice_name =
                existing.unwrap_or_else(|| format!("{name}-{}", util::random_suffix(5)));
            let mut slice_labels = labels.as_object().cloned().unwrap_or_default();
            slice_labels.insert("kubernetes.io/service-name".into(), name.clone().into());
            slice_labels.insert(
                "endpointslice.kubernetes.io/managed-by".into(),
                SLICE_MANAGED_BY.into(),
            );
            let slice = json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": slice_name,
                    "namespace": ns,
                    "labels": slice_labels,
                    "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Service", "name": name,
                        "uid": meta_str(svc, "uid").unwrap_or(""),
                        "controller": true, "blockOwnerDeletion": true,
                    }],
                },
                "addressType": "IPv4",
                "endpoints": slice_eps,
                "ports": slice_ports,
            });
            self.reconcile_owned(&slg, ns, &slice_name, slice);
        }
        // Endpoints and slices of services that are gone (or lost their selector).
        self.delete_where(&epg, ns, |name, _| {
            !wanted.contains(name) && !services.iter().any(|s| meta_str(s, "name") == Some(name))
        });
        self.delete_where(&slg, ns, |_, v| {
            v.pointer("/metadata/labels/endpointslice.kubernetes.io~1managed-by")
                .and_then(Value::as_str)
                == Some(SLICE_MANAGED_BY)
                && !v
                    .pointer("/metadata/labels/kubernetes.io~1service-name")
                    .and_then(Value::as_str)
                    .is_some_and(|s| wanted.contains(s))
        });
    }

    /// Removes the objects of `gr` in namespace `ns` that `stale` picks (by name and object).
    fn delete_where(&mut self, gr: &Gr, ns: &str, stale: impl Fn(&str, &Value) -> bool) {
        let names: Vec<String> = self
            .objects
            .get(gr)
            .map(|m| {
                m.iter()
                    .filter(|((n, name), v)| n == ns && stale(name, v))
                    .map(|((_, name), _)| name.clone())
                    .collect()
            })
            .unwrap_or_default();
        for name in names {
            self.commit(gr, ns, &name, None);
        }
    }
}
