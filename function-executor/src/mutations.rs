//! Per-resource, per-path mutation records: what one invocation changed (a diff of the unit
//! before and after), merged over a sequence.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::{MutationInfo, MutationType, ResourceInfo, ResourceMutation};
use crate::path::escape;
use crate::resource::Unit;

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

fn info(mutation_type: MutationType, index: i64, value: String) -> MutationInfo {
    MutationInfo {
        mutation_type,
        index,
        predicate: false,
        value,
    }
}

fn diff_values(
    before: &Value,
    after: &Value,
    path: &mut Vec<String>,
    index: i64,
    out: &mut BTreeMap<String, MutationInfo>,
) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, old) in a {
                path.push(escape(key));
                match b.get(key) {
                    Some(new) => diff_values(old, new, path, index, out),
                    None => {
                        out.insert(
                            path.join("."),
                            info(MutationType::Delete, index, render(old)),
                        );
                    }
                }
                path.pop();
            }
            for (key, new) in b {
                if !a.contains_key(key) {
                    path.push(escape(key));
                    out.insert(path.join("."), info(MutationType::Add, index, render(new)));
                    path.pop();
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                path.push(i.to_string());
                match (a.get(i), b.get(i)) {
                    (Some(old), Some(new)) => diff_values(old, new, path, index, out),
                    (Some(old), None) => {
                        out.insert(
                            path.join("."),
                            info(MutationType::Delete, index, render(old)),
                        );
                    }
                    (None, Some(new)) => {
                        out.insert(path.join("."), info(MutationType::Add, index, render(new)));
                    }
                    (None, None) => {}
                }
                path.pop();
            }
        }
        (a, b) if a == b => {}
        (a, b) => {
            let same_kind = !a.is_object() && !a.is_array() && !b.is_object() && !b.is_array();
            let mutation_type = if same_kind {
                MutationType::Update
            } else {
                MutationType::Replace
            };
            out.insert(path.join("."), info(mutation_type, index, render(b)));
        }
    }
}

/// What invocation `index` changed, going from `before` to `after`, in the order of `after`
/// (removed resources last).
pub fn diff(before: &Unit, after: &Unit, index: usize) -> Vec<ResourceMutation> {
    let index = i64::try_from(index).unwrap_or(i64::MAX);
    let mut old: Vec<Option<(&ResourceInfo, Value)>> = before
        .elements
        .iter()
        .map(|e| Some((&e.info, before.doc.to_json(e.root))))
        .collect();
    let mut mutations = Vec::new();
    for element in &after.elements {
        let new = after.doc.to_json(element.root);
        let matched = old
            .iter_mut()
            .find(|slot| {
                slot.as_ref()
                    .is_some_and(|(i, _)| identity(i) == identity(&element.info))
            })
            .and_then(Option::take);
        match matched {
            Some((_, previous)) => {
                let mut paths = BTreeMap::new();
                diff_values(&previous, &new, &mut Vec::new(), index, &mut paths);
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
    for (element, slot) in before.elements.iter().zip(old) {
        if slot.is_some() {
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
    for mutation in newer {
        let Some(existing) = merged
            .iter_mut()
            .find(|m| identity(&m.resource) == identity(&mutation.resource))
        else {
            merged.push(mutation);
            continue;
        };
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
    let position = |m: &ResourceMutation| {
        unit.elements
            .iter()
            .position(|e| identity(&e.info) == identity(&m.resource))
            .unwrap_or(usize::MAX)
    };
    mutations.sort_by_key(position);
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
        let (before, after) = (Unit::parse(BEFORE).unwrap(), Unit::parse(&after).unwrap());
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
    fn resources_added_and_deleted_and_merged() {
        let before = Unit::parse(BEFORE).unwrap();
        let only_service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n";
        let after = Unit::parse(only_service).unwrap();
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
            diff(&before, &Unit::parse(&relabeled).unwrap(), 2),
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
