//! The object store: every object as JSON, one global monotonic resourceVersion, a bounded
//! event history for watches that resume, and the few controllers a real cluster would run
//! (endpoints and EndpointSlices for services, namespace termination, CRD registration):
//! those in [`controllers`], what the API server does to an object before storing it in
//! [`admission`].
//!
//! All of it sits behind one mutex: the stand-in is for tests, where simplicity and
//! deterministic ordering matter more than throughput.

use crate::error::ApiError;
use crate::patch;
use crate::resources::{self, ResourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::util::{self, meta_mut, meta_str};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

mod admission;
mod controllers;

use admission::{
    allocate_cluster_ip, default_and_validate_pod, default_and_validate_service, fold_string_data,
    is_dns_label, is_dns_subdomain,
};
pub use controllers::{SLICE_MANAGED_BY, pod_ready};

/// `(group, plural)`.
pub type Gr = (String, String);

/// How many past events are kept for watches that resume from a resourceVersion.
const HISTORY: usize = 20_000;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object removed.
    Deleted,
}

impl EventKind {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change, as recorded in the history and broadcast to watchers.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// Type of the object.
    pub gr: Gr,
    /// Namespace (`""` for cluster-scoped).
    pub ns: String,
    /// resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventKind,
    /// The object after the change (before, for deletions; with the deletion's resourceVersion).
    pub object: Value,
    /// The object before a modification (for selector transitions).
    pub old: Option<Value>,
}

/// Start of a watch: first events, live receiver, resourceVersion covered by the first part.
pub type WatchStart = (
    Vec<Arc<WatchEvent>>,
    broadcast::Receiver<Arc<WatchEvent>>,
    u64,
);

/// Patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/json-patch+json`
    Json,
    /// `application/apply-patch+yaml` (server-side apply, treated as a merge patch)
    Apply,
}

/// Result of a delete.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone (its last state).
    Removed(Value),
    /// Deletion is in progress (graceful termination or finalizers).
    Pending(Value),
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `gracePeriodSeconds`.
    pub grace: Option<i64>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// A page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Matching objects.
    pub items: Vec<Value>,
    /// resourceVersion of the list.
    pub rv: u64,
    /// Continue token when more items remain.
    pub cont: Option<String>,
    /// How many items remain after this page.
    pub remaining: usize,
}

struct Inner {
    rv: u64,
    history_cap: usize,
    defs: BTreeMap<Gr, Arc<ResourceDef>>,
    objects: HashMap<Gr, BTreeMap<(String, String), Value>>,
    history: VecDeque<Arc<WatchEvent>>,
    cluster_ips: BTreeMap<u8, ((String, String), std::fs::File)>,
    dirty_endpoints: BTreeSet<String>,
    dirty_namespaces: BTreeSet<String>,
    /// An object went away or one naming owners changed: the garbage collector has work.
    collect_garbage: bool,
    tx: broadcast::Sender<Arc<WatchEvent>>,
}

/// The object store. Cheap to share (`Arc<Store>`).
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<WatchEvent>>,
}

fn gr(group: &str, plural: &str) -> Gr {
    (group.to_string(), plural.to_string())
}

fn pods_gr() -> Gr {
    gr("", "pods")
}

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

fn finalizers_empty(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty())
}

fn deletion_done(obj: &Value) -> bool {
    let meta = obj.get("metadata");
    meta.and_then(|m| m.get("deletionTimestamp")).is_some()
        && finalizers_empty(obj)
        && meta
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
}

impl Inner {
    fn map(&mut self, g: &Gr) -> &mut BTreeMap<(String, String), Value> {
        self.objects.entry(g.clone()).or_default()
    }

    fn get(&self, g: &Gr, ns: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(g)?
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Records a change: new resourceVersion, history, broadcast, controller bookkeeping.
    fn commit(&mut self, g: &Gr, ns: &str, name: &str, new: Option<Value>) -> Option<Value> {
        self.rv += 1;
        let rv = self.rv;
        let key = (ns.to_string(), name.to_string());
        let (kind, object, old) = match new {
            Some(mut obj) => {
                meta_mut(&mut obj).insert("resourceVersion".into(), rv.to_string().into());
                let old = self.map(g).insert(key, obj.clone());
                let kind = if old.is_some() {
                    EventKind::Modified
                } else {
                    EventKind::Added
                };
                (kind, obj, old)
            }
            None => {
                let mut obj = self.map(g).remove(&key)?;
                meta_mut(&mut obj).insert("resourceVersion".into(), rv.to_string().into());
                if g.0.is_empty() && g.1 == "services" {
                    self.cluster_ips
                        .retain(|_, (k, _)| *k != (ns.into(), name.into()));
                }
                (EventKind::Deleted, obj, None)
            }
        };
        if g.0.is_empty() && (g.1 == "pods" || g.1 == "services") {
            self.dirty_endpoints.insert(ns.to_string());
        }
        if kind == EventKind::Deleted && !ns.is_empty() {
            self.dirty_namespaces.insert(ns.to_string());
        }
        if kind == EventKind::Deleted || object.pointer("/metadata/ownerReferences").is_some() {
            self.collect_garbage = true;
        }
        let ev = Arc::new(WatchEvent {
            gr: g.clone(),
            ns: ns.to_string(),
            rv,
            kind,
            object: object.clone(),
            old,
        });
        if self.history.len() >= self.history_cap {
            self.history.pop_front();
        }
        self.history.push_back(ev.clone());
        let _ = self.tx.send(ev);
        Some(object)
    }

    fn new_object_meta(obj: &mut Value) {
        let meta = meta_mut(obj);
        meta.insert("uid".into(), util::new_uid().into());
        meta.insert("creationTimestamp".into(), util::now_rfc3339().into());
        meta.remove("resourceVersion");
        meta.remove("deletionTimestamp");
        meta.remove("deletionGracePeriodSeconds");
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    /// A store with the built-in types and the usual namespaces (`default`, `kube-system`,
    /// `kube-public`, `kube-node-lease`).
    pub fn new() -> Self {
        Self::with_history(HISTORY)
    }

    /// A store keeping `cap` past events for watches that resume (older ones get `410`).
    pub fn with_history(cap: usize) -> Self {
        let (tx, _) = broadcast::channel(8192);
        let mut defs = BTreeMap::new();
        for d in resources::builtins() {
            defs.insert(d.gr(), Arc::new(d));
        }
        let store = Self {
            inner: Mutex::new(Inner {
                rv: 0,
                history_cap: cap.max(1),
                defs,
                objects: HashMap::new(),
                history: VecDeque::new(),
                cluster_ips: BTreeMap::new(),
                dirty_endpoints: BTreeSet::new(),
                dirty_namespaces: BTreeSet::new(),
                collect_garbage: false,
                tx: tx.clone(),
            }),
            tx,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            store
                .create_internal(&gr("", "namespaces"), json!({"metadata": {"name": ns}}))
                .expect("namespace");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All served types.
    pub fn defs(&self) -> Vec<Arc<ResourceDef>> {
        self.lock().defs.values().cloned().collect()
    }

    /// The type served at `group/version/plural`, if any.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        let d = self.lock().defs.get(&gr(group, plural)).cloned()?;
        d.versions.iter().any(|v| v == version).then_some(d)
    }

    /// Current resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Subscribes to every future change.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.tx.subscribe()
    }

    /// Starting point of a watch: the events to send first (replayed history after `rv`, or
    /// synthetic ADDED events for the current objects when `rv` is absent or `0`), a receiver for
    /// later events, and the resourceVersion up to which the first part goes.
    pub fn watch_start(
        &self,
        g: &Gr,
        rv: Option<u64>,
        send_initial: bool,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let rx = self.tx.subscribe();
        let now = inner.rv;
        let initial = match rv {
            Some(r) if r > 0 && !send_initial => {
                if r < now && inner.history.front().is_some_and(|e| e.rv > r + 1) {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {r} ({})",
                        inner.history.front().map(|e| e.rv - 1).unwrap_or(now)
                    )));
                }
                inner
                    .history
                    .iter()
                    .filter(|e| e.rv > r && e.gr == *g)
                    .cloned()
                    .collect()
            }
            _ => inner
                .objects
                .get(g)
                .map(|m| {
                    m.iter()
                        .map(|((ns, _), v)| {
                            Arc::new(WatchEvent {
                                gr: g.clone(),
                                ns: ns.clone(),
                                rv: meta_str(v, "resourceVersion")
                                    .and_then(|s| s.parse().ok())
                                    .unwrap_or(now),
                                kind: EventKind::Added,
                                object: v.clone(),
                                old: None,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        Ok((initial, rx, now))
    }

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

    /// GET one object.
    pub fn get(&self, def: &ResourceDef, ns: &str, name: &str) -> Result<Value, ApiError> {
        let ns = if def.namespaced { ns } else { "" };
        self.lock()
            .get(&def.gr(), ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))
    }

    /// GET one object by type key, if present (for the node agent).
    pub fn get_gr(&self, g: &Gr, ns: &str, name: &str) -> Option<Value> {
        self.lock().get(g, ns, name).cloned()
    }

    /// LIST with selectors and paging (`limit`, `continue`).
    pub fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let after: Option<(String, String)> = match cont {
            Some(c) if !c.is_empty() => {
                let raw =
                    decode_hex(c).ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                let (a, b) = raw
                    .split_once('\u{0}')
                    .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                Some((a.to_string(), b.to_string()))
            }
            _ => None,
        };
        let inner = self.lock();
        let matching: Vec<(&(String, String), &Value)> = inner
            .objects
            .get(&def.gr())
            .map(|m| {
                m.iter()
                    .filter(|((n, _), _)| ns.is_none_or(|want| !def.namespaced || want == n))
                    .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
                    .filter(|(_, v)| labels.matches(v) && fields.matches(v))
                    .collect()
            })
            .unwrap_or_default();
        let take = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let remaining = matching.len().saturating_sub(take);
        let items: Vec<Value> = matching
            .iter()
            .take(take)
            .map(|(_, v)| (*v).clone())
            .collect();
        let cont = (remaining > 0).then(|| {
            let (k, _) = matching[take - 1];
            encode_hex(&format!("{}\u{0}{}", k.0, k.1))
        });
        Ok(ListPage {
            items,
            rv: inner.rv,
            cont,
            remaining,
        })
    }

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

    fn after_removal(inner: &mut Inner, def: &ResourceDef, removed: &Value) {
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

    fn delete_locked(
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
        if let Some(uid) = &opts.uid
            && meta_str(&current, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::conflict(
                def,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&current, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.resource_version
            && meta_str(&current, "resourceVersion") != Some(rv.as_str())
        {
            return Err(ApiError::conflict(
                def,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&current, "resourceVersion").unwrap_or("")
                ),
            ));
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

    /// Every object of a type (all namespaces).
    pub fn all(&self, g: &Gr) -> Vec<Value> {
        self.lock()
            .objects
            .get(g)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
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

fn encode_hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A JSON object with a string map, for building labels.
pub fn string_map(pairs: &[(&str, &str)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_from_a_forgotten_resource_version_is_gone() {
        let store = Store::with_history(5);
        let g = gr("", "configmaps");
        for i in 0..10 {
            store
                .create_internal(
                    &g,
                    json!({"metadata": {"name": format!("c{i}"), "namespace": "default"}}),
                )
                .unwrap();
        }
        let now = store.current_rv();
        let err = store.watch_start(&g, Some(1), false).unwrap_err();
        assert_eq!((err.code, err.reason), (410, "Expired"));
        let (replay, _, _) = store.watch_start(&g, Some(now - 2), false).unwrap();
        assert_eq!(replay.len(), 2, "the last two creations are replayed");
        let (initial, _, _) = store.watch_start(&g, None, false).unwrap();
        assert_eq!(
            initial.len(),
            10,
            "no resourceVersion: every current object as ADDED"
        );
    }

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
