//! Per-resource, per-path mutation records: what one invocation changed (a diff of the unit
//! before and after), merged over a sequence.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::api::{MutationInfo, MutationType, ResourceInfo, ResourceMutation};
use crate::path::escape;
use crate::resource::Unit;
use crate::yaml::{Doc, Kind, MAX_DEPTH, NodeId, Style};

/// Resources are matched by type and name without namespace, as ConfigHub does, so a
/// namespace change is an update of the same resource.
fn identity(info: &ResourceInfo) -> (&str, &str) {
    (&info.resource_type, &info.resource_name_without_scope)
}

/// How a value is recorded: strings as they are, other scalars in JSON, collections as
/// compact JSON.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A record as ConfigHub's yamlkit ComputeMutations writes it: every one with its predicate
/// set, so that a later patch or reset takes it.
fn info(mutation_type: MutationType, index: i64, value: String) -> MutationInfo {
    MutationInfo {
        mutation_type,
        index,
        predicate: true,
        value,
    }
}

/// The value a key names in a mapping's entries: linear for the small mappings resources
/// are made of, hashed for large ones.
struct Keys<'d> {
    doc: &'d Doc<'d>,
    entries: &'d [(NodeId, NodeId)],
    hashed: Option<HashMap<&'d str, NodeId>>,
}

impl<'d> Keys<'d> {
    const LINEAR: usize = 16;

    fn new(doc: &'d Doc<'d>, entries: &'d [(NodeId, NodeId)]) -> Self {
        let hashed = (entries.len() > Self::LINEAR).then(|| {
            entries
                .iter()
                .map(|&(key, value)| (doc.str(key).unwrap_or_default(), value))
                .collect()
        });
        Self {
            doc,
            entries,
            hashed,
        }
    }

    fn get(&self, key: &str) -> Option<NodeId> {
        match &self.hashed {
            Some(hashed) => hashed.get(key).copied(),
            None => self
                .entries
                .iter()
                .find(|&&(k, _)| self.doc.str(k).unwrap_or_default() == key)
                .map(|&(_, value)| value),
        }
    }
}

/// What one invocation changed in one resource: the paths where `new` differs from `old`.
struct TreeDiff<'d> {
    old: &'d Doc<'d>,
    new: &'d Doc<'d>,
    /// Collections written identically (same text at the same column) are equal: true unless
    /// a document holds aliases (whose targets may differ) or block scalars (whose content
    /// depends on the parent's indentation).
    verbatim: bool,
    index: i64,
    /// Keys (escaped) from the resource's root to the node being compared.
    path: Vec<Cow<'d, str>>,
    out: BTreeMap<String, MutationInfo>,
}

/// Whether a document's subtrees are determined by their text and column alone.
fn verbatim(doc: &Doc) -> bool {
    !doc.nodes.iter().any(|node| {
        matches!(
            node.kind,
            Kind::Alias(_)
                | Kind::Scalar {
                    style: Style::Block,
                    ..
                }
        )
    })
}

impl<'d> TreeDiff<'d> {
    fn written_alike(&self, before: NodeId, after: NodeId) -> bool {
        let (a, b) = (self.old.node(before), self.new.node(after));
        self.verbatim
            && a.col() == b.col()
            && self.old.src[a.start()..a.end()] == self.new.src[b.start()..b.end()]
    }

    fn record(&mut self, mutation_type: MutationType, value: &Value) {
        self.out.insert(
            self.path.join("."),
            info(mutation_type, self.index, render(value)),
        );
    }

    /// Records how `after` differs from `before` exactly as their JSON values differ
    /// (mappings by key, sequences by index, scalars by resolved value), without building
    /// those values: most of a changed resource is unchanged.
    fn nodes(&mut self, before: NodeId, after: NodeId, depth: usize) {
        // JSON conversion stops at this depth (deeper values are null on both sides).
        if depth > MAX_DEPTH || self.written_alike(before, after) {
            return;
        }
        let (old, new) = (self.old, self.new);
        let (before, after) = (old.deref(before), new.deref(after));
        match (&old.node(before).kind, &new.node(after).kind) {
            (Kind::Map(_), Kind::Map(_)) => {
                let (a, b) = (old.entries(before), new.entries(after));
                let (in_a, in_b) = (Keys::new(old, a), Keys::new(new, b));
                for &(key, value) in a {
                    let key = old.str(key).unwrap_or_default();
                    match in_b.get(key) {
                        Some(now) if self.written_alike(value, now) => {}
                        Some(now) => {
                            self.path.push(escape(key));
                            self.nodes(value, now, depth + 1);
                            self.path.pop();
                        }
                        None => {
                            self.path.push(escape(key));
                            self.record(MutationType::Delete, &old.to_json(value));
                            self.path.pop();
                        }
                    }
                }
                for &(key, value) in b {
                    let key = new.str(key).unwrap_or_default();
                    if in_a.get(key).is_none() {
                        self.path.push(escape(key));
                        self.record(MutationType::Add, &new.to_json(value));
                        self.path.pop();
                    }
                }
            }
            (Kind::Seq(_), Kind::Seq(_)) => {
                let (a, b) = (old.items(before), new.items(after));
                for i in 0..a.len().max(b.len()) {
                    self.path.push(i.to_string().into());
                    match (a.get(i), b.get(i)) {
                        (Some(&was), Some(&now)) => self.nodes(was, now, depth + 1),
                        (Some(&was), None) => self.record(MutationType::Delete, &old.to_json(was)),
                        (None, Some(&now)) => self.record(MutationType::Add, &new.to_json(now)),
                        (None, None) => {}
                    }
                    self.path.pop();
                }
            }
            _ => {
                let (a, b) = (old.to_json(before), new.to_json(after));
                if a != b {
                    let same_kind =
                        !a.is_object() && !a.is_array() && !b.is_object() && !b.is_array();
                    let mutation_type = if same_kind {
                        MutationType::Update
                    } else {
                        MutationType::Replace
                    };
                    self.record(mutation_type, &b);
                }
            }
        }
    }
}

/// Marks the end of a chain of resources of one identity in [`diff`].
const NONE_LEFT: usize = usize::MAX;

/// What invocation `index` changed, going from `before` to `after`, in the order of `after`
/// (removed resources last).
pub fn diff(before: &Unit, after: &Unit, index: usize) -> Vec<ResourceMutation> {
    let index = i64::try_from(index).unwrap_or(i64::MAX);
    // Each resource of `after` is matched with the first resource of `before` of the same
    // identity not matched yet: `unmatched` holds that first one, `later_alike` the next
    // resource of the same identity after each.
    let mut unmatched: HashMap<(&str, &str), usize> = HashMap::with_capacity(before.elements.len());
    let mut later_alike = vec![NONE_LEFT; before.elements.len()];
    for (i, element) in before.elements.iter().enumerate().rev() {
        if let Some(later) = unmatched.insert(identity(&element.info), i) {
            later_alike[i] = later;
        }
    }
    let mut matched_before = vec![false; before.elements.len()];
    let verbatim = verbatim(&before.doc) && verbatim(&after.doc);
    let mut mutations = Vec::new();
    for element in &after.elements {
        let matched = unmatched
            .get_mut(&identity(&element.info))
            .filter(|first| **first != NONE_LEFT)
            .map(|first| {
                let matched = *first;
                *first = later_alike[matched];
                matched
            });
        match matched {
            Some(i) => {
                matched_before[i] = true;
                let earlier = &before.elements[i];
                // Most resources of a sequence are untouched by each invocation.
                if before.element_text(earlier) == after.element_text(element) {
                    continue;
                }
                let mut tree = TreeDiff {
                    old: &before.doc,
                    new: &after.doc,
                    verbatim,
                    index,
                    path: Vec::new(),
                    out: BTreeMap::new(),
                };
                tree.nodes(earlier.root, element.root, 0);
                let paths = tree.out;
                if !paths.is_empty() {
                    mutations.push(ResourceMutation {
                        resource: element.info.clone(),
                        resource_mutation_info: info(MutationType::Update, index, String::new()),
                        path_mutation_map: paths,
                    });
                }
            }
            None => mutations.push(ResourceMutation {
                resource: element.info.clone(),
                resource_mutation_info: info(
                    MutationType::Add,
                    index,
                    after.element_text(element).to_owned(),
                ),
                path_mutation_map: BTreeMap::new(),
            }),
        }
    }
    for (element, matched) in before.elements.iter().zip(matched_before) {
        if !matched {
            mutations.push(ResourceMutation {
                resource: element.info.clone(),
                resource_mutation_info: info(
                    MutationType::Delete,
                    index,
                    before.element_text(element).to_owned(),
                ),
                path_mutation_map: BTreeMap::new(),
            });
        }
    }
    mutations
}

fn is_within(path: &str, ancestor: &str) -> bool {
    path.len() > ancestor.len()
        && path.starts_with(ancestor)
        && path.as_bytes()[ancestor.len()] == b'.'
}

/// Adds `newer` to `merged`: a later change to a path replaces the earlier one (and what was
/// recorded below it); a resource added in the sequence stays added.
pub fn merge(merged: &mut Vec<ResourceMutation>, newer: Vec<ResourceMutation>) {
    // Where each newer record goes: the first record of its resource, which may be one
    // appended from `newer` itself. Worked out on borrowed identities before anything moves.
    let targets: Vec<usize> = {
        let mut positions: HashMap<(&str, &str), usize> =
            HashMap::with_capacity(merged.len() + newer.len());
        for (i, mutation) in merged.iter().enumerate() {
            positions.entry(identity(&mutation.resource)).or_insert(i);
        }
        let mut appended = merged.len();
        newer
            .iter()
            .map(|mutation| {
                *positions
                    .entry(identity(&mutation.resource))
                    .or_insert_with(|| {
                        appended += 1;
                        appended - 1
                    })
            })
            .collect()
    };
    for (mutation, position) in newer.into_iter().zip(targets) {
        if position == merged.len() {
            merged.push(mutation);
            continue;
        }
        let existing = &mut merged[position];
        existing.resource = mutation.resource;
        let kept_add = existing.resource_mutation_info.mutation_type == MutationType::Add
            && mutation.resource_mutation_info.mutation_type == MutationType::Update;
        if kept_add {
            existing.resource_mutation_info.index = mutation.resource_mutation_info.index;
        } else {
            existing.resource_mutation_info = mutation.resource_mutation_info;
        }
        for (path, change) in mutation.path_mutation_map {
            existing
                .path_mutation_map
                .retain(|recorded, _| !is_within(recorded, &path));
            existing.path_mutation_map.insert(path, change);
        }
    }
}

/// Orders `mutations` as the resources of `unit`, the ones no longer there last.
pub fn order_by(mutations: &mut [ResourceMutation], unit: &Unit) {
    let mut positions: HashMap<(&str, &str), usize> = HashMap::with_capacity(unit.elements.len());
    for (i, element) in unit.elements.iter().enumerate() {
        positions.entry(identity(&element.info)).or_insert(i);
    }
    mutations.sort_by_cached_key(|m| {
        positions
            .get(&identity(&m.resource))
            .copied()
            .unwrap_or(usize::MAX)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: main
        image: nginx
---
apiVersion: v1
kind: Service
metadata:
  name: web
";

    #[test]
    fn paths_added_updated_and_deleted() {
        let after = BEFORE
            .replace("replicas: 1", "replicas: 3")
            .replace(
                "  name: web\nspec",
                "  name: web\n  labels:\n    app: web\nspec",
            )
            .replace("        image: nginx\n", "");
        let (before, after) = (
            crate::Toolchain::KubernetesYaml.parse(BEFORE).unwrap(),
            crate::Toolchain::KubernetesYaml.parse(&after).unwrap(),
        );
        let mutations = diff(&before, &after, 2);
        assert_eq!(mutations.len(), 1, "{mutations:#?}");
        let paths = &mutations[0].path_mutation_map;
        let summary: Vec<_> = paths
            .iter()
            .map(|(p, m)| format!("{p} {:?} {} @{}", m.mutation_type, m.value, m.index))
            .collect();
        assert_eq!(
            summary,
            [
                "metadata.labels Add {\"app\":\"web\"} @2",
                "spec.replicas Update 3 @2",
                "spec.template.spec.containers.0.image Delete nginx @2",
            ]
        );
    }

    #[test]
    fn aliases_are_followed_even_where_the_text_is_unchanged() {
        let before = "apiVersion: v1\nkind: K\nmetadata:\n  name: a\nx: &v 1\ny: *v\nz:\n  w: 1\n";
        let after = before.replace("&v 1", "&v 2").replace("w: 1", "w: 3");
        let (before, after) = (
            crate::Toolchain::KubernetesYaml.parse(before).unwrap(),
            crate::Toolchain::KubernetesYaml.parse(&after).unwrap(),
        );
        let mutations = diff(&before, &after, 0);
        let paths: Vec<_> = mutations[0]
            .path_mutation_map
            .iter()
            .map(|(p, m)| format!("{p} {:?} {}", m.mutation_type, m.value))
            .collect();
        assert_eq!(paths, ["x Update 2", "y Update 2", "z.w Update 3"]);
    }

    #[test]
    fn resources_added_and_deleted_and_merged() {
        let before = crate::Toolchain::KubernetesYaml.parse(BEFORE).unwrap();
        let only_service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n";
        let after = crate::Toolchain::KubernetesYaml
            .parse(only_service)
            .unwrap();
        let deleted = diff(&before, &after, 0);
        assert_eq!(
            deleted[0].resource_mutation_info.mutation_type,
            MutationType::Delete
        );
        assert!(
            deleted[0]
                .resource_mutation_info
                .value
                .contains("kind: Deployment")
        );
        let added = diff(&after, &before, 1);
        assert_eq!(
            added[0].resource_mutation_info.mutation_type,
            MutationType::Add
        );

        let mut merged = Vec::new();
        merge(&mut merged, added);
        let relabeled = BEFORE.replace("  name: web\nspec", "  name: web\n  labels: {a: b}\nspec");
        merge(
            &mut merged,
            diff(
                &before,
                &crate::Toolchain::KubernetesYaml.parse(&relabeled).unwrap(),
                2,
            ),
        );
        assert_eq!(merged.len(), 1);
        assert_eq!(
            merged[0].resource_mutation_info.mutation_type,
            MutationType::Add
        );
        assert_eq!(merged[0].resource_mutation_info.index, 2);
        assert!(merged[0].path_mutation_map.contains_key("metadata.labels"));
    }

    #[test]
    fn later_changes_override_deeper_records() {
        let mut merged = vec![ResourceMutation {
            resource: ResourceInfo::default(),
            resource_mutation_info: info(MutationType::Update, 0, String::new()),
            path_mutation_map: [
                ("a.b".to_owned(), info(MutationType::Update, 0, "1".into())),
                ("a.bc".to_owned(), info(MutationType::Update, 0, "2".into())),
            ]
            .into(),
        }];
        let newer = ResourceMutation {
            path_mutation_map: [("a".to_owned(), info(MutationType::Replace, 1, "x".into()))]
                .into(),
            ..merged[0].clone()
        };
        merge(&mut merged, vec![newer]);
        let paths: Vec<_> = merged[0].path_mutation_map.keys().cloned().collect();
        assert_eq!(paths, ["a"]);
    }
}
