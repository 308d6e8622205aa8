//! Deleting objects: preconditions, graceful termination of pods bound to a node, finalizers,
//! namespaces emptied before they go, and the types a removed CRD took with it.

use super::{DeleteOptions, Deleted, Gr, Inner, Store, pods_gr};
use crate::error::ApiError;
use crate::resources::{self, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::util::{self, meta_mut, meta_str};
use serde_json::Value;

/// No finalizer holds the object back.
pub(super) fn finalizers_empty(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty())
}

/// A deletion has begun and nothing is left to wait for (finalizers, grace period): the object
/// goes now.
pub(super) fn deletion_done(obj: &Value) -> bool {
    let meta = obj.get("metadata");
    meta.and_then(|m| m.get("deletionTimestamp")).is_some()
        && finalizers_empty(obj)
        && meta
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
}

impl Store {
    pub(super) fn after_removal(inner: &mut Inner, def: &ResourceDef, removed: &Value) {
        if def.group == "apiextensions.k8s.io"
            && let Ok(d) = resources::from_crd(removed)
        {
            let g = d.gr();
            inner.defs.remove(&g);
            let keys: Vec<(String, String)> = inner
                .objects
                .get(&g)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            for (ns, n) in keys {
                inner.commit(&g, &ns, &n, None);
            }
        }
    }

    /// DELETE one object: graceful for pods bound to a node (deletionTimestamp +
    /// deletionGracePeriodSeconds until the node confirms), blocked by finalizers for all.
    pub fn delete(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let ns = if def.namespaced { ns } else { "" };
        let mut inner = self.lock();
        let out = Self::delete_locked(&mut inner, def, ns, name, opts)?;
        inner.settle();
        Ok(out)
    }

    pub(super) fn delete_locked(
        inner: &mut Inner,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, ApiError> {
        let g = def.gr();
        let current = inner
            .get(&g, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        let preconditions = [
            ("uid", "UID", &opts.uid),
            ("resourceVersion", "ResourceVersion", &opts.resource_version),
        ];
        for (field, label, wanted) in preconditions {
            if let Some(wanted) = wanted
                && meta_str(&current, field) != Some(wanted.as_str())
            {
                return Err(ApiError::conflict(
                    def,
                    name,
                    &format!(
                        "Precondition failed: {label} in precondition: {wanted}, {label} in object meta: {}",
                        meta_str(&current, field).unwrap_or("")
                    ),
                ));
            }
        }
        let is_pod = g == pods_gr();
        let graceful_pod = is_pod
            && !util::path_str(&current, "spec.nodeName").is_empty()
            && !matches!(
                util::path_str(&current, "status.phase"),
                "Succeeded" | "Failed"
            );
        let grace = if graceful_pod {
            opts.grace
                .or_else(|| {
                    current
                        .pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(30)
                .max(0)
        } else {
            0
        };
        let already = current.pointer("/metadata/deletionTimestamp").is_some();
        let mut next = current.clone();
        {
            let meta = meta_mut(&mut next);
            let cur_grace = meta
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            if !already || cur_grace.is_some_and(|c| grace < c) {
                meta.insert(
                    "deletionTimestamp".into(),
                    util::format_rfc3339(util::now_secs() + grace).into(),
                );
                meta.insert("deletionGracePeriodSeconds".into(), grace.into());
            }
        }
        if opts.dry_run {
            return Ok(Deleted::Pending(next));
        }
        if def.plural == "namespaces" && def.group.is_empty() {
            next["status"]["phase"] = "Terminating".into();
            if next != current {
                inner.commit(&g, "", name, Some(next.clone()));
            }
            let contents: Vec<(Gr, String)> = inner
                .objects
                .iter()
                .flat_map(|(g, m)| {
                    m.keys()
                        .filter(|(n, _)| n == name)
                        .map(|(_, obj)| (g.clone(), obj.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (cg, cname) in contents {
                if let Some(cdef) = inner.defs.get(&cg).cloned() {
                    let _ =
                        Self::delete_locked(inner, &cdef, name, &cname, &DeleteOptions::default());
                }
            }
            inner.dirty_namespaces.insert(name.to_string());
            inner.settle();
            return Ok(match inner.get(&g, "", name) {
                Some(v) => Deleted::Pending(v.clone()),
                None => Deleted::Removed(next),
            });
        }
        if deletion_done(&next) {
            if already {
                inner.commit(&g, ns, name, Some(next));
            }
            let removed = inner.commit(&g, ns, name, None).expect("present");
            Self::after_removal(inner, def, &removed);
            return Ok(Deleted::Removed(removed));
        }
        let out = if next != current {
            inner.commit(&g, ns, name, Some(next)).expect("committed")
        } else {
            current
        };
        Ok(Deleted::Pending(out))
    }

    /// DELETE on a collection (with selectors).
    pub fn delete_collection(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        let page = self.list(def, ns, labels, fields, None, None)?;
        let mut inner = self.lock();
        let mut out = Vec::new();
        for item in page.items {
            let ins = meta_str(&item, "namespace").unwrap_or("").to_string();
            let name = meta_str(&item, "name").unwrap_or("").to_string();
            match Self::delete_locked(&mut inner, def, &ins, &name, opts) {
                Ok(Deleted::Removed(v)) | Ok(Deleted::Pending(v)) => out.push(v),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        inner.settle();
        Ok(out)
    }

    /// The node's confirmation that a terminating pod's containers are gone: the pod object is
    /// removed once its finalizers allow.
    pub fn finish_pod_termination(&self, ns: &str, name: &str, uid: &str) {
        let def = self.lock().defs.get(&pods_gr()).cloned().expect("pods");
        let _ = self.delete(
            &def,
            ns,
            name,
            &DeleteOptions {
                grace: Some(0),
                uid: Some(uid.to_string()),
                ..Default::default()
            },
        );
        // A pod with finalizers keeps deletionGracePeriodSeconds = 0 and waits for them.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::store_with_configmaps;

    #[test]
    fn failed_preconditions_name_the_field_and_keep_the_object() {
        let (store, def, created) = store_with_configmaps(&["c"]);
        let uid = meta_str(&created[0], "uid").unwrap().to_string();
        let rv = meta_str(&created[0], "resourceVersion")
            .unwrap()
            .to_string();
        let cases = [
            (
                DeleteOptions {
                    uid: Some("not-the-uid".into()),
                    ..Default::default()
                },
                format!("UID in precondition: not-the-uid, UID in object meta: {uid}"),
            ),
            (
                DeleteOptions {
                    uid: Some(uid.clone()),
                    resource_version: Some("1".into()),
                    ..Default::default()
                },
                format!("ResourceVersion in precondition: 1, ResourceVersion in object meta: {rv}"),
            ),
        ];
        for (opts, expected) in cases {
            let err = store.delete(&def, "default", "c", &opts).unwrap_err();
            assert_eq!(err.code, 409, "{}", err.message);
            assert!(err.message.contains(&expected), "{}", err.message);
        }
        assert!(store.get(&def, "default", "c").is_ok());
    }
}
