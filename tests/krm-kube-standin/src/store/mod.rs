//! The object store: every object as JSON, one global monotonic resourceVersion, a bounded
//! event history for watches that resume, and the few controllers a real cluster would run
//! (endpoints and EndpointSlices for services, namespace termination, CRD registration).
//!
//! Every change goes through [`Inner::commit`], which stamps the resourceVersion, records the
//! event and broadcasts it. The requests that lead there live by verb: [`create`] (with what
//! the API server does to an object before storing it in [`admission`]), [`update`] (PUT,
//! PATCH, in-place changes), [`delete`], [`list`] and [`watch`]; what the cluster's controllers
//! do afterwards is in [`controllers`].
//!
//! All of it sits behind one mutex: the stand-in is for tests, where simplicity and
//! deterministic ordering matter more than throughput.

use crate::error::ApiError;
use crate::resources::{self, ResourceDef};
use crate::util::meta_mut;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

mod admission;
mod controllers;
mod create;
mod delete;
mod list;
mod update;
mod watch;

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

    /// Every object of a type (all namespaces).
    pub fn all(&self, g: &Gr) -> Vec<Value> {
        self.lock()
            .objects
            .get(g)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// A fresh store holding one ConfigMap per name in namespace `default`, with the ConfigMap type
/// and the created objects, for unit tests that need a few plain objects.
#[cfg(test)]
fn store_with_configmaps(names: &[&str]) -> (Store, Arc<ResourceDef>, Vec<Value>) {
    let store = Store::new();
    let def = store.resolve("", "v1", "configmaps").expect("configmaps");
    let created = names
        .iter()
        .map(|name| {
            store
                .create_internal(
                    &def.gr(),
                    json!({"metadata": {"name": name, "namespace": "default"}}),
                )
                .expect("created")
        })
        .collect();
    (store, def, created)
}
