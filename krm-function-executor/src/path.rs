//! ConfigHub's path syntax and its resolution over one resource.
//!
//! A path is dot-separated; inside a segment `~1` stands for a dot and `~0` for a tilde.
//!
//! | segment | meaning |
//! |---|---|
//! | `key`, `3` | a map key, or an array index |
//! | `@key:param` | the map key `key`, bound to the parameter `param` |
//! | `*` | every child of a map or array |
//! | `*?field:param` | every child, binding each child's `field` to `param` (`:param` optional) |
//! | `*@:param` | every key of a map, bound to `param` |
//! | `?field:param=value` | the first array element whose `field` is the string `value` (`=@3`: element 3; `=*`: the `*?` form) |
//! | `\|key` | everything before must exist; `key` and what follows may be created |
//!
//! With upsert, a missing key may be created when every segment after it is a plain key (or
//! `@key:param`); array elements are never created. Without upsert, paths that do not exist
//! resolve to nothing.

use std::borrow::Cow;

use krm_plugin_api::quoted;
use serde_json::Value;

use crate::yaml::{Doc, Kind, NodeId};

/// Paths longer than this (in bytes) are refused.
pub const MAX_PATH_BYTES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A map key or array index, optionally bound to a parameter (`@key:param`); `barrier` is
    /// the `|key` form.
    Key {
        key: String,
        bind: Option<String>,
        barrier: bool,
    },
    /// `*`, `*?field[:param]`: every child; `field` binds each child's field.
    Any {
        field: Option<String>,
        bind: Option<String>,
    },
    /// `*@:param`: every map key, bound to `param`.
    AnyKey { bind: String },
    /// `?field[:param]=value`: the first array element whose `field` equals `value`.
    Lookup {
        field: String,
        bind: Option<String>,
        target: LookupTarget,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupTarget {
    Value(String),
    Index(usize),
}

impl Segment {
    /// A key that upsert may create when it and what follows are missing.
    fn creatable(&self) -> bool {
        matches!(self, Segment::Key { barrier: false, .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path {}: {problem}", quoted(.path))]
pub struct PathError {
    pub path: String,
    pub problem: String,
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedPath {
    pub text: String,
    pub segments: Vec<Segment>,
}

impl UnresolvedPath {
    pub fn parse(text: &str) -> Result<Self, PathError> {
        let error = |problem: String| PathError {
            path: text.to_owned(),
            problem,
        };
        if text.is_empty() {
            return Err(error("path cannot be empty".into()));
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(error(format!("longer than {MAX_PATH_BYTES} bytes")));
        }
        let segments = text
            .split('.')
            .map(|raw| parse_segment(&unescape(raw)).map_err(&error))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text: text.to_owned(),
            segments,
        })
    }
}

fn split_bind(text: &str, segment: &str) -> Result<(String, Option<String>), String> {
    let mut parts = text.split(':');
    let name = parts.next().unwrap_or_default().to_owned();
    let bind = parts.next().map(str::to_owned);
    if parts.next().is_some() {
        return Err(format!("segment {segment:?} has more than one ':'"));
    }
    Ok((name, bind.filter(|b| !b.is_empty())))
}

fn parse_segment(segment: &str) -> Result<Segment, String> {
    if segment.is_empty() {
        return Err("empty segment".into());
    }
    if let Some(rest) = segment.strip_prefix('?') {
        let Some((key, value)) = rest.split_once('=') else {
            return Err(format!(
                "associative lookup {segment:?} has no '=': expected ?field:param=value"
            ));
        };
        let (field, bind) = split_bind(key, segment)?;
        if field.is_empty() {
            return Err(format!("associative lookup {segment:?} names no field"));
        }
        if value == "*" {
            return Ok(Segment::Any {
                field: Some(field),
                bind,
            });
        }
        let target = match value.strip_prefix('@').map(str::parse::<usize>) {
            Some(Ok(index)) => LookupTarget::Index(index),
            _ => LookupTarget::Value(value.to_owned()),
        };
        return Ok(Segment::Lookup {
            field,
            bind,
            target,
        });
    }
    if segment == "*" {
        return Ok(Segment::Any {
            field: None,
            bind: None,
        });
    }
    if let Some(rest) = segment.strip_prefix("*?") {
        let (field, bind) = split_bind(rest, segment)?;
        if field.is_empty() {
            return Err(format!("wildcard {segment:?} names no field"));
        }
        return Ok(Segment::Any {
            field: Some(field),
            bind,
        });
    }
    if let Some(bind) = segment.strip_prefix("*@:") {
        if bind.is_empty() {
            return Err(format!("wildcard {segment:?} names no parameter"));
        }
        return Ok(Segment::AnyKey {
            bind: bind.to_owned(),
        });
    }
    if segment.starts_with('*') {
        return Err(format!(
            "wildcard {segment:?}: expected *, *?field:param or *@:param"
        ));
    }
    let (barrier, rest) = match segment.strip_prefix('|') {
        Some(rest) => (true, rest),
        None => (false, segment),
    };
    let (key, bind) = match rest.strip_prefix('@') {
        Some(keyed) => split_bind(keyed, segment)?,
        None => (rest.to_owned(), None),
    };
    if key.is_empty() {
        return Err(format!("segment {segment:?} names no key"));
    }
    Ok(Segment::Key { key, bind, barrier })
}

/// `~1` -> `.`, `~0` -> `~`.
pub fn unescape(segment: &str) -> String {
    if !segment.contains('~') {
        return segment.to_owned();
    }
    segment.replace("~1", ".").replace("~0", "~")
}

/// A key written as one path segment: `~` -> `~0`, `.` -> `~1` (borrowed when there is
/// nothing to escape, as for nearly every key: paths are built for every resource).
pub fn escape(key: &str) -> Cow<'_, str> {
    if !key.contains(['.', '~']) {
        return Cow::Borrowed(key);
    }
    Cow::Owned(key.replace('~', "~0").replace('.', "~1"))
}

/// One concrete location the path resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Concrete path, keys escaped.
    pub path: String,
    /// Parameters the path bound, in path order.
    pub arguments: Vec<(String, Value)>,
    /// The node at the path, when it exists.
    pub node: Option<NodeId>,
    /// The deepest existing node on the path (the node itself when it exists).
    pub existing: NodeId,
    /// Keys to create below `existing` (upsert only), outermost first.
    pub missing: Vec<String>,
    /// The path passes through an alias: what it reaches is written elsewhere (at the anchor),
    /// so editing it would change every place that uses the anchor.
    pub through_alias: bool,
}

/// Resolves `path` below `root`, in document order.
pub fn resolve(doc: &Doc, root: NodeId, path: &UnresolvedPath, upsert: bool) -> Vec<Resolved> {
    let mut out = Vec::new();
    let mut walk = Walk {
        doc,
        segments: &path.segments,
        upsert,
        out: &mut out,
        keys: Vec::new(),
        arguments: Vec::new(),
        aliases: 0,
    };
    walk.visit(root, 0);
    out
}

struct Walk<'d, 'a, 'o> {
    doc: &'d Doc<'a>,
    segments: &'d [Segment],
    upsert: bool,
    out: &'o mut Vec<Resolved>,
    keys: Vec<Cow<'d, str>>,
    arguments: Vec<(String, Value)>,
    /// Aliases on the way to the current node.
    aliases: usize,
}

impl<'d> Walk<'d, '_, '_> {
    fn visit(&mut self, node: NodeId, at: usize) {
        let segments = self.segments;
        let Some(segment) = segments.get(at) else {
            self.out.push(Resolved {
                path: self.keys.join("."),
                arguments: self.arguments.clone(),
                node: Some(node),
                existing: node,
                missing: Vec::new(),
                through_alias: self.aliases > 0,
            });
            return;
        };
        let doc = self.doc;
        match segment {
            Segment::Key { key, bind, .. } => {
                let child = if doc.is_map(node) {
                    doc.get(node, key)
                } else if doc.is_seq(node) {
                    key.parse::<usize>()
                        .ok()
                        .and_then(|i| doc.items(node).get(i).copied())
                } else {
                    None
                };
                match child {
                    Some(child) => {
                        self.step(child, at, escape(key), bind.as_ref().map(|b| (b, key)));
                    }
                    None if self.upsert && segments[at + 1..].iter().all(Segment::creatable) => {
                        self.record_missing(node, at);
                    }
                    None => {}
                }
            }
            Segment::Any { field, bind } => {
                if doc.is_map(node) {
                    for &(key, value) in doc.entries(node) {
                        let Some(name) = doc.str(key) else { continue };
                        let bound = field.as_ref().and_then(|f| self.field_value(value, f));
                        self.step_value(value, at, escape(name), bind.as_deref(), bound);
                    }
                } else {
                    for (index, &item) in doc.items(node).iter().enumerate() {
                        let bound = field.as_ref().and_then(|f| self.field_value(item, f));
                        self.step_value(item, at, index.to_string().into(), bind.as_deref(), bound);
                    }
                }
            }
            Segment::AnyKey { bind } => {
                for &(key, value) in doc.entries(node) {
                    let Some(name) = doc.str(key) else { continue };
                    let bound = Some(Value::String(name.to_owned()));
                    self.step_value(value, at, escape(name), Some(bind), bound);
                }
            }
            Segment::Lookup {
                field,
                bind,
                target,
            } => {
                let found =
                    doc.items(node)
                        .iter()
                        .enumerate()
                        .find(|&(index, &item)| match target {
                            LookupTarget::Index(wanted) => index == *wanted,
                            LookupTarget::Value(wanted) => doc
                                .get(item, field)
                                .is_some_and(|v| doc.to_json(v) == Value::String(wanted.clone())),
                        });
                if let Some((index, &item)) = found {
                    let bound = self.field_value(item, field);
                    self.step_value(item, at, index.to_string().into(), bind.as_deref(), bound);
                }
            }
        }
    }

    fn field_value(&self, item: NodeId, field: &str) -> Option<Value> {
        self.doc.get(item, field).map(|v| self.doc.to_json(v))
    }

    fn step(
        &mut self,
        child: NodeId,
        at: usize,
        key: Cow<'d, str>,
        bind: Option<(&String, &String)>,
    ) {
        let bound = bind.map(|(name, value)| (name.as_str(), Value::String(value.clone())));
        match bound {
            Some((name, value)) => self.step_value(child, at, key, Some(name), Some(value)),
            None => self.step_value(child, at, key, None, None),
        }
    }

    fn step_value(
        &mut self,
        child: NodeId,
        at: usize,
        key: Cow<'d, str>,
        bind: Option<&str>,
        value: Option<Value>,
    ) {
        self.keys.push(key);
        let alias = matches!(self.doc.node(child).kind, Kind::Alias(_));
        self.aliases += usize::from(alias);
        let bound = match (bind, value) {
            (Some(name), Some(value)) => {
                self.arguments.push((name.to_owned(), value));
                true
            }
            _ => false,
        };
        self.visit(child, at + 1);
        if bound {
            self.arguments.pop();
        }
        self.aliases -= usize::from(alias);
        self.keys.pop();
    }

    fn record_missing(&mut self, existing: NodeId, at: usize) {
        let mut keys = self.keys.clone();
        let mut arguments = self.arguments.clone();
        let mut missing = Vec::new();
        for segment in &self.segments[at..] {
            if let Segment::Key { key, bind, .. } = segment {
                keys.push(escape(key));
                missing.push(key.clone());
                if let Some(bind) = bind {
                    arguments.push((bind.clone(), Value::String(key.clone())));
                }
            }
        }
        self.out.push(Resolved {
            path: keys.join("."),
            arguments,
            node: None,
            existing,
            missing,
            through_alias: self.aliases > 0,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPLOYMENT: &str = "\
metadata:
  name: web
  labels:
    app: web
  annotations:
    example.com/owner: team-a
    note: hi
spec:
  template:
    spec:
      containers:
      - name: main
        image: nginx:1.25
        env:
        - name: MODE
          value: fast
        ports:
        - containerPort: 80
      - name: sidecar
        image: envoy:v1
";

    /// Path, bound arguments and keys to create, of each location found.
    type Found = (String, Vec<(String, Value)>, Vec<String>);

    fn run(path: &str, upsert: bool) -> Vec<Found> {
        let doc = Doc::parse(DEPLOYMENT).unwrap();
        let path = UnresolvedPath::parse(path).unwrap();
        resolve(&doc, doc.roots[0], &path, upsert)
            .into_iter()
            .map(|r| (r.path, r.arguments, r.missing))
            .collect()
    }

    fn paths(path: &str, upsert: bool) -> Vec<String> {
        run(path, upsert).into_iter().map(|(p, ..)| p).collect()
    }

    #[test]
    fn literal_keys_and_indices() {
        assert_eq!(
            paths("spec.template.spec.containers.1.image", false),
            ["spec.template.spec.containers.1.image"]
        );
        assert!(paths("spec.template.spec.containers.2.image", false).is_empty());
        assert!(paths("spec.nothing", false).is_empty());
    }

    #[test]
    fn associative_lookup_binds_its_parameter() {
        let found = run(
            "spec.template.spec.containers.?name:container-name=sidecar.image",
            false,
        );
        assert_eq!(
            found,
            [(
                "spec.template.spec.containers.1.image".to_owned(),
                vec![("container-name".to_owned(), Value::from("sidecar"))],
                vec![]
            )]
        );
        assert_eq!(
            paths("spec.template.spec.containers.?name=@1.image", false),
            ["spec.template.spec.containers.1.image"]
        );
        // Only string fields match: a number written plain is not the string "80".
        assert!(
            paths(
                "spec.template.spec.containers.0.ports.?containerPort=80",
                false
            )
            .is_empty()
        );
        assert!(paths("spec.template.spec.containers.?name=none.image", false).is_empty());
    }

    #[test]
    fn a_star_value_is_the_wildcard_form() {
        let found = run(
            "spec.template.spec.containers.?name:container-name=*.image",
            false,
        );
        let bound: Vec<_> = found.iter().map(|(_, a, _)| a[0].1.clone()).collect();
        assert_eq!(bound, [Value::from("main"), Value::from("sidecar")]);
    }

    #[test]
    fn wildcards_over_arrays_and_maps() {
        assert_eq!(
            paths("spec.template.spec.containers.*.name", false),
            [
                "spec.template.spec.containers.0.name",
                "spec.template.spec.containers.1.name"
            ]
        );
        let found = run(
            "spec.template.spec.containers.*?name:container-name.image",
            false,
        );
        assert_eq!(
            found[1].1,
            vec![("container-name".to_owned(), Value::from("sidecar"))]
        );
        let found = run("metadata.annotations.*@:annotation-key", false);
        assert_eq!(
            found,
            [
                (
                    "metadata.annotations.example~1com/owner".to_owned(),
                    vec![(
                        "annotation-key".to_owned(),
                        Value::from("example.com/owner")
                    )],
                    vec![]
                ),
                (
                    "metadata.annotations.note".to_owned(),
                    vec![("annotation-key".to_owned(), Value::from("note"))],
                    vec![]
                )
            ]
        );
    }

    #[test]
    fn bound_keys_and_escaped_dots() {
        let found = run(
            "metadata.annotations.@example~1com/owner:annotation-key",
            false,
        );
        assert_eq!(found[0].0, "metadata.annotations.example~1com/owner");
        assert_eq!(found[0].1[0].1, Value::from("example.com/owner"));
    }

    #[test]
    fn upsert_creates_trailing_keys_only() {
        assert!(paths("metadata.labels.tier", false).is_empty());
        let found = run("metadata.labels.@tier:label-key", true);
        assert_eq!(
            found,
            [(
                "metadata.labels.tier".to_owned(),
                vec![("label-key".to_owned(), Value::from("tier"))],
                vec!["tier".to_owned()]
            )]
        );
        assert_eq!(
            run("spec.strategy.rollingUpdate.maxSurge", true)[0].2,
            ["strategy", "rollingUpdate", "maxSurge"]
        );
        // Array elements are never created, and nothing after a wildcard is.
        assert!(paths("spec.template.spec.containers.?name=new.image", true).is_empty());
        assert!(paths("spec.missing.*.x", true).is_empty());
    }

    #[test]
    fn a_bar_requires_what_comes_before() {
        assert_eq!(
            run(
                "spec.template.spec.containers.0.|securityContext.runAsNonRoot",
                true
            )[0]
            .2,
            ["securityContext", "runAsNonRoot"]
        );
        assert!(paths("spec.nope.|securityContext", true).is_empty());
    }

    #[test]
    fn malformed_paths_are_named() {
        for (path, problem) in [
            ("", "path cannot be empty"),
            ("a..b", "empty segment"),
            ("a.?name", "has no '='"),
            ("a.?=x", "names no field"),
            ("a.*x", "expected *, *?field:param or *@:param"),
            ("a.*@:", "names no parameter"),
            ("a.@k:p:q", "more than one ':'"),
        ] {
            let err = UnresolvedPath::parse(path).unwrap_err();
            assert!(err.to_string().contains(problem), "{path}: {err}");
        }
        assert!(UnresolvedPath::parse(&"a.".repeat(3000)).is_err());
    }

    #[test]
    fn escaping_round_trips() {
        for key in ["a.b", "x~y", "~1", "plain"] {
            assert_eq!(unescape(&escape(key)), key);
        }
    }
}
