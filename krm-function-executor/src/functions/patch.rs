//! `patch-mutations`: replays a mutation list (as compute-mutations and the executor's
//! mutation records produce) on the unit, skipping what the predicates protect, as
//! ConfigHub's does. Edits go through the lossless editor: everything not patched keeps its
//! text.
//!
//! - Resources are matched by type and name without namespace, or by type and one of the
//!   names without scope their predicate record lists as aliases. A resource the patch does
//!   not mention, or whose predicate record has Predicate false, is left alone; the patch
//!   never adds resources that are not in the unit.
//! - A resource-level Add or Replace replaces the document with the recorded value, Delete
//!   removes it, None leaves it, Update applies the path records.
//! - Path records are applied parents first (sorted by path); a record is skipped when a
//!   predicate record at its path or any parent has Predicate false. Add, Update and
//!   Replace write the value (a node's YAML text, as ConfigHub records it), creating missing
//!   keys; Delete removes the key or list item.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::api::{DataType, MutationInfo, MutationType, ResourceInfo, ResourceMutation};
use crate::functions::definition::{ALL_TOOLCHAINS, Definition, FunctionKind, Options};
use crate::functions::unit::entry_lines;
use crate::functions::{Call, FunctionError, Outcome};
use crate::path::unescape;
use crate::resource::Unit;
use crate::signature::ParameterBuilder;
use crate::yaml::{Doc, Editor, Kind, New, NodeId, Style};

/// Path records (predicates and patch together) beyond this are refused.
pub const MAX_PATH_RECORDS: usize = 10_000;

const PREDICATES: &str = "mutation-predicates";
const PATCH: &str = "mutation-patch";

/// Type and name without namespace, as ConfigHub matches resources.
type Identity = (String, String);

fn identity(info: &ResourceInfo) -> Identity {
    let name = if info.resource_name_without_scope.is_empty() {
        info.resource_name.rsplit('/').next().unwrap_or_default()
    } else {
        &info.resource_name_without_scope
    };
    (info.resource_type.clone(), name.to_owned())
}

fn mutation_list(call: &Call, parameter: &str) -> Result<Vec<ResourceMutation>, String> {
    // `null` is Go's nil list, which ConfigHub's PatchMutations accepts; an empty text is
    // not JSON, and json.Unmarshal refuses it there too.
    let text = call.arguments.str(parameter).unwrap_or_default().trim();
    if text == "null" {
        return Ok(Vec::new());
    }
    serde_json::from_str(text)
        .map_err(|e| format!("{parameter} is not a ResourceMutationList: {e}"))
}

/// A new value from a recorded one, which is a node's YAML text (ConfigHub records kyaml's
/// encoding of it): `"prod\n"` is the string prod, `"\"10\"\n"` the string 10 and `"10\n"`
/// the number.
fn recorded_value(recorded: &str) -> Result<New, String> {
    let doc = Doc::parse(recorded).map_err(|e| format!("the recorded value is not YAML: {e}"))?;
    let Some(&root) = doc.roots.first() else {
        return Ok(New::Plain("null".into()));
    };
    let root = doc.deref(root);
    Ok(match doc.to_json(root) {
        Value::String(s) => New::Str(s),
        Value::Object(_) | Value::Array(_) => doc.to_new(root),
        // Numbers, booleans and null as written.
        _ => match doc.str(root) {
            Some(text) if !text.is_empty() => New::Plain(text.to_owned()),
            _ => New::Plain("null".into()),
        },
    })
}

/// Where a resolved path leads: the node, or the deepest existing node and the keys to
/// create below it.
enum Walked {
    Found(NodeId),
    Missing {
        existing: NodeId,
        keys: Vec<String>,
    },
    /// The index one past a list's last item, as the last segment.
    Append(NodeId),
    /// A list index past the end, or a key under a scalar.
    Unreachable(String),
}

fn walk(doc: &Doc, root: NodeId, segments: &[String]) -> Walked {
    let mut node = root;
    for (i, segment) in segments.iter().enumerate() {
        let current = doc.deref(node);
        let next = match &doc.node(current).kind {
            Kind::Map(_) => doc.get(current, segment),
            Kind::Seq(_) => match segment.parse::<usize>() {
                Ok(index) => match doc.items(current).get(index) {
                    Some(&item) => Some(item),
                    None if index == doc.items(current).len() && i + 1 == segments.len() => {
                        return Walked::Append(current);
                    }
                    None => return Walked::Unreachable(format!("no list item {index}")),
                },
                Err(_) => return Walked::Unreachable(format!("{segment:?} is not a list index")),
            },
            _ if doc.is_null(current) => None,
            _ => return Walked::Unreachable(format!("{segment:?} is below a scalar")),
        };
        match next {
            Some(found) => node = found,
            None => {
                return Walked::Missing {
                    existing: current,
                    keys: segments[i..].to_vec(),
                };
            }
        }
    }
    Walked::Found(node)
}

/// The span of a block-sequence item's lines, when the item starts its own line after `- `.
pub(crate) fn item_lines(doc: &Doc, item: NodeId) -> Option<(usize, usize)> {
    let node = doc.node(item);
    let start = doc.line_start(node.start());
    let lead = doc.src[start..node.start()].trim_start_matches(' ');
    let dashed = lead.trim_end_matches(' ') == "-";
    let in_flow = node.parent().is_some_and(|seq| doc.node(seq).flow());
    (dashed && !in_flow).then(|| (start, doc.line_end(node.end())))
}

/// Removes what `path` names (a mapping entry or a list item); false when there is nothing.
fn delete(
    editor: &mut Editor,
    doc: &Doc,
    root: NodeId,
    segments: &[String],
) -> Result<bool, String> {
    let Some((last, parents)) = segments.split_last() else {
        return Err("an empty path cannot be deleted".into());
    };
    let parent = match walk(doc, root, parents) {
        Walked::Found(parent) => doc.deref(parent),
        Walked::Missing { .. } | Walked::Append(_) | Walked::Unreachable(_) => return Ok(false),
    };
    let span = match &doc.node(parent).kind {
        Kind::Map(_) => match doc.entry(parent, last) {
            Some((key, value)) => entry_lines(doc, key, value),
            None => return Ok(false),
        },
        Kind::Seq(_) => match last
            .parse::<usize>()
            .ok()
            .and_then(|i| doc.items(parent).get(i))
        {
            Some(&item) => item_lines(doc, item),
            None => return Ok(false),
        },
        _ => return Ok(false),
    };
    let (start, end) = span.ok_or("not written one entry per line; not deleted")?;
    editor.replace(start, end, String::new());
    Ok(true)
}

/// Writes `info`'s value at `segments`, creating missing keys; true when it appended a list
/// item.
fn write(
    editor: &mut Editor,
    doc: &Doc,
    root: NodeId,
    segments: &[String],
    info: &MutationInfo,
) -> Result<bool, String> {
    match walk(doc, root, segments) {
        Walked::Found(node) => {
            if matches!(doc.node(node).kind, Kind::Alias(_)) {
                return Err("is an alias; not edited".into());
            }
            let plain = matches!(
                doc.node(node).kind,
                Kind::Scalar {
                    style: Style::Plain,
                    tagged: false,
                    ..
                }
            );
            match recorded_value(&info.value)? {
                New::Str(s) if !doc.is_map(node) && !doc.is_seq(node) => {
                    editor.set_scalar(doc, node, &s, true)
                }
                // A number or boolean over a quoted string is written plain, as recorded.
                New::Plain(s) if plain => editor.set_scalar(doc, node, &s, false),
                value => editor.replace_node(doc, node, &value),
            }
            Ok(false)
        }
        Walked::Missing { existing, keys } => {
            let (first, rest) = keys.split_first().ok_or("nothing to create")?;
            let nested = rest
                .iter()
                .rev()
                .fold(recorded_value(&info.value)?, |inner, key| {
                    New::Map(vec![(key.clone(), inner)])
                });
            if doc.is_map(existing) {
                editor.insert(doc, existing, first, nested);
            } else if doc.is_null(existing) {
                editor.replace_node(doc, existing, &New::Map(vec![(first.clone(), nested)]));
            } else {
                return Err(format!(
                    "cannot create {first:?}: its parent is not a mapping"
                ));
            }
            Ok(false)
        }
        Walked::Append(seq) => {
            editor.append_item(doc, seq, recorded_value(&info.value)?);
            Ok(true)
        }
        Walked::Unreachable(why) => Err(why),
    }
}

fn segments(path: &str) -> Vec<String> {
    path.split('.').map(unescape).collect()
}

/// A path segment ordered as a list index when it is one.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum OrderedSegment<'s> {
    Index(usize),
    Key(&'s str),
}

fn order_key(segments: &[String]) -> Vec<OrderedSegment<'_>> {
    segments
        .iter()
        .map(|s| match s.parse() {
            Ok(index) => OrderedSegment::Index(index),
            Err(_) => OrderedSegment::Key(s),
        })
        .collect()
}

/// Whether one path lies on the other (equal, parent or child).
fn related(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Whether a predicate record at `path` or any of its parents has Predicate false.
fn protected(predicates: Option<&ResourceMutation>, path: &[String]) -> bool {
    let Some(predicates) = predicates else {
        return false;
    };
    (1..=path.len()).any(|n| {
        let prefix: Vec<String> = path[..n]
            .iter()
            .map(|s| crate::path::escape(s).into_owned())
            .collect();
        predicates
            .path_mutation_map
            .get(&prefix.join("."))
            .is_some_and(|record| !record.predicate)
    })
}

/// The unit's element with `identity`, after earlier edits.
fn root_of(unit: &Unit, wanted: &Identity) -> Option<NodeId> {
    unit.elements
        .iter()
        .find(|e| e.checked_info().is_ok_and(|info| identity(info) == *wanted))
        .map(|e| e.root)
}

fn patch_mutations(call: &Call) -> Result<Outcome, FunctionError> {
    let predicates = mutation_list(call, PREDICATES)?;
    let patch = mutation_list(call, PATCH)?;
    let records: usize = predicates
        .iter()
        .chain(&patch)
        .map(|m| m.path_mutation_map.len() + 1)
        .sum();
    if records > MAX_PATH_RECORDS {
        return Err(format!(
            "{records} mutation records, more than the limit of {MAX_PATH_RECORDS}"
        )
        .into());
    }
    let predicates: HashMap<Identity, &ResourceMutation> = predicates
        .iter()
        .map(|m| (identity(&m.resource), m))
        .collect();
    let patch: HashMap<Identity, &ResourceMutation> =
        patch.iter().map(|m| (identity(&m.resource), m)).collect();

    // Whole resources first, in one pass; then their paths.
    let unit = call.unit;
    let doc = &unit.doc;
    let mut editor = Editor::default();
    let mut whole_edits = 0;
    let mut path_patches: BTreeMap<usize, (Identity, &ResourceMutation)> = BTreeMap::new();
    for (position, element) in unit.elements.iter().enumerate() {
        call.stop_if_cancelled()?;
        let Ok(info) = element.checked_info() else {
            continue;
        };
        let key = identity(info);
        let predicate = predicates.get(&key).copied();
        if predicate.is_some_and(|p| !p.resource_mutation_info.predicate) {
            continue;
        }
        // A resource renamed since the patch was recorded is found through the names its
        // predicate record has had.
        let renamed = || {
            predicate?
                .aliases_without_scopes
                .iter()
                .find_map(|alias| patch.get(&(key.0.clone(), alias.clone())).copied())
        };
        let Some(mutation) = patch.get(&key).copied().or_else(renamed) else {
            continue;
        };
        match mutation.resource_mutation_info.mutation_type {
            MutationType::None => continue,
            MutationType::Delete => {
                let (start, end) = unit.removal_span(element);
                editor.replace(start, end, String::new());
                whole_edits += 1;
                continue;
            }
            MutationType::Add | MutationType::Replace => {
                let mut text = mutation.resource_mutation_info.value.clone();
                let replacement = call.parse_model(&text).map_err(|e| {
                    format!(
                        "{PATCH}: the value of {} {} does not parse: {e}",
                        key.0, key.1
                    )
                })?;
                if replacement.elements.len() != 1 {
                    return Err(format!(
                        "{PATCH}: the value of {} {} must be one resource",
                        key.0, key.1
                    )
                    .into());
                }
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                let node = doc.node(element.root);
                let start = doc.line_start(node.start());
                let end = doc.line_end(node.end());
                editor.replace(start, end, text);
                whole_edits += 1;
            }
            MutationType::Update => {}
        }
        if !mutation.path_mutation_map.is_empty() {
            path_patches.insert(position, (key, mutation));
        }
    }
    let mut current = call.toolchain.parse_owned(if whole_edits > 0 {
        editor.finish(doc)
    } else {
        doc.src.to_owned()
    })?;
    let changed_whole = whole_edits > 0;

    let mut problems = Vec::new();
    let mut path_edits = 0;
    for (key, mutation) in path_patches.values() {
        let predicate = predicates.get(key).copied();
        let mut editor = Editor::default();
        let mut batch: Vec<Vec<String>> = Vec::new();
        // Writes parents first (list indexes in numeric order, so that items are appended
        // in turn), then removals from the last item back, so that no index moves before it
        // is used.
        let mut records: Vec<(Vec<String>, &String, &MutationInfo)> = mutation
            .path_mutation_map
            .iter()
            .map(|(path, record)| (segments(path), path, record))
            .filter(|(segments, _, record)| {
                record.mutation_type != MutationType::None && !protected(predicate, segments)
            })
            .collect();
        records.sort_by(|(a, ..), (b, ..)| order_key(a).cmp(&order_key(b)));
        let (removals, mut writes): (Vec<_>, Vec<_>) = records
            .into_iter()
            .partition(|(_, _, record)| record.mutation_type == MutationType::Delete);
        writes.extend(removals.into_iter().rev());
        for (segments, path, record) in writes {
            call.stop_if_cancelled()?;
            if batch.iter().any(|done| related(done, &segments)) {
                let text = std::mem::take(&mut editor).finish(&current.unit().doc);
                current = call.toolchain.parse_owned(text)?;
                batch.clear();
            }
            let unit = current.unit();
            let Some(root) = root_of(unit, key) else {
                problems.push(format!("{} {}: no longer in the unit", key.0, key.1));
                break;
            };
            let at = |problem: String| format!("{} {}: path {path}: {problem}", key.0, key.1);
            // Removals and appended items move what follows them: the next record sees
            // the new text.
            let result = match record.mutation_type {
                MutationType::Delete => delete(&mut editor, &unit.doc, root, &segments)
                    .map(|deleted| deleted.then_some(true)),
                _ => write(&mut editor, &unit.doc, root, &segments, record).map(Some),
            };
            match result {
                Ok(None) => {}
                Ok(Some(moves)) => {
                    path_edits += 1;
                    batch.push(segments);
                    if moves {
                        let text = std::mem::take(&mut editor).finish(&current.unit().doc);
                        current = call.toolchain.parse_owned(text)?;
                        batch.clear();
                    }
                }
                Err(problem) => problems.push(at(problem)),
            }
        }
        if !batch.is_empty() {
            let text = editor.finish(&current.unit().doc);
            current = call.toolchain.parse_owned(text)?;
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; ").into());
    }
    Ok(Outcome {
        text: (changed_whole || path_edits > 0).then(|| current.into_text()),
        output: None,
    })
}

pub static PATCH_MUTATIONS: Definition = Definition {
    name: "patch-mutations",
    description: "Selectively patch attributes if their mutations indicate they are patchable. Intended to be used with compute-mutations.",
    parameters: |_| {
        vec![
            ParameterBuilder::new(
                PREDICATES,
                DataType::ResourceMutationList,
                "Mutations with predicates set to true if they are patchable",
            ),
            ParameterBuilder::new(
                PATCH,
                DataType::ResourceMutationList,
                "Mutations to filter and patch",
            ),
        ]
    },
    kind: FunctionKind::Mutating,
    toolchains: ALL_TOOLCHAINS,
    run: patch_mutations,
    options: Options::DEFAULT,
};

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::Executor;
    use crate::api::{FunctionArgument, FunctionInvocation, FunctionInvocationRequest};

    fn invoke(
        data: &str,
        function: &str,
        arguments: Vec<Value>,
    ) -> (bool, Vec<String>, String, String) {
        let request = FunctionInvocationRequest {
            config_data: data.as_bytes().to_vec(),
            function_invocations: vec![FunctionInvocation::new(
                function,
                arguments
                    .into_iter()
                    .map(FunctionArgument::positional)
                    .collect(),
            )],
            ..FunctionInvocationRequest::default()
        };
        let response = Executor::kubernetes().invoke(&request).unwrap();
        (
            response.success,
            response.error_messages,
            String::from_utf8(response.config_data).unwrap(),
            String::from_utf8(response.output).unwrap(),
        )
    }

    fn values(text: &str) -> Vec<Value> {
        let unit = crate::Toolchain::KubernetesYaml.parse(text).unwrap();
        unit.elements
            .iter()
            .map(|e| unit.doc.to_json(e.root))
            .collect()
    }

    /// compute-mutations from `before` to `after`, then patch-mutations of `before` with
    /// them: the result holds `after`'s values. Returns the patched text.
    fn round_trip(before: &str, after: &str) -> String {
        let (success, errors, _, mutations) =
            invoke(after, "compute-mutations", vec![json!(before), json!(0)]);
        assert!(success, "{errors:?}");
        let (success, errors, patched, _) = invoke(
            before,
            "patch-mutations",
            vec![json!("[]"), json!(mutations)],
        );
        assert!(success, "{errors:?}");
        assert_eq!(values(&patched), values(after), "patched:\n{patched}");
        patched
    }

    const BEFORE: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api # keep me
  annotations:
    example.com/owner: team-a
spec:
  replicas: 2
  paused: true
  template:
    spec:
      containers:
      - name: main
        image: api:1
        args: [--a, --b]
        ports:
        - containerPort: 80
        - containerPort: 81
        - containerPort: 82
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
";

    #[test]
    fn scalars_keys_and_nested_maps_round_trip() {
        let after = BEFORE
            .replace("replicas: 2", "replicas: 5")
            .replace("  paused: true\n", "  strategy:\n    type: Recreate\n")
            .replace("team-a", "team-b\n    example.com/tier: web")
            .replace("mode: fast", "mode: \"7\"");
        let patched = round_trip(BEFORE, &after);
        assert!(patched.contains("name: api # keep me"), "{patched}");
    }

    #[test]
    fn lists_grow_shrink_and_change_shape_round_trip() {
        let after = BEFORE
            .replace(
                "        - containerPort: 81\n        - containerPort: 82\n",
                "",
            )
            .replace("args: [--a, --b]", "args: [--a, --b, --c, --d]");
        round_trip(BEFORE, &after);
        let after = BEFORE.replace(
            "        image: api:1\n",
            "        image: {name: api, tag: \"1\"}\n",
        );
        round_trip(BEFORE, &after);
    }

    #[test]
    fn a_deleted_resource_round_trips() {
        let after = BEFORE.split("---\n").next().unwrap();
        round_trip(BEFORE, after);
    }

    #[test]
    fn predicates_protect_paths_and_their_children() {
        let patch = json!([{
            "Resource": {"ResourceName": "/api", "ResourceType": "apps/v1/Deployment"},
            "ResourceMutationInfo": {"MutationType": "Update", "Index": 0},
            "PathMutationMap": {
                "spec.replicas": {"MutationType": "Update", "Index": 0, "Value": "9"},
                "spec.template.spec.containers.0.image": {"MutationType": "Update", "Index": 0, "Value": "api:2"}
            }
        }]);
        let predicates = json!([{
            "Resource": {"ResourceName": "api", "ResourceType": "apps/v1/Deployment"},
            "ResourceMutationInfo": {"MutationType": "Update", "Index": 0, "Predicate": true},
            "PathMutationMap": {
                "spec.template": {"MutationType": "Update", "Index": 0, "Predicate": false}
            }
        }]);
        let (success, errors, patched, _) = invoke(
            BEFORE,
            "patch-mutations",
            vec![json!(predicates.to_string()), json!(patch.to_string())],
        );
        assert!(success, "{errors:?}");
        assert!(patched.contains("replicas: 9"), "{patched}");
        assert!(patched.contains("image: api:1"), "{patched}");
    }

    #[test]
    fn recorded_values_are_yaml_text() {
        let patch = json!([{
            "Resource": {"ResourceName": "settings", "ResourceType": "v1/ConfigMap"},
            "ResourceMutationInfo": {"MutationType": "Update", "Index": 0},
            "PathMutationMap": {
                "data.mode": {"MutationType": "Update", "Index": 0, "Value": "prod\n"},
                "data.count": {"MutationType": "Add", "Index": 0, "Value": "\"10\"\n"},
                "data.limit": {"MutationType": "Add", "Index": 0, "Value": "10\n"},
                "data.nested": {"MutationType": "Add", "Index": 0, "Value": "a: 1\nb:\n- x\n"}
            }
        }]);
        let (success, errors, patched, _) = invoke(
            BEFORE,
            "patch-mutations",
            vec![json!("null"), json!(patch.to_string())],
        );
        assert!(success, "{errors:?}");
        assert_eq!(
            values(&patched)[1]["data"],
            json!({"mode": "prod", "count": "10", "limit": 10, "nested": {"a": 1, "b": ["x"]}})
        );
    }

    #[test]
    fn renamed_resources_are_found_through_their_aliases() {
        let patch = json!([{
            "Resource": {"ResourceName": "old", "ResourceType": "v1/ConfigMap"},
            "ResourceMutationInfo": {"MutationType": "Update", "Index": 0},
            "PathMutationMap": {
                "data.mode": {"MutationType": "Update", "Index": 0, "Value": "slow\n"}
            }
        }]);
        let predicates = json!([{
            "Resource": {"ResourceName": "settings", "ResourceType": "v1/ConfigMap"},
            "ResourceMutationInfo": {"MutationType": "Update", "Index": 0, "Predicate": true},
            "PathMutationMap": {},
            "AliasesWithoutScopes": {"old": {}, "settings": {}}
        }]);
        let patched = |predicates: &Value| {
            let (success, errors, patched, _) = invoke(
                BEFORE,
                "patch-mutations",
                vec![json!(predicates.to_string()), json!(patch.to_string())],
            );
            assert!(success, "{errors:?}");
            patched
        };
        assert!(patched(&predicates).contains("mode: slow"));
        assert_eq!(patched(&json!([])), BEFORE);
    }

    #[test]
    fn unreachable_paths_fail_without_changing_anything() {
        let patch = json!([{
            "Resource": {"ResourceName": "settings", "ResourceType": "v1/ConfigMap"},
            "ResourceMutationInfo": {"MutationType": "Update", "Index": 0},
            "PathMutationMap": {
                "data.mode.deeper": {"MutationType": "Update", "Index": 0, "Value": "x"}
            }
        }]);
        let (success, errors, patched, _) = invoke(
            BEFORE,
            "patch-mutations",
            vec![json!("null"), json!(patch.to_string())],
        );
        assert!(!success);
        assert!(errors[0].contains("data.mode.deeper"), "{errors:?}");
        assert_eq!(patched, BEFORE);
    }
}
