//! Turns what the program left in `ctx.resource_list` into edits of the input text.
//!
//! Items are matched to the input by identity: a dict the program received (and maybe changed,
//! or moved to a new list) is that input item; failing that, an item with the same apiVersion,
//! kind, namespace and name that the program rebuilt. A matched item is compared field by field
//! with its input node and only differing fields are edited, so comments and layout of the rest
//! stay; unmatched input items are removed and new dicts are written as new items. New maps get
//! their keys sorted, as the catalog's Go encoder writes them.

use std::collections::HashMap;

use starlark::values::dict::DictRef;
use starlark::values::{Value, ValueIdentity};

use super::convert::{MAX_DEPTH, equals, list_items, to_new};
use krm_catalog_function::rl::{FnResult, ResourceList};
use krm_yaml_edit::{Doc, Editor, Kind, New, NodeId};

/// Edits `editor` so that the document holds what the program left; returns its results.
pub fn plan(
    doc: &Doc,
    rl: &ResourceList,
    inputs: &[(NodeId, Value)],
    resource_list: Value,
    editor: &mut Editor,
) -> Result<Vec<FnResult>, String> {
    let list = DictRef::from_value(resource_list)
        .ok_or("ctx.resource_list was replaced by something that is not a dict")?;
    let items = list
        .get_str("items")
        .ok_or("ctx.resource_list[\"items\"] was removed")?;
    let items = list_items(items).ok_or_else(|| {
        format!(
            "ctx.resource_list[\"items\"] must be a list, got {}",
            items.get_type()
        )
    })?;
    for (i, item) in items.iter().enumerate() {
        if DictRef::from_value(*item).is_none() {
            return Err(format!(
                "ctx.resource_list[\"items\"][{i}] must be a dict, got {}",
                item.get_type()
            ));
        }
    }
    let results = match list.get_str("results") {
        None => Vec::new(),
        Some(results) => read_results(results)?,
    };
    plan_items(doc, rl, inputs, items, editor)?;
    Ok(results)
}

/// For each output item, the input item it is, if any; kept items stay in input order.
fn match_items(doc: &Doc, inputs: &[(NodeId, Value)], items: &[Value]) -> Vec<Option<usize>> {
    let by_identity: HashMap<ValueIdentity, usize> = inputs
        .iter()
        .enumerate()
        .map(|(i, (_, value))| (value.identity(), i))
        .collect();
    let mut claimed = vec![false; inputs.len()];
    let mut matched: Vec<Option<usize>> = items
        .iter()
        .map(|item| {
            let i = *by_identity.get(&item.identity())?;
            (!std::mem::replace(&mut claimed[i], true)).then_some(i)
        })
        .collect();
    for (j, item) in items.iter().enumerate() {
        if matched[j].is_some() {
            continue;
        }
        let id = value_id(*item);
        let found = inputs
            .iter()
            .enumerate()
            .find(|&(i, &(node, _))| !claimed[i] && node_id(doc, node) == id);
        if let Some((i, _)) = found {
            claimed[i] = true;
            matched[j] = Some(i);
        }
    }
    // Items the program moved before an earlier one are written anew at their place.
    let mut last = None;
    for slot in &mut matched {
        if let Some(i) = *slot {
            if last.is_some_and(|last| i < last) {
                *slot = None;
            } else {
                last = Some(i);
            }
        }
    }
    matched
}

type ObjectId = [Option<String>; 4];

fn node_id(doc: &Doc, node: NodeId) -> ObjectId {
    let get = |path: &[&str]| doc.get_str(node, path).map(str::to_owned);
    [
        get(&["apiVersion"]),
        get(&["kind"]),
        get(&["metadata", "namespace"]),
        get(&["metadata", "name"]),
    ]
}

fn value_id(value: Value) -> ObjectId {
    let get = |path: &[&str]| {
        let mut value = value;
        for key in path {
            value = DictRef::from_value(value)?.get_str(key)?;
        }
        value.unpack_str().map(str::to_owned)
    };
    [
        get(&["apiVersion"]),
        get(&["kind"]),
        get(&["metadata", "namespace"]),
        get(&["metadata", "name"]),
    ]
}

fn plan_items(
    doc: &Doc,
    rl: &ResourceList,
    inputs: &[(NodeId, Value)],
    items: &[Value],
    editor: &mut Editor,
) -> Result<(), String> {
    let matched = match_items(doc, inputs, items);
    let kept: Vec<bool> = {
        let mut kept = vec![false; inputs.len()];
        for i in matched.iter().flatten() {
            kept[*i] = true;
        }
        kept
    };
    let new_item = |j: usize| to_new(items[j], &format!("items[{j}]"), 0, true);
    let Some(seq) = doc.get(rl.root, "items").filter(|&s| doc.is_seq(s)) else {
        // No items came in: write the list if the program made one.
        if !items.is_empty() {
            let news = New::Seq((0..items.len()).map(new_item).collect::<Result<_, _>>()?);
            match doc.get(rl.root, "items") {
                Some(empty) => editor.replace_node(doc, empty, &news),
                None => editor.insert(doc, rl.root, "items", news),
            }
        }
        return Ok(());
    };
    let block = !doc.node(seq).flow() && inputs.iter().all(|&(node, _)| own_line(doc, node));
    if !block {
        // A flow (JSON) list has no comments to keep: write it whole when anything changed.
        let unchanged = matched.len() == inputs.len()
            && matched.iter().enumerate().all(|(j, m)| *m == Some(j))
            && inputs
                .iter()
                .zip(items)
                .all(|(&(node, _), &item)| equals(doc, node, item, 0));
        if !unchanged {
            let news = (0..items.len())
                .map(|j| match matched[j] {
                    Some(_) => to_new(items[j], &format!("items[{j}]"), 0, false),
                    None => new_item(j),
                })
                .collect::<Result<_, _>>()?;
            editor.replace_node(doc, seq, &New::Seq(news));
        }
        return Ok(());
    }
    for (i, &(node, _)) in inputs.iter().enumerate() {
        if !kept[i] {
            let (start, end) = item_lines(doc, node);
            editor.replace(start, end, String::new());
        }
    }
    // New items go before the next kept input item, or after the last item.
    let mut pending: Vec<New> = Vec::new();
    for (j, slot) in matched.iter().enumerate() {
        match *slot {
            None => pending.push(new_item(j)?),
            Some(i) => {
                let node = inputs[i].0;
                if !pending.is_empty() {
                    let at = item_lines(doc, node).0;
                    editor.insert_items_at(doc, seq, at, &std::mem::take(&mut pending));
                }
                diff(doc, node, items[j], &format!("items[{j}]"), 0, editor)?;
            }
        }
    }
    if !pending.is_empty() {
        if doc.items(seq).is_empty() {
            editor.replace_node(doc, seq, &New::Seq(pending));
        } else {
            for item in pending {
                editor.append_item(doc, seq, item);
            }
        }
    }
    Ok(())
}

/// Where the line of a block sequence item's `-` starts: the item's own line (`- key: v`), or
/// the line above when the dash stands alone there (`-` or `- # comment`).
fn dash_line(doc: &Doc, node: NodeId) -> Option<usize> {
    let is_dash = |text: &str| {
        text.trim_start()
            .strip_prefix('-')
            .is_some_and(|rest| rest.trim().is_empty() || rest.trim_start().starts_with('#'))
    };
    let start = doc.node(node).start();
    let line = doc.line_start(start);
    let before = &doc.src[line..start];
    if is_dash(before) {
        return Some(line);
    }
    if !before.trim().is_empty() || line == 0 {
        return None;
    }
    let above = doc.line_start(line - 1);
    is_dash(&doc.src[above..line - 1]).then_some(above)
}

fn own_line(doc: &Doc, node: NodeId) -> bool {
    dash_line(doc, node).is_some()
}

/// The lines of a block sequence item, from its dash's line to past its last line.
fn item_lines(doc: &Doc, node: NodeId) -> (usize, usize) {
    let n = doc.node(node);
    let start = dash_line(doc, node).unwrap_or_else(|| doc.line_start(n.start()));
    (start, doc.line_end(n.end().max(n.start())))
}

/// Edits the node `id` so that it holds `value`, touching only what differs.
fn diff(
    doc: &Doc,
    id: NodeId,
    value: Value,
    path: &str,
    depth: usize,
    editor: &mut Editor,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
    }
    if equals(doc, id, value, depth) {
        return Ok(());
    }
    let node = doc.node(id);
    match (&node.kind, DictRef::from_value(value), list_items(value)) {
        (Kind::Map(_), Some(dict), _) if !node.flow() && !dict.is_empty() => {
            let entries = doc.entries(id);
            let removed: Vec<(NodeId, NodeId)> = entries
                .iter()
                .copied()
                .filter(|&(k, _)| doc.str(k).is_none_or(|k| dict.get_str(k).is_none()))
                .collect();
            if !removed
                .iter()
                .all(|&(k, v)| entry_lines(doc, k, v).is_some())
            {
                return replace(doc, id, value, path, editor);
            }
            for &(k, v) in &removed {
                if let Some((start, end)) = entry_lines(doc, k, v) {
                    editor.replace(start, end, String::new());
                }
            }
            let mut added = Vec::new();
            for (key, item) in dict.iter() {
                let Some(key) = key.unpack_str() else {
                    return Err(format!(
                        "{path}: a map key must be a string, got {}",
                        key.get_type()
                    ));
                };
                let item_path = format!("{path}.{key}");
                match doc.entry(id, key) {
                    Some((_, v)) => diff(doc, v, item, &item_path, depth + 1, editor)?,
                    None => added.push((key, to_new(item, &item_path, depth + 1, true)?)),
                }
            }
            if removed.len() == entries.len() && !added.is_empty() {
                // Nothing of the old map is left to anchor new lines to.
                return replace(doc, id, value, path, editor);
            }
            added.sort_by(|a, b| a.0.cmp(b.0));
            for (key, item) in added {
                editor.insert(doc, id, key, item);
            }
            Ok(())
        }
        (Kind::Seq(_), _, Some(values)) if !node.flow() && !values.is_empty() => {
            let nodes = doc.items(id);
            if !nodes.iter().all(|&n| own_line(doc, n)) {
                return replace(doc, id, value, path, editor);
            }
            diff_seq(doc, id, nodes, values, path, depth, editor)
        }
        (Kind::Scalar { .. }, _, _) if value.unpack_str().is_some() => {
            editor.set_scalar(doc, id, value.unpack_str().unwrap_or_default(), true);
            Ok(())
        }
        _ => replace(doc, id, value, path, editor),
    }
}

/// Writes the program's value in place of the node, keeping the program's key order.
fn replace(
    doc: &Doc,
    id: NodeId,
    value: Value,
    path: &str,
    editor: &mut Editor,
) -> Result<(), String> {
    let new = to_new(value, path, 0, false)?;
    editor.replace_node(doc, id, &new);
    Ok(())
}

/// Common head and tail kept, the middle compared pairwise, the surplus removed or added.
fn diff_seq(
    doc: &Doc,
    seq: NodeId,
    nodes: &[NodeId],
    values: &[Value],
    path: &str,
    depth: usize,
    editor: &mut Editor,
) -> Result<(), String> {
    let (n, m) = (nodes.len(), values.len());
    let mut head = 0;
    while head < n.min(m) && equals(doc, nodes[head], values[head], depth + 1) {
        head += 1;
    }
    let mut tail = 0;
    while tail < n.min(m) - head
        && equals(doc, nodes[n - 1 - tail], values[m - 1 - tail], depth + 1)
    {
        tail += 1;
    }
    let (old, new) = (&nodes[head..n - tail], &values[head..m - tail]);
    let paired = old.len().min(new.len());
    for (k, (&node, &value)) in old.iter().zip(new).enumerate() {
        let at = head + k;
        diff(
            doc,
            node,
            value,
            &format!("{path}[{at}]"),
            depth + 1,
            editor,
        )?;
    }
    for &node in &old[paired..] {
        let (start, end) = item_lines(doc, node);
        editor.replace(start, end, String::new());
    }
    let added = new[paired..]
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            to_new(
                v,
                &format!("{path}[{}]", head + paired + k),
                depth + 1,
                true,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    if added.is_empty() {
        return Ok(());
    }
    match nodes.get(n - tail) {
        Some(&next) => editor.insert_items_at(doc, seq, item_lines(doc, next).0, &added),
        None => {
            for item in added {
                editor.append_item(doc, seq, item);
            }
        }
    }
    Ok(())
}

/// The lines of a block mapping entry whose key starts its line.
fn entry_lines(doc: &Doc, key: NodeId, value: NodeId) -> Option<(usize, usize)> {
    let k = doc.node(key);
    let start = doc.line_start(k.start());
    if !doc.src[start..k.start()].trim().is_empty() {
        return None;
    }
    let v = doc.node(value);
    Some((start, doc.line_end(v.end().max(k.end()))))
}

/// The program's `ctx.resource_list["results"]`, checked against the KRM result shape.
fn read_results(results: Value) -> Result<Vec<FnResult>, String> {
    let items = list_items(results).ok_or_else(|| {
        format!(
            "ctx.resource_list[\"results\"] must be a list, got {}",
            results.get_type()
        )
    })?;
    items
        .iter()
        .enumerate()
        .map(|(i, &item)| read_result(item, &format!("results[{i}]")))
        .collect()
}

fn read_result(item: Value, path: &str) -> Result<FnResult, String> {
    let dict = DictRef::from_value(item)
        .ok_or_else(|| format!("{path} must be a dict, got {}", item.get_type()))?;
    let mut result = FnResult::new(String::new(), None);
    let mut has_message = false;
    for (key, value) in dict.iter() {
        let key = key.unpack_str().unwrap_or_default();
        let field = format!("{path}.{key}");
        match key {
            "message" => {
                result.message = value
                    .unpack_str()
                    .ok_or_else(|| format!("{field} must be a string"))?
                    .to_owned();
                has_message = true;
            }
            "severity" => {
                result.severity = match value.unpack_str() {
                    Some("error") => Some("error"),
                    Some("warning") => Some("warning"),
                    Some("info") => Some("info"),
                    _ => {
                        return Err(format!(
                            "{field} must be \"error\", \"warning\" or \"info\", got {}",
                            value.to_repr()
                        ));
                    }
                }
            }
            "resourceRef" => result.resource_ref = Some(to_new(value, &field, 1, false)?),
            "field" => result.field = Some(to_new(value, &field, 1, false)?),
            "file" => result.file = Some(to_new(value, &field, 1, false)?),
            other => {
                return Err(format!(
                    "{path} has the key {other:?}; a result has message, severity, \
                     resourceRef, field and file"
                ));
            }
        }
    }
    if !has_message {
        return Err(format!("{path} has no message"));
    }
    Ok(result)
}
