//! The tree a parse builds: nodes with the byte spans of their text, and reading it.

use std::borrow::Cow;

use crate::{MAX_DEPTH, New, resolve_plain};

pub type NodeId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Single,
    Double,
    Block,
}

/// Where a collection's children sit in its document's shared lists of entries or items: one
/// allocation for all the collections of a document instead of one each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Children {
    pub(crate) start: usize,
    pub(crate) len: usize,
}

impl Children {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }
}

#[derive(Debug, PartialEq)]
pub enum Kind<'a> {
    Scalar {
        /// Borrowed from the text when written verbatim.
        value: Cow<'a, str>,
        style: Style,
        tagged: bool,
    },
    /// Its entries, read with [`Doc::entries`].
    Map(Children),
    /// Its items, read with [`Doc::items`].
    Seq(Children),
    /// Points at the anchored node; never edited through.
    Alias(NodeId),
}

#[derive(Debug, PartialEq)]
pub struct Node<'a> {
    pub kind: Kind<'a>,
    /// Byte span of the node's text (for block collections: first entry to end of last).
    pub start: usize,
    pub end: usize,
    /// Column (in characters) where the node starts; the indentation of block entries.
    pub col: usize,
    pub flow: bool,
    pub parent: Option<NodeId>,
}

pub struct Doc<'a> {
    pub src: &'a str,
    pub nodes: Vec<Node<'a>>,
    /// Root node of each document in the stream.
    pub roots: Vec<NodeId>,
    /// The entries (key, value) of every mapping, each mapping's together.
    pub(crate) entries: Vec<(NodeId, NodeId)>,
    /// The items of every sequence, each sequence's together.
    pub(crate) items: Vec<NodeId>,
    /// Whether every mapping's keys are known to differ (the fast path checks each mapping as
    /// it reads it); otherwise [`Doc::check_unique_keys`] looks after the parse.
    pub(crate) keys_unique: bool,
}

/// 1-based line and column (in characters) of byte `pos`.
pub fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(src.len());
    let head = src.get(..pos).unwrap_or(src);
    let line_start = head.rfind('\n').map_or(0, |p| p + 1);
    let line = head.bytes().filter(|&b| b == b'\n').count() + 1;
    (line, head[line_start..].chars().count() + 1)
}

impl<'a> Doc<'a> {
    pub fn node(&self, id: NodeId) -> &Node<'a> {
        &self.nodes[id]
    }

    /// Follows an alias to its anchored node.
    pub fn deref(&self, id: NodeId) -> NodeId {
        match self.nodes[id].kind {
            Kind::Alias(target) => target,
            _ => id,
        }
    }

    /// The entries (key, value) of a mapping; none for anything else (aliases followed).
    pub fn entries(&self, id: NodeId) -> &[(NodeId, NodeId)] {
        match self.nodes[self.deref(id)].kind {
            Kind::Map(entries) => &self.entries[entries.range()],
            _ => &[],
        }
    }

    /// The items of a sequence; none for anything else (aliases followed).
    pub fn items(&self, id: NodeId) -> &[NodeId] {
        match self.nodes[self.deref(id)].kind {
            Kind::Seq(items) => &self.items[items.range()],
            _ => &[],
        }
    }

    /// Files the entries of a mapping being closed, for its [`Kind::Map`].
    pub(crate) fn add_entries(&mut self, entries: &[(NodeId, NodeId)]) -> Children {
        let start = self.entries.len();
        self.entries.extend_from_slice(entries);
        Children {
            start,
            len: entries.len(),
        }
    }

    /// Files the items of a sequence being closed, for its [`Kind::Seq`].
    pub(crate) fn add_items(&mut self, items: &[NodeId]) -> Children {
        let start = self.items.len();
        self.items.extend_from_slice(items);
        Children {
            start,
            len: items.len(),
        }
    }

    pub fn is_map(&self, id: NodeId) -> bool {
        matches!(self.nodes[self.deref(id)].kind, Kind::Map(_))
    }

    pub fn is_seq(&self, id: NodeId) -> bool {
        matches!(self.nodes[self.deref(id)].kind, Kind::Seq(_))
    }

    /// The scalar's value, if the node is a scalar (aliases followed).
    pub fn str(&self, id: NodeId) -> Option<&str> {
        match &self.nodes[self.deref(id)].kind {
            Kind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// A null value: empty, `~` or `null` written plain.
    pub fn is_null(&self, id: NodeId) -> bool {
        match &self.nodes[self.deref(id)].kind {
            Kind::Scalar {
                value,
                style: Style::Plain,
                tagged: false,
            } => matches!(&**value, "" | "~" | "null" | "Null" | "NULL"),
            _ => false,
        }
    }

    /// The entry `key` of a mapping: (key node, value node).
    pub fn entry(&self, map: NodeId, key: &str) -> Option<(NodeId, NodeId)> {
        self.entries(map)
            .iter()
            .find(|&&(k, _)| self.reads(k, key))
            .copied()
    }

    /// Whether node `id` is a scalar whose value is `text` (aliases followed): asked of every
    /// key a lookup passes, so written keys are compared without a second look at the node.
    fn reads(&self, id: NodeId, text: &str) -> bool {
        match &self.nodes[id].kind {
            Kind::Scalar { value, .. } => **value == *text,
            Kind::Alias(_) => self.str(id) == Some(text),
            _ => false,
        }
    }

    pub fn get(&self, map: NodeId, key: &str) -> Option<NodeId> {
        self.entry(map, key).map(|(_, v)| v)
    }

    pub fn get_path(&self, mut node: NodeId, path: &[&str]) -> Option<NodeId> {
        for key in path {
            node = self.get(node, key)?;
        }
        Some(node)
    }

    pub fn get_str(&self, map: NodeId, path: &[&str]) -> Option<&str> {
        self.get_path(map, path).and_then(|n| self.str(n))
    }

    /// Text of the rest of the line after byte `pos` (up to the newline).
    pub fn rest_of_line(&self, pos: usize) -> &'a str {
        let rest = &self.src[pos.min(self.src.len())..];
        &rest[..rest.find('\n').unwrap_or(rest.len())]
    }

    /// The comment on the line after `pos` (`# ...` without the hash), if any.
    pub fn line_comment(&self, pos: usize) -> Option<&'a str> {
        let rest = self.rest_of_line(pos).trim_start();
        rest.strip_prefix('#').map(str::trim)
    }

    /// Converts a node to JSON, resolving plain scalars like YAML's core schema.
    pub fn to_json(&self, id: NodeId) -> serde_json::Value {
        self.to_json_depth(id, 0)
    }

    fn to_json_depth(&self, id: NodeId, depth: usize) -> serde_json::Value {
        use serde_json::Value;
        if depth > MAX_DEPTH {
            return Value::Null;
        }
        let id = self.deref(id);
        match &self.nodes[id].kind {
            Kind::Scalar {
                value,
                style: Style::Plain,
                tagged: false,
            } => resolve_plain(value),
            Kind::Scalar { value, .. } => Value::String(value.to_string()),
            Kind::Map(_) => Value::Object(
                self.entries(id)
                    .iter()
                    .map(|&(k, v)| {
                        let key = self.str(k).unwrap_or_default().to_owned();
                        (key, self.to_json_depth(v, depth + 1))
                    })
                    .collect(),
            ),
            Kind::Seq(_) => Value::Array(
                self.items(id)
                    .iter()
                    .map(|&i| self.to_json_depth(i, depth + 1))
                    .collect(),
            ),
            Kind::Alias(_) => Value::Null,
        }
    }

    /// Byte offset of the start of the line holding `pos`.
    pub fn line_start(&self, pos: usize) -> usize {
        let pos = pos.min(self.src.len());
        self.src[..pos].rfind('\n').map_or(0, |p| p + 1)
    }

    /// The subtree as new content to write elsewhere: scalars keep their written form (quoting
    /// included) where it fits on one line; block scalars become quoted strings; comments go.
    pub fn to_new(&self, id: NodeId) -> New {
        self.to_new_depth(id, 0)
    }

    fn to_new_depth(&self, id: NodeId, depth: usize) -> New {
        let id = self.deref(id);
        let node = &self.nodes[id];
        if depth > MAX_DEPTH {
            return New::Plain("null".into());
        }
        match &node.kind {
            Kind::Scalar { value, style, .. } => {
                let text = &self.src[node.start.min(node.end)..node.end];
                match style {
                    Style::Block => New::Str(value.to_string()),
                    _ if text.is_empty() && node.start == node.end => New::Plain("null".into()),
                    _ if text.contains('\n') => New::Str(value.to_string()),
                    _ => New::Plain(text.to_owned()),
                }
            }
            Kind::Map(_) => New::Map(
                self.entries(id)
                    .iter()
                    .map(|&(k, v)| {
                        (
                            self.str(k).unwrap_or_default().to_owned(),
                            self.to_new_depth(v, depth + 1),
                        )
                    })
                    .collect(),
            ),
            Kind::Seq(_) => New::Seq(
                self.items(id)
                    .iter()
                    .map(|&i| self.to_new_depth(i, depth + 1))
                    .collect(),
            ),
            Kind::Alias(_) => New::Plain("null".into()),
        }
    }

    /// Byte offset just past the end of the line holding `pos` (past its newline, if any).
    pub fn line_end(&self, pos: usize) -> usize {
        let pos = pos.min(self.src.len());
        if pos > 0 && self.src.as_bytes()[pos - 1] == b'\n' {
            return pos;
        }
        self.src[pos..]
            .find('\n')
            .map_or(self.src.len(), |i| pos + i + 1)
    }
}
