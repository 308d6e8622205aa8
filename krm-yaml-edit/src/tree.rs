//! The tree a parse builds: nodes with the byte spans of their text, and reading it.

use crate::{MAX_DEPTH, New, resolve_plain};

/// A node of a [`Doc`]: its index in [`Doc::nodes`].
pub type NodeId = usize;

/// Nodes are numbered in 32 bits, this one meaning none (the parent of a root).
const NONE: u32 = u32::MAX;

/// A document holds at most this many nodes (their numbers are kept in 32 bits).
pub(crate) const MAX_NODES: usize = NONE as usize;

/// Narrows an offset, column or count of a parse to the 32 bits the tree keeps. A parse
/// refuses texts over [`MAX_TEXT_BYTES`](crate::MAX_TEXT_BYTES) and documents over
/// [`MAX_NODES`] before it narrows anything, so this never fails.
#[inline]
pub(crate) fn narrow(n: usize) -> u32 {
    debug_assert!(
        u32::try_from(n).is_ok(),
        "a parse refuses what does not fit in 32 bits"
    );
    n as u32
}

/// How a scalar is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Unquoted.
    Plain,
    /// In single quotes.
    Single,
    /// In double quotes.
    Double,
    /// A block scalar (`|` or `>`).
    Block,
}

/// Where a collection's children sit in its document's shared lists of entries or items: one
/// allocation for all the collections of a document instead of one each. Packed, with whether
/// the collection is a flow one: so a collection's [`Kind`] takes 12 bytes like a scalar's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, packed)]
pub struct Children {
    start: u32,
    len: u32,
    flow: bool,
}

impl Children {
    /// How many children.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// Where a scalar's value is kept, read with [`Doc::str`]: a span of the text when the value is
/// written verbatim, else a span of the document's own copy of the values it had to rewrite
/// (unescaped, folded, block scalars). Packed: without padding after its flag, a scalar's
/// [`Kind`] takes 12 bytes and its [`Node`] 28.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub struct ScalarValue {
    start: u32,
    len: u32,
    verbatim: bool,
}

impl ScalarValue {
    /// The value written verbatim at `start..end` of the text.
    #[inline]
    pub(crate) fn verbatim(start: usize, end: usize) -> Self {
        ScalarValue {
            start: narrow(start),
            len: narrow(end - start),
            verbatim: true,
        }
    }
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A scalar, read with [`Doc::str`].
    Scalar {
        /// Where its value is kept.
        value: ScalarValue,
        /// How it is written.
        style: Style,
        /// Whether it carries a tag (`!!str`).
        tagged: bool,
    },
    /// Its entries, read with [`Doc::entries`].
    Map(Children),
    /// Its items, read with [`Doc::items`].
    Seq(Children),
    /// Points at the anchored node (followed with [`Doc::deref`]); never edited through.
    Alias(u32),
}

/// A node of the tree, kept small (a large text holds one for every 7-10 bytes): offsets,
/// column and parent in 32 bits, read through its methods.
#[derive(Debug, Clone)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    start: u32,
    end: u32,
    col: u32,
    parent: u32,
}

const _: () = assert!(size_of::<Node>() <= 28);

impl Node {
    /// A node at `start..end` of the text, starting at column `col`, with no parent yet;
    /// `flow` tells a flow collection.
    #[inline]
    pub(crate) fn new(kind: Kind, start: usize, end: usize, col: usize, flow: bool) -> Self {
        let kind = match kind {
            Kind::Map(children) => Kind::Map(Children { flow, ..children }),
            Kind::Seq(children) => Kind::Seq(Children { flow, ..children }),
            scalar_or_alias => scalar_or_alias,
        };
        Node {
            kind,
            start: narrow(start),
            end: narrow(end),
            col: narrow(col),
            parent: NONE,
        }
    }

    /// Byte offset where the node's text starts (for block collections: their first entry).
    #[inline]
    pub fn start(&self) -> usize {
        self.start as usize
    }

    /// Byte offset where the node's text ends (for block collections: their last entry's end).
    #[inline]
    pub fn end(&self) -> usize {
        self.end as usize
    }

    /// Column (in characters) where the node starts; the indentation of block entries.
    #[inline]
    pub fn col(&self) -> usize {
        self.col as usize
    }

    /// Whether the node is a flow collection (`{...}`, `[...]`).
    pub fn flow(&self) -> bool {
        matches!(self.kind, Kind::Map(children) | Kind::Seq(children) if children.flow)
    }

    /// Files a closed collection's children (from [`Doc::add_entries`] or [`Doc::add_items`]),
    /// keeping whether it is a flow one.
    #[inline]
    pub(crate) fn set_children(&mut self, children: Children) {
        let flow = self.flow();
        if let Kind::Map(own) | Kind::Seq(own) = &mut self.kind {
            *own = Children { flow, ..children };
        }
    }

    /// The collection holding the node; none for a document's root.
    pub fn parent(&self) -> Option<NodeId> {
        (self.parent != NONE).then_some(self.parent as usize)
    }

    pub(crate) fn set_start(&mut self, start: usize) {
        self.start = narrow(start);
    }

    #[inline]
    pub(crate) fn set_end(&mut self, end: usize) {
        self.end = narrow(end);
    }

    pub(crate) fn set_col(&mut self, col: usize) {
        self.col = narrow(col);
    }

    #[inline]
    pub(crate) fn set_parent(&mut self, parent: Option<NodeId>) {
        self.parent = parent.map_or(NONE, narrow);
    }
}

/// A parsed text: its nodes with their spans, over the text itself.
pub struct Doc<'a> {
    /// The text.
    pub src: &'a str,
    /// Every node, in the order the parse met them.
    pub nodes: Vec<Node>,
    /// Root node of each document in the stream.
    pub roots: Vec<NodeId>,
    /// The entries (key, value) of every mapping, each mapping's together.
    pub(crate) entries: Vec<(NodeId, NodeId)>,
    /// The items of every sequence, each sequence's together.
    pub(crate) items: Vec<NodeId>,
    /// The values of the scalars not written verbatim, one after another (see [`ScalarValue`]).
    pub(crate) values: String,
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
    /// An empty tree of `src`, with room for `nodes` nodes and `entries` mapping entries.
    pub(crate) fn with_capacity(src: &'a str, nodes: usize, entries: usize) -> Self {
        Doc {
            src,
            nodes: Vec::with_capacity(nodes),
            roots: Vec::new(),
            entries: Vec::with_capacity(entries),
            items: Vec::new(),
            values: String::new(),
            keys_unique: false,
        }
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Adds a node; none past [`MAX_NODES`] (see [`ParseError::TooManyNodes`](crate::ParseError::TooManyNodes)).
    #[inline]
    pub(crate) fn push(&mut self, node: Node) -> Option<NodeId> {
        if self.nodes.len() >= MAX_NODES {
            return None;
        }
        self.nodes.push(node);
        Some(self.nodes.len() - 1)
    }

    /// Keeps a scalar's value that is not written verbatim in the text (unescaped, folded);
    /// none past [`MAX_TEXT_BYTES`](crate::MAX_TEXT_BYTES) of such values (see
    /// [`ParseError::TooManyValues`](crate::ParseError::TooManyValues)).
    pub(crate) fn keep_value(&mut self, value: &str) -> Option<ScalarValue> {
        let start = self.values.len();
        if start + value.len() > crate::MAX_TEXT_BYTES {
            return None;
        }
        self.values.push_str(value);
        Some(ScalarValue {
            start: narrow(start),
            len: narrow(value.len()),
            verbatim: false,
        })
    }

    /// The text of a scalar's value.
    #[inline]
    fn value(&self, value: ScalarValue) -> &str {
        let start = value.start as usize;
        &self.value_home(value)[start..start + value.len as usize]
    }

    /// The text a scalar's value is kept in (see [`ScalarValue`]).
    #[inline]
    fn value_home(&self, value: ScalarValue) -> &str {
        if value.verbatim {
            self.src
        } else {
            &self.values
        }
    }

    /// Follows an alias to its anchored node.
    #[inline]
    pub fn deref(&self, id: NodeId) -> NodeId {
        match self.nodes[id].kind {
            Kind::Alias(target) => target as usize,
            _ => id,
        }
    }

    /// The entries (key, value) of a mapping; none for anything else (aliases followed).
    #[inline]
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
    #[inline]
    pub(crate) fn add_entries(&mut self, entries: &[(NodeId, NodeId)]) -> Children {
        let start = self.entries.len();
        self.entries.extend_from_slice(entries);
        Children {
            start: narrow(start),
            len: narrow(entries.len()),
            flow: false,
        }
    }

    /// Files the items of a sequence being closed, for its [`Kind::Seq`].
    #[inline]
    pub(crate) fn add_items(&mut self, items: &[NodeId]) -> Children {
        let start = self.items.len();
        self.items.extend_from_slice(items);
        Children {
            start: narrow(start),
            len: narrow(items.len()),
            flow: false,
        }
    }

    /// Whether `id` is a mapping (aliases followed).
    pub fn is_map(&self, id: NodeId) -> bool {
        matches!(self.nodes[self.deref(id)].kind, Kind::Map(_))
    }

    /// Whether `id` is held by a mapping (as a key or a value).
    pub fn is_map_value(&self, id: NodeId) -> bool {
        self.nodes[id]
            .parent()
            .is_some_and(|parent| matches!(self.nodes[parent].kind, Kind::Map(_)))
    }

    /// Whether `id` is a sequence (aliases followed).
    pub fn is_seq(&self, id: NodeId) -> bool {
        matches!(self.nodes[self.deref(id)].kind, Kind::Seq(_))
    }

    /// The scalar's value, if the node is a scalar (aliases followed).
    #[inline]
    pub fn str(&self, id: NodeId) -> Option<&str> {
        match self.nodes[self.deref(id)].kind {
            Kind::Scalar { value, .. } => Some(self.value(value)),
            _ => None,
        }
    }

    /// A null value: empty, `~` or `null` written plain.
    pub fn is_null(&self, id: NodeId) -> bool {
        match self.nodes[self.deref(id)].kind {
            Kind::Scalar {
                value,
                style: Style::Plain,
                tagged: false,
            } => matches!(self.value(value), "" | "~" | "null" | "Null" | "NULL"),
            _ => false,
        }
    }

    /// The entry `key` of a mapping: (key node, value node).
    #[inline]
    pub fn entry(&self, map: NodeId, key: &str) -> Option<(NodeId, NodeId)> {
        self.entries(map)
            .iter()
            .find(|&&(k, _)| self.reads(k, key))
            .copied()
    }

    /// Whether node `id` is a scalar whose value is `text` (aliases followed): asked of every
    /// key a lookup passes, so written keys are compared without a second look at the node.
    #[inline]
    fn reads(&self, id: NodeId, text: &str) -> bool {
        match self.nodes[id].kind {
            // Lengths first: most keys passed differ in length. Then bytes, which spares the
            // checks of slicing a `str` on character boundaries.
            Kind::Scalar { value, .. } => {
                let start = value.start as usize;
                if value.len as usize != text.len() {
                    return false;
                }
                let bytes = &self.value_home(value).as_bytes()[start..start + text.len()];
                // The first bytes next: they tell most keys of one length apart without a call
                // to compare the rest.
                bytes.first() == text.as_bytes().first() && bytes == text.as_bytes()
            }
            Kind::Alias(_) => self.str(id) == Some(text),
            _ => false,
        }
    }

    /// The value of `key` in mapping `map`.
    #[inline]
    pub fn get(&self, map: NodeId, key: &str) -> Option<NodeId> {
        self.entry(map, key).map(|(_, v)| v)
    }

    /// The values of `keys` in a mapping, each what [`Doc::get`] gives, found in one pass over
    /// its entries: functions read several fields of every object. Inlined, so that each key
    /// is compared as the constant it mostly is.
    #[inline(always)]
    pub fn get_each<const N: usize>(&self, map: NodeId, keys: [&str; N]) -> [Option<NodeId>; N] {
        let mut found = [None; N];
        let mut missing = N;
        for &(k, v) in self.entries(map) {
            for (key, slot) in keys.iter().zip(&mut found) {
                if slot.is_none() && self.reads(k, key) {
                    *slot = Some(v);
                    missing -= 1;
                }
            }
            if missing == 0 {
                break;
            }
        }
        found
    }

    /// The value at `path` (keys of nested mappings) below `node`.
    #[inline]
    pub fn get_path(&self, mut node: NodeId, path: &[&str]) -> Option<NodeId> {
        for key in path {
            node = self.get(node, key)?;
        }
        Some(node)
    }

    /// The string at `path` below `map`.
    #[inline]
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
        match self.nodes[id].kind {
            Kind::Scalar {
                value,
                style: Style::Plain,
                tagged: false,
            } => resolve_plain(self.value(value)),
            Kind::Scalar { value, .. } => Value::String(self.value(value).to_owned()),
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
        match node.kind {
            Kind::Scalar { value, style, .. } => {
                let text = &self.src[node.start().min(node.end())..node.end()];
                match style {
                    Style::Block => New::Str(self.value(value).to_owned()),
                    _ if text.is_empty() && node.start == node.end => New::Plain("null".into()),
                    _ if text.contains('\n') => New::Str(self.value(value).to_owned()),
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
