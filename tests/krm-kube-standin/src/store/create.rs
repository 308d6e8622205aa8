//! Creating objects: names (`generateName`, RFC 1123), system metadata, defaults and validation
//! per type, and the namespace that must exist and not be terminating.

use super::admission::{
    allocate_cluster_ip, default_and_validate_pod, default_and_validate_service, fold_string_data,
    is_dns_label, is_dns_subdomain,
};
use super::{Gr, Inner, Store, gr};
use crate::error::ApiError;
use crate::resources::{self, ResourceDef};
use crate::util::{self, meta_mut, meta_str};
use serde_json::{Value, json};
use std::sync::Arc;

impl Inner {
    pub(super) fn new_object_meta(obj: &mut Value) {
        let meta = meta_mut(obj);
        meta.insert("uid".into(), util::new_uid().into());
        meta.insert("creationTimestamp".into(), util::now_rfc3339().into());
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
}

impl Store {
    fn check_namespace(inner: &Inner, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
        if !def.namespaced {
            return Ok(());
        }
        match inner.get(&gr("", "namespaces"), "", ns) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n)
                if n.get("metadata")
                    .and_then(|m| m.get("deletionTimestamp"))
                    .is_some() =>
            {
                Err(ApiError::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    def.qualified(),
                    meta_str(n, "name").unwrap_or("")
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// Creates an object without client-facing checks (for the stand-in's own objects).
    pub fn create_internal(&self, g: &Gr, obj: Value) -> Result<Value, ApiError> {
        let def = self
            .lock()
            .defs
            .get(g)
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("unknown type {g:?}")))?;
        let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
        self.create(&def, &ns, obj, false)
    }

    /// POST: creates an object (`generateName`, uid, creationTimestamp, generation, defaults,
    /// validation, namespace checks).
    pub fn create(
        &self,
        def: &ResourceDef,
        ns: &str,
        mut body: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        if let Some(k) = body.get("kind").and_then(Value::as_str)
            && k != def.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {k:?} of the object does not match the resource {} ({})",
                def.qualified(),
                def.kind
            )));
        }
        let ns = if def.namespaced { ns } else { "" };
        let mut inner = self.lock();
        {
            let meta = meta_mut(&mut body);
            match meta.get("namespace").and_then(Value::as_str) {
                Some(bns) if def.namespaced && !bns.is_empty() && bns != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {}
            }
            if def.namespaced {
                meta.insert("namespace".into(), ns.into());
            } else {
                meta.remove("namespace");
            }
        }
        Self::check_namespace(&inner, def, ns)?;
        let g = def.gr();
        let mut name = meta_str(&body, "name").unwrap_or("").to_string();
        if name.is_empty() {
            let Some(prefix) = meta_str(&body, "generateName").filter(|p| !p.is_empty()) else {
                return Err(ApiError::invalid(
                    def,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            };
            let prefix = prefix.to_string();
            loop {
                name = format!("{prefix}{}", util::random_suffix(5));
                if inner.get(&g, ns, &name).is_none() {
                    break;
                }
            }
            meta_mut(&mut body).insert("name".into(), name.clone().into());
        }
        let label_only = matches!(def.plural.as_str(), "namespaces" | "services");
        let ok = if label_only {
            is_dns_label(&name)
        } else {
            is_dns_subdomain(&name)
        };
        if !ok {
            return Err(ApiError::invalid(
                def,
                &name,
                format!(
                    "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 {} must consist of lower case alphanumeric characters, '-'{}",
                    if label_only { "label" } else { "subdomain" },
                    if label_only { "" } else { " or '.'" }
                ),
            ));
        }
        if inner.get(&g, ns, &name).is_some() {
            return Err(ApiError::already_exists(def, &name));
        }
        Inner::new_object_meta(&mut body);
        meta_mut(&mut body).insert("generation".into(), 1.into());
        if def.group.is_empty() && def.plural == "secrets" {
            fold_string_data(&mut body);
        }
        body["apiVersion"] = def.storage_api_version().into();
        body["kind"] = def.kind.clone().into();
        let mut new_def: Option<ResourceDef> = None;
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "pods") => default_and_validate_pod(def, &name, &mut body)?,
            ("", "services") => {
                default_and_validate_service(def, &name, &mut body)?;
                if !dry_run {
                    allocate_cluster_ip(&mut inner, ns, &name, &mut body)?;
                }
            }
            ("", "namespaces") => {
                body["status"] = json!({"phase": "Active"});
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                let d = resources::from_crd(&body).map_err(|e| ApiError::invalid(def, &name, e))?;
                if inner.defs.contains_key(&d.gr()) {
                    return Err(ApiError::already_exists(def, &name));
                }
                body["status"] = json!({
                    "conditions": [
                        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                         "message": "no conflicts found", "lastTransitionTime": util::now_rfc3339()},
                        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                         "message": "the initial names have been accepted", "lastTransitionTime": util::now_rfc3339()},
                    ],
                    "acceptedNames": body["spec"]["names"].clone(),
                    "storedVersions": [d.versions[0].clone()],
                });
                new_def = Some(d);
            }
            _ => {
                if let Some(schema) = &def.schema {
                    resources::apply_schema_defaults(&mut body, schema);
                }
            }
        }
        if dry_run {
            return Ok(body);
        }
        let out = inner.commit(&g, ns, &name, Some(body)).expect("committed");
        if let Some(d) = new_def {
            inner.defs.insert(d.gr(), Arc::new(d));
        }
        inner.settle();
        Ok(out)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_fold_string_data() {
        let store = Store::new();
        let s = store
            .create_internal(
                &gr("", "secrets"),
                json!({"metadata": {"name": "s", "namespace": "default"}, "stringData": {"k": "v"}}),
            )
            .unwrap();
        assert_eq!(s["data"]["k"], "dg==");
        assert!(s.get("stringData").is_none());
    }
}
