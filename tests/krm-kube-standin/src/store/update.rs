//! Changing existing objects: PUT, PATCH and the stand-in's own in-place changes; what an update
//! keeps of the stored object, the resourceVersion precondition and the generation bump.

use super::admission::fold_string_data;
use super::delete::deletion_done;
use super::{Gr, Inner, PatchType, Store};
use crate::error::ApiError;
use crate::patch;
use crate::resources::{self, ResourceDef};
use crate::util::{meta_mut, meta_str};
use serde_json::{Value, json};
use std::sync::Arc;

/// Everything but `metadata` (and `status` when the type has a status subresource): a change
/// there bumps `metadata.generation`.
fn generation_view(def: &ResourceDef, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        if def.status {
            m.remove("status");
        }
    }
    v
}

fn without_rv(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

impl Store {
    /// PUT (main resource or `/status`).
    pub fn update(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        body: Value,
        status_sub: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let ns = if def.namespaced { ns } else { "" };
        let mut inner = self.lock();
        let current = inner
            .get(&def.gr(), ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        if let Some(bn) = meta_str(&body, "name")
            && bn != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({bn}) does not match the name on the URL ({name})"
            )));
        }
        check_rv(def, name, &current, &body)?;
        let new = merge_update(def, &current, body, status_sub)?;
        Self::finish_write(&mut inner, def, ns, name, &current, new, dry_run)
    }

    /// PATCH (main resource or `/status`). Server-side apply creates the object when missing.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        kind: PatchType,
        body: &Value,
        status_sub: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let ns = if def.namespaced { ns } else { "" };
        let current = {
            let inner = self.lock();
            inner.get(&def.gr(), ns, name).cloned()
        };
        let Some(current) = current else {
            if kind == PatchType::Apply && !status_sub {
                let mut obj = body.clone();
                if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
                meta_mut(&mut obj).insert("name".into(), name.into());
                return self.create(def, ns, obj, dry_run);
            }
            return Err(ApiError::not_found(def, name));
        };
        let mut inner = self.lock();
        // Re-read under the lock: the patch applies to the latest state.
        let current = inner.get(&def.gr(), ns, name).cloned().unwrap_or(current);
        let mut patched = current.clone();
        let res = match kind {
            PatchType::Merge | PatchType::Apply => {
                patch::merge_patch(&mut patched, body);
                Ok(())
            }
            PatchType::Strategic => {
                if !def.builtin {
                    return Err(ApiError::unsupported_media_type(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                    ));
                }
                patch::strategic_merge_patch(&mut patched, body)
            }
            PatchType::Json => patch::json_patch(&mut patched, body),
        };
        res.map_err(|e| ApiError::invalid(def, name, e))?;
        if kind == PatchType::Apply {
            // Apply bodies carry no resourceVersion precondition unless the client set one.
            if body.pointer("/metadata/resourceVersion").is_none() {
                meta_mut(&mut patched).insert(
                    "resourceVersion".into(),
                    meta_str(&current, "resourceVersion").unwrap_or("").into(),
                );
            }
        }
        check_rv(def, name, &current, &patched)?;
        let new = merge_update(def, &current, patched, status_sub)?;
        Self::finish_write(&mut inner, def, ns, name, &current, new, dry_run)
    }

    fn finish_write(
        inner: &mut Inner,
        def: &ResourceDef,
        ns: &str,
        name: &str,
        current: &Value,
        mut new: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if generation_view(def, current) != generation_view(def, &new) {
            let g = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            meta_mut(&mut new).insert("generation".into(), (g + 1).into());
        }
        if without_rv(&new) == without_rv(current) {
            return Ok(current.clone());
        }
        if dry_run {
            return Ok(new);
        }
        if def.group == "apiextensions.k8s.io"
            && let Ok(d) = resources::from_crd(&new)
        {
            inner.defs.insert(d.gr(), Arc::new(d));
        }
        let g = def.gr();
        let out = if deletion_done(&new) {
            inner.commit(&g, ns, name, Some(new));
            let removed = inner.commit(&g, ns, name, None).expect("present");
            Self::after_removal(inner, def, &removed);
            removed
        } else {
            inner.commit(&g, ns, name, Some(new)).expect("committed")
        };
        inner.settle();
        Ok(out)
    }

    /// Changes an object in place on behalf of the stand-in itself (node agent): no
    /// preconditions, no generation bump. Returns the new state, or `None` when the object is
    /// gone or its uid differs from `uid`.
    pub fn mutate(
        &self,
        g: &Gr,
        ns: &str,
        name: &str,
        uid: &str,
        f: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let mut inner = self.lock();
        let current = inner.get(g, ns, name)?.clone();
        if meta_str(&current, "uid") != Some(uid) {
            return None;
        }
        let mut next = current.clone();
        f(&mut next);
        if next == current {
            return Some(current);
        }
        let out = inner.commit(g, ns, name, Some(next));
        inner.settle();
        out
    }
}

fn check_rv(def: &ResourceDef, name: &str, current: &Value, body: &Value) -> Result<(), ApiError> {
    match meta_str(body, "resourceVersion") {
        Some(rv) if !rv.is_empty() && Some(rv) != meta_str(current, "resourceVersion") => {
            Err(ApiError::stale(def, name))
        }
        _ => Ok(()),
    }
}

/// The object an update produces: system metadata kept, status or the rest kept depending on
/// the subresource.
fn merge_update(
    def: &ResourceDef,
    current: &Value,
    body: Value,
    status_sub: bool,
) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be an object",
        ));
    }
    let mut new = if status_sub {
        let mut n = current.clone();
        match body.get("status") {
            Some(s) => n["status"] = s.clone(),
            None => {
                n.as_object_mut().expect("object").remove("status");
            }
        }
        n
    } else {
        let mut n = body;
        if def.status {
            match current.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    n.as_object_mut().expect("object").remove("status");
                }
            }
        }
        n
    };
    new["apiVersion"] = current["apiVersion"].clone();
    new["kind"] = current["kind"].clone();
    let cur_meta = current
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let meta = meta_mut(&mut new);
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match cur_meta.get(k) {
            Some(v) => {
                meta.insert(k.into(), v.clone());
            }
            None => {
                meta.remove(k);
            }
        }
    }
    if status_sub {
        // Status writes never change metadata.
        *meta = cur_meta.as_object().cloned().unwrap_or_default();
    }
    if def.group.is_empty() && def.plural == "services" {
        for k in ["clusterIP", "clusterIPs"] {
            if new
                .pointer(&format!("/spec/{k}"))
                .is_none_or(|v| v.is_null() || v == "")
                && let Some(v) = current.pointer(&format!("/spec/{k}"))
            {
                new["spec"][k] = v.clone();
            }
        }
    }
    if def.group.is_empty() && def.plural == "secrets" {
        fold_string_data(&mut new);
    }
    if def.group.is_empty() && def.plural == "pods" && !status_sub {
        // Pod specs are (nearly) immutable; the node agent owns nodeName.
        if let Some(v) = current.pointer("/spec/nodeName") {
            new["spec"]["nodeName"] = v.clone();
        }
    }
    Ok(new)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::gr;

    #[test]
    fn no_op_writes_keep_the_resource_version() {
        let store = Store::new();
        let g = gr("", "configmaps");
        let def = store.resolve("", "v1", "configmaps").unwrap();
        let c = store
            .create_internal(
                &g,
                json!({"metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}}),
            )
            .unwrap();
        let same = store
            .patch(
                &def,
                "default",
                "c",
                PatchType::Merge,
                &json!({"data": {"a": "1"}}),
                false,
                false,
            )
            .unwrap();
        assert_eq!(
            meta_str(&same, "resourceVersion"),
            meta_str(&c, "resourceVersion")
        );
    }
}
