//! Between the YAML tree and Starlark values: input nodes become plain dicts, lists, strings,
//! numbers, booleans and None (YAML core schema, as the catalog's yaml.v3 decoding); program
//! values become new YAML content, keys sorted as Go's YAML encoder writes a map.

use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value, ValueLike};

use krm_yaml_edit::{Doc, Kind, New, NodeId, Style, resolve_plain};

/// Nesting deeper than this in a program's output is refused, as the YAML parser refuses it.
pub const MAX_DEPTH: usize = 512;

/// A scalar as the program sees it.
pub enum Scalar<'d> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'d str),
}

/// The scalar at `id` (aliases followed), resolved like the YAML core schema.
pub fn scalar<'d>(doc: &'d Doc, id: NodeId) -> Option<Scalar<'d>> {
    let Kind::Scalar { style, tagged, .. } = doc.node(doc.deref(id)).kind else {
        return None;
    };
    let value = doc.str(id)?;
    if style != Style::Plain || tagged {
        return Some(Scalar::Str(value));
    }
    Some(match resolve_plain(value) {
        serde_json::Value::Null => Scalar::Null,
        serde_json::Value::Bool(b) => Scalar::Bool(b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Scalar::Int(i),
            None => Scalar::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        _ => Scalar::Str(value),
    })
}

pub fn to_value<'v>(doc: &Doc, id: NodeId, heap: Heap<'v>) -> Value<'v> {
    let id = doc.deref(id);
    match &doc.node(id).kind {
        Kind::Map(_) => heap.alloc(AllocDict(doc.entries(id).iter().map(|&(k, v)| {
            (
                heap.alloc(doc.str(k).unwrap_or_default()),
                to_value(doc, v, heap),
            )
        }))),
        Kind::Seq(_) => heap.alloc(AllocList(
            doc.items(id).iter().map(|&i| to_value(doc, i, heap)),
        )),
        // An alias to an alias cannot be written; the parser never produces one.
        Kind::Alias(_) => Value::new_none(),
        Kind::Scalar { .. } => match scalar(doc, id) {
            Some(Scalar::Null) | None => Value::new_none(),
            Some(Scalar::Bool(b)) => Value::new_bool(b),
            Some(Scalar::Int(i)) => heap.alloc(i),
            Some(Scalar::Float(f)) => heap.alloc(f),
            Some(Scalar::Str(s)) => heap.alloc(s),
        },
    }
}

/// Is the program's `value` the same as the scalar at `id`?
pub fn scalar_equals(doc: &Doc, id: NodeId, value: Value) -> bool {
    match scalar(doc, id) {
        None => false,
        Some(Scalar::Null) => value.is_none(),
        Some(Scalar::Bool(b)) => value.unpack_bool() == Some(b),
        Some(Scalar::Str(s)) => value.unpack_str() == Some(s),
        Some(Scalar::Int(i)) => match number(value) {
            Some(Number::Int(j)) => i == j,
            Some(Number::Float(f)) => i as f64 == f,
            None => false,
        },
        Some(Scalar::Float(f)) => match number(value) {
            Some(Number::Int(j)) => j as f64 == f,
            Some(Number::Float(g)) => f == g,
            None => false,
        },
    }
}

enum Number {
    Int(i64),
    Float(f64),
}

fn number(value: Value) -> Option<Number> {
    if value.unpack_bool().is_some() {
        return None;
    }
    if let Ok(Some(i)) = i64::unpack_value(value) {
        return Some(Number::Int(i));
    }
    value
        .downcast_ref::<StarlarkFloat>()
        .map(|f| Number::Float(f.0))
}

/// The program's value as new YAML content; `path` names it in errors. `sorted` orders map keys
/// as Go's encoder does (content the program made); otherwise the dict's order is kept.
pub fn to_new(value: Value, path: &str, depth: usize, sorted: bool) -> Result<New, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nested deeper than {MAX_DEPTH} levels"));
    }
    if value.is_none() {
        return Ok(New::Plain("null".into()));
    }
    if let Some(b) = value.unpack_bool() {
        return Ok(New::Plain(b.to_string()));
    }
    if let Some(s) = value.unpack_str() {
        return Ok(New::Str(s.to_owned()));
    }
    if let Some(n) = number(value) {
        return Ok(New::Plain(match n {
            Number::Int(i) => i.to_string(),
            Number::Float(f) if f.is_nan() => ".nan".into(),
            Number::Float(f) if f.is_infinite() => if f > 0.0 { ".inf" } else { "-.inf" }.into(),
            Number::Float(f) => f.to_string(),
        }));
    }
    if value.get_type() == "int" {
        // Beyond 64 bits: Go's encoder writes the digits.
        return Ok(New::Plain(value.to_str()));
    }
    if let Some(dict) = DictRef::from_value(value) {
        let mut entries = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let Some(key) = key.unpack_str() else {
                return Err(format!(
                    "{path}: a map key must be a string, got {} {}",
                    key.get_type(),
                    key.to_repr()
                ));
            };
            let item = to_new(item, &format!("{path}.{key}"), depth + 1, sorted)?;
            entries.push((key.to_owned(), item));
        }
        if sorted {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
        }
        return Ok(New::Map(entries));
    }
    if let Some(items) = list_items(value) {
        return items
            .iter()
            .enumerate()
            .map(|(i, &item)| to_new(item, &format!("{path}[{i}]"), depth + 1, sorted))
            .collect::<Result<Vec<_>, _>>()
            .map(New::Seq);
    }
    Err(format!(
        "{path}: a {} cannot be written as YAML",
        value.get_type()
    ))
}

/// Does `value` hold the same data as the node `id`?
pub fn equals(doc: &Doc, id: NodeId, value: Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    let id = doc.deref(id);
    match &doc.node(id).kind {
        Kind::Map(_) => DictRef::from_value(value).is_some_and(|dict| {
            let entries = doc.entries(id);
            dict.len() == entries.len()
                && entries.iter().all(|&(k, v)| {
                    doc.str(k)
                        .and_then(|k| dict.get_str(k))
                        .is_some_and(|item| equals(doc, v, item, depth + 1))
                })
        }),
        Kind::Seq(_) => list_items(value).is_some_and(|values| {
            let items = doc.items(id);
            values.len() == items.len()
                && items
                    .iter()
                    .zip(values)
                    .all(|(&i, &v)| equals(doc, i, v, depth + 1))
        }),
        Kind::Alias(_) => false,
        Kind::Scalar { .. } => scalar_equals(doc, id, value),
    }
}

/// The elements of a list or tuple.
pub fn list_items<'v>(value: Value<'v>) -> Option<&'v [Value<'v>]> {
    ListRef::from_value(value)
        .map(|list| list.content())
        .or_else(|| TupleRef::from_value(value).map(|tuple| tuple.content()))
}
