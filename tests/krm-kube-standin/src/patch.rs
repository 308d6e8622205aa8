//! The patch types Kubernetes clients send: JSON merge patch (RFC 7386), a strategic merge
//! patch that knows the merge keys of the core types this project uses, and JSON patch
//! (RFC 6902). Server-side apply is treated as a merge patch by the caller.

use serde_json::{Map, Value};

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The merge key of a list field in the core API, as `patchMergeKey` declares it.
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "hostAliases" => "ip",
        "ports" => {
            if items.iter().any(|i| i.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        _ => return None,
    })
}

/// Lists of scalars merged as sets (`patchStrategy: merge` on a primitive list).
fn merges_primitives(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge patch for built-in types: merge patch, except that lists with a known merge
/// key are merged item by item (`$patch: delete` removes an item, `$patch: replace` replaces),
/// `finalizers` merge as a set, and `$deleteFromPrimitiveList/<field>` and `$retainKeys` work.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut v = patch.clone();
        v.as_object_mut().expect("object").remove("$patch");
        *target = v;
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("object");
    let mut retain: Option<Vec<String>> = None;
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(del)) = (t.get_mut(field), v) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k == "$retainKeys" {
            retain = v.as_array().map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            });
            continue;
        }
        if k.starts_with('$') {
            continue; // $setElementOrder/..., $patch handled above
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(tv @ Value::Object(_)), Value::Object(_)) => strategic_merge_patch(tv, v)?,
            (Some(Value::Array(tl)), Value::Array(pl)) => {
                if merges_primitives(k) {
                    for x in pl {
                        if !tl.contains(x) {
                            tl.push(x.clone());
                        }
                    }
                } else if let Some(key) = merge_key(k, pl) {
                    merge_list(tl, pl, key)?;
                } else {
                    *tl = pl.clone();
                }
            }
            (_, v) => {
                let mut fresh = Value::Null;
                strip_directives(&mut fresh, v);
                t.insert(k.clone(), fresh);
            }
        }
    }
    if let Some(keep) = retain {
        t.retain(|k, _| keep.contains(k));
    }
    Ok(())
}

fn strip_directives(out: &mut Value, v: &Value) {
    match v {
        Value::Object(m) => {
            let mut n = Map::new();
            for (k, x) in m {
                if k.starts_with('$') {
                    continue;
                }
                let mut y = Value::Null;
                strip_directives(&mut y, x);
                n.insert(k.clone(), y);
            }
            *out = Value::Object(n);
        }
        Value::Array(a) => {
            *out = Value::Array(
                a.iter()
                    .filter(|x| x.get("$patch").is_none())
                    .map(|x| {
                        let mut y = Value::Null;
                        strip_directives(&mut y, x);
                        y
                    })
                    .collect(),
            );
        }
        other => *out = other.clone(),
    }
}

fn merge_list(target: &mut Vec<Value>, patch: &[Value], key: &str) -> Result<(), String> {
    if patch
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        let mut out = Value::Null;
        strip_directives(&mut out, &Value::Array(patch.to_vec()));
        *target = out.as_array().cloned().unwrap_or_default();
        return Ok(());
    }
    for item in patch {
        let Some(kv) = item.get(key) else {
            return Err(format!("list item has no merge key {key:?}"));
        };
        let pos = target.iter().position(|t| t.get(key) == Some(kv));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (pos, delete) {
            (Some(i), true) => {
                target.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge_patch(&mut target[i], item)?,
            (None, false) => {
                let mut fresh = Value::Null;
                strip_directives(&mut fresh, item);
                target.push(fresh);
            }
        }
    }
    Ok(())
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(ptr: &str) -> Result<Vec<String>, String> {
    if ptr.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = ptr.strip_prefix('/') else {
        return Err(format!("invalid JSON pointer {ptr:?}"));
    };
    Ok(rest.split('/').map(unescape).collect())
}

fn get_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(t)
                .ok_or_else(|| format!("path {t:?} not found"))?,
            Value::Array(a) => {
                let i: usize = t.parse().map_err(|_| format!("bad array index {t:?}"))?;
                a.get_mut(i)
                    .ok_or_else(|| format!("array index {i} out of range"))?
            }
            _ => return Err(format!("cannot index into scalar at {t:?}")),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, ptr: &str, value: Value) -> Result<(), String> {
    let tokens = split_pointer(ptr)?;
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last
                    .parse()
                    .map_err(|_| format!("bad array index {last:?}"))?;
                if i > a.len() {
                    return Err(format!("array index {i} out of range"));
                }
                a.insert(i, value);
            }
        }
        _ => return Err(format!("cannot add into a scalar at {ptr:?}")),
    }
    Ok(())
}

fn remove(doc: &mut Value, ptr: &str) -> Result<Value, String> {
    let tokens = split_pointer(ptr)?;
    let Some((last, parent)) = tokens.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    match get_mut(doc, parent)? {
        Value::Object(m) => m
            .remove(last)
            .ok_or_else(|| format!("path {ptr:?} not found")),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| format!("bad array index {last:?}"))?;
            if i >= a.len() {
                return Err(format!("array index {i} out of range"));
            }
            Ok(a.remove(i))
        }
        _ => Err(format!("cannot remove from a scalar at {ptr:?}")),
    }
}

/// RFC 6902 JSON patch (`add`, `remove`, `replace`, `move`, `copy`, `test`). All or nothing.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let Value::Array(ops) = ops else {
        return Err("a JSON patch must be an array of operations".into());
    };
    let mut work = doc.clone();
    for op in ops {
        let name = op.get("op").and_then(Value::as_str).unwrap_or("");
        let ptr = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("operation {op} has no path"))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("operation {op} has no value"))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("operation {op} has no from"))
        };
        match name {
            "add" => add(&mut work, ptr, value()?)?,
            "remove" => {
                remove(&mut work, ptr)?;
            }
            "replace" => {
                let tokens = split_pointer(ptr)?;
                *get_mut(&mut work, &tokens)? = value()?;
            }
            "move" => {
                let v = remove(&mut work, from()?)?;
                add(&mut work, ptr, v)?;
            }
            "copy" => {
                let tokens = split_pointer(from()?)?;
                let v = get_mut(&mut work, &tokens)?.clone();
                add(&mut work, ptr, v)?;
            }
            "test" => {
                let tokens = split_pointer(ptr)?;
                if *get_mut(&mut work, &tokens)? != value()? {
                    return Err(format!("test operation failed at {ptr:?}"));
                }
            }
            other => return Err(format!("unknown JSON patch operation {other:?}")),
        }
    }
    *doc = work;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t = json!({"spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "K", "value": "1"}]},
            {"name": "b", "image": "y"}]},
            "metadata": {"finalizers": ["f1"]}});
        strategic_merge_patch(
            &mut t,
            &json!({"spec": {"containers": [
                {"name": "a", "image": "x2", "env": [{"name": "L", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "z"}]},
                "metadata": {"finalizers": ["f2"]}}),
        )
        .unwrap();
        assert_eq!(
            t,
            json!({"spec": {"containers": [
                {"name": "a", "image": "x2", "env": [{"name": "K", "value": "1"}, {"name": "L", "value": "2"}]},
                {"name": "c", "image": "z"}]},
                "metadata": {"finalizers": ["f1", "f2"]}})
        );
        strategic_merge_patch(
            &mut t,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["f2"]));
    }

    #[test]
    fn json_patch_ops() {
        let mut d = json!({"a": {"b": [1, 2]}, "c": 1});
        json_patch(
            &mut d,
            &json!([
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "add", "path": "/a/b/0", "value": 0},
                {"op": "replace", "path": "/c", "value": 2},
                {"op": "copy", "from": "/c", "path": "/d"},
                {"op": "move", "from": "/d", "path": "/e"},
                {"op": "remove", "path": "/a/b/1"},
                {"op": "test", "path": "/e", "value": 2}
            ]),
        )
        .unwrap();
        assert_eq!(d, json!({"a": {"b": [0, 2, 3]}, "c": 2, "e": 2}));
        let before = d.clone();
        assert!(
            json_patch(
                &mut d,
                &json!([{"op": "remove", "path": "/c"}, {"op": "test", "path": "/e", "value": 9}])
            )
            .is_err()
        );
        assert_eq!(d, before, "a failed patch changes nothing");
    }
}
