//! Lossless YAML editing: parse once into a tree that remembers byte spans, then change the
//! original text only at those spans. Whatever no function touched stays byte-identical, with
//! its comments, quoting and blank lines, by construction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use saphyr_parser::{Event, Parser, ScalarStyle};

pub type NodeId = usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Single,
    Double,
    Block,
}

#[derive(Debug, PartialEq)]
pub enum Kind<'a> {
    Scalar {
        /// Borrowed from the text when written verbatim.
        value: std::borrow::Cow<'a, str>,
        style: Style,
        tagged: bool,
    },
    Map(Vec<(NodeId, NodeId)>),
    Seq(Vec<NodeId>),
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
}

/// Nesting deeper than this is refused rather than risking the stack on hostile input.
pub const MAX_DEPTH: usize = 512;

/// More aliases than this in one input are refused (a ResourceList rarely needs any).
pub const MAX_ALIASES: usize = 10_000;

/// Aliases may make a document at most twice its own size plus this much when expanded (size:
/// one per node plus the bytes of its scalar value). Every walk through aliases (a
/// functionConfig read as JSON, a value copied elsewhere) is bounded by that size, so an alias
/// bomb is refused at parse time instead of expanding into gigabytes.
pub const ALIAS_EXPANSION_ALLOWANCE: u64 = 1_000_000;

/// Tells long work that its call is over (cancelled, or past its deadline): parses and
/// functions check it as they go and give up.
#[derive(Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// The parse error when [`Stop`] was requested.
pub const STOPPED: &str = "stopped: the call ended";

/// How often (in parser events) the general parser looks at its [`Stop`].
const STOP_CHECK_EVENTS: usize = 1024;

/// saphyr refuses a tab as the only separator after a mapping's `:` (`key:<TAB>value`), which
/// YAML allows (tabs may separate tokens within a line) and kpt reads.
const TAB_AFTER_COLON: &str = "':' must be followed by a valid YAML whitespace";

/// 1-based line and column (in characters) of byte `pos`.
pub fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(src.len());
    let head = src.get(..pos).unwrap_or(src);
    let line_start = head.rfind('\n').map_or(0, |p| p + 1);
    let line = head.bytes().filter(|&b| b == b'\n').count() + 1;
    (line, head[line_start..].chars().count() + 1)
}

enum Open {
    Map(NodeId, Vec<(NodeId, NodeId)>, Option<NodeId>),
    Seq(NodeId, Vec<NodeId>),
}

impl<'a> Doc<'a> {
    pub fn parse(src: &'a str) -> Result<Self, String> {
        Self::parse_until(src, &Stop::default())
    }

    /// Parses `src`, giving up with [`STOPPED`] once `stop` is requested. Duplicate keys,
    /// recursive aliases, alias bombs and nesting deeper than [`MAX_DEPTH`] are errors.
    pub fn parse_until(src: &'a str, stop: &Stop) -> Result<Self, String> {
        let doc = match crate::fast_yaml::parse(src, stop) {
            Some(doc) => {
                #[cfg(debug_assertions)]
                doc.assert_same_as_general();
                doc
            }
            None => Self::parse_general_until(src, stop)?,
        };
        if stop.requested() {
            return Err(STOPPED.into());
        }
        doc.check_unique_keys()?;
        Ok(doc)
    }

    /// Refuses a mapping that holds one key twice (as Go's yaml.v3, and so kpt, does): which of
    /// the two values counts would otherwise depend on who reads it.
    pub(crate) fn check_unique_keys(&self) -> Result<(), String> {
        /// Up to this many entries, comparing every pair is cheaper than hashing.
        const LINEAR: usize = 16;
        let mut seen: std::collections::HashMap<&str, NodeId> = Default::default();
        for node in &self.nodes {
            let Kind::Map(entries) = &node.kind else {
                continue;
            };
            let duplicate = if entries.len() <= LINEAR {
                entries.iter().enumerate().find_map(|(i, &(key, _))| {
                    let text = self.str(key)?;
                    entries[..i]
                        .iter()
                        .find(|&&(earlier, _)| self.str(earlier) == Some(text))
                        .map(|&(earlier, _)| (earlier, key))
                })
            } else {
                seen.clear();
                entries.iter().find_map(|&(key, _)| {
                    let earlier = *seen.entry(self.str(key)?).or_insert(key);
                    (earlier != key).then_some((earlier, key))
                })
            };
            if let Some((first, again)) = duplicate {
                let (line, col) = line_col(self.src, self.nodes[again].start);
                let (first_line, first_col) = line_col(self.src, self.nodes[first].start);
                return Err(format!(
                    "duplicate mapping key {:?} at line {line} column {col} (first at line {first_line} column {first_col})",
                    self.str(again).unwrap_or_default()
                ));
            }
        }
        Ok(())
    }

    /// Checks the fast parser's tree against the general parser's.
    #[cfg(debug_assertions)]
    pub(crate) fn assert_same_as_general(&self) {
        let general = Self::parse_general(self.src).unwrap_or_else(|e| {
            panic!(
                "fast parser accepted what saphyr rejects ({e}): {:?}",
                self.src
            )
        });
        assert_eq!(self.roots, general.roots, "roots of {:?}", self.src);
        assert_eq!(
            self.nodes.len(),
            general.nodes.len(),
            "node count of {:?}",
            self.src
        );
        for (i, (a, b)) in self.nodes.iter().zip(&general.nodes).enumerate() {
            assert_eq!(a, b, "node {i} of {:?}", self.src);
        }
    }

    /// The general parser (saphyr events) alone, to check the fast path against it.
    #[cfg(any(test, debug_assertions))]
    pub fn parse_general(src: &'a str) -> Result<Self, String> {
        Self::parse_general_until(src, &Stop::default())
    }

    fn parse_general_until(src: &'a str, stop: &Stop) -> Result<Self, String> {
        match Self::parse_events(src, src, stop) {
            Err(error) if error.starts_with(TAB_AFTER_COLON) => {
                Self::parse_tab_separated(src, stop)
            }
            parsed => parsed,
        }
    }

    /// Parses `src` with every tab that directly follows a `:` read as a space (same length,
    /// so every offset holds). A tab that turns out to sit inside a scalar (a quoted or block
    /// scalar holding `:<TAB>`) is content, not a separator: it is restored and the text parsed
    /// again, which settles it since tabs in separators do not change where scalars end.
    fn parse_tab_separated(src: &'a str, stop: &Stop) -> Result<Self, String> {
        let bytes = src.as_bytes();
        let mut tabs: Vec<usize> = (1..bytes.len())
            .filter(|&i| bytes[i] == b'\t' && bytes[i - 1] == b':')
            .collect();
        for _ in 0..3 {
            let mut spaced = bytes.to_vec();
            for &i in &tabs {
                spaced[i] = b' ';
            }
            let spaced = String::from_utf8(spaced).map_err(|e| e.to_string())?;
            let doc = Self::parse_events(&spaced, src, stop)?;
            // `tabs` is sorted: each scalar finds the tabs inside it by binary search.
            let mut in_scalars: Vec<usize> = Vec::new();
            for node in &doc.nodes {
                if matches!(node.kind, Kind::Scalar { .. }) {
                    let first = tabs.partition_point(|&tab| tab < node.start);
                    let after = tabs.partition_point(|&tab| tab < node.end);
                    in_scalars.extend_from_slice(&tabs[first..after.max(first)]);
                }
            }
            if in_scalars.is_empty() {
                return Ok(doc);
            }
            in_scalars.sort_unstable();
            tabs.retain(|tab| in_scalars.binary_search(tab).is_err());
        }
        Self::parse_events(src, src, stop)
    }

    /// Builds the tree from saphyr's events over `scanned`, a text with the same offsets as
    /// `src` (the document kept for editing).
    fn parse_events(scanned: &str, src: &'a str, stop: &Stop) -> Result<Self, String> {
        // saphyr reports character offsets; map them to bytes only when the text needs it.
        let char_to_byte: Option<Vec<usize>> = if src.is_ascii() {
            None
        } else {
            let mut table: Vec<usize> = src.char_indices().map(|(i, _)| i).collect();
            table.push(src.len());
            Some(table)
        };
        let byte = |index: usize| match &char_to_byte {
            None => index.min(src.len()),
            Some(table) => table.get(index).copied().unwrap_or(src.len()),
        };
        let mut doc = Doc {
            src,
            nodes: Vec::new(),
            roots: Vec::new(),
        };
        let mut anchors: std::collections::HashMap<usize, NodeId> = Default::default();
        let mut stack: Vec<Open> = Vec::new();
        let mut expansion = Expansion::default();
        let mut parser = Parser::new_from_str(scanned);
        let mut events = 0usize;
        while let Some(next) = parser.next_event() {
            events += 1;
            if events.is_multiple_of(STOP_CHECK_EVENTS) && stop.requested() {
                return Err(STOPPED.into());
            }
            let (event, span) = next.map_err(|e| e.to_string())?;
            let (start, end) = (byte(span.start.index()), byte(span.end.index()));
            let col = span.start.col();
            let finished = match event {
                Event::StreamEnd => break,
                Event::StreamStart
                | Event::DocumentStart(_)
                | Event::DocumentEnd
                | Event::Nothing => None,
                Event::Scalar(value, style, anchor, tag) => {
                    let style = match style {
                        ScalarStyle::Plain => Style::Plain,
                        ScalarStyle::SingleQuoted => Style::Single,
                        ScalarStyle::DoubleQuoted => Style::Double,
                        _ => Style::Block,
                    };
                    // saphyr's span of a quoted scalar can run over a trailing comment.
                    let end = match style {
                        Style::Single => quoted_end(src, start, b'\'').unwrap_or(end),
                        Style::Double => quoted_end(src, start, b'"').unwrap_or(end),
                        _ => end,
                    };
                    expansion.scalar(value.len());
                    let id = doc.push(Node {
                        kind: Kind::Scalar {
                            value: std::borrow::Cow::Owned(value.into_owned()),
                            style,
                            tagged: tag.is_some(),
                        },
                        start,
                        end,
                        col,
                        flow: false,
                        parent: None,
                    });
                    if anchor > 0 {
                        anchors.insert(anchor, id);
                    }
                    Some(id)
                }
                Event::Alias(anchor) => {
                    let target = *anchors.get(&anchor).ok_or_else(|| {
                        let (line, col) = line_col(src, start);
                        format!("unknown alias at line {line} column {col}")
                    })?;
                    expansion.alias(target, src, start)?;
                    Some(doc.push(Node {
                        kind: Kind::Alias(target),
                        start,
                        end,
                        col,
                        flow: false,
                        parent: None,
                    }))
                }
                Event::MappingStart(anchor, _) | Event::SequenceStart(anchor, _) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(format!("nesting deeper than {MAX_DEPTH} levels"));
                    }
                    let is_map = matches!(event, Event::MappingStart(..));
                    expansion.open();
                    let flow = end > start
                        && matches!(src.as_bytes().get(end - 1), Some(b'{') | Some(b'['));
                    // A block collection starts at its first entry; the span may cover an
                    // anchor or tag before it, which belongs to the parent line.
                    let (start, col) = if flow { (end - 1, col) } else { (end, col) };
                    let id = doc.push(Node {
                        kind: if is_map {
                            Kind::Map(Vec::new())
                        } else {
                            Kind::Seq(Vec::new())
                        },
                        start,
                        end: start,
                        col,
                        flow,
                        parent: None,
                    });
                    if anchor > 0 {
                        anchors.insert(anchor, id);
                    }
                    stack.push(if is_map {
                        Open::Map(id, Vec::new(), None)
                    } else {
                        Open::Seq(id, Vec::new())
                    });
                    None
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    let (id, kind) = match stack.pop() {
                        Some(Open::Map(id, entries, _)) => (id, Kind::Map(entries)),
                        Some(Open::Seq(id, items)) => (id, Kind::Seq(items)),
                        None => return Err("unbalanced collection end".into()),
                    };
                    let node_end = if doc.nodes[id].flow {
                        // The closing bracket (the event's span may run over a comment).
                        (start + 1).min(end)
                    } else {
                        let last = match &kind {
                            Kind::Map(entries) => entries.last().map(|&(_, v)| v),
                            Kind::Seq(items) => items.last().copied(),
                            _ => None,
                        };
                        last.map_or(doc.nodes[id].start, |last| doc.nodes[last].end)
                    };
                    expansion.close(id, &kind);
                    let node = &mut doc.nodes[id];
                    node.kind = kind;
                    node.end = node_end.max(node.start);
                    // A block collection's start is its first child (the event may sit on an
                    // anchor, or be empty in indentless sequences).
                    if !node.flow
                        && let Some(first) = first_child(&node.kind)
                    {
                        let (first_start, first_col) =
                            (doc.nodes[first].start, doc.nodes[first].col);
                        let node = &mut doc.nodes[id];
                        node.start = first_start;
                        node.col = if matches!(node.kind, Kind::Seq(_)) {
                            // The dash sits two columns before the item in `- item`.
                            column_of(src, seq_dash(src, first_start)).unwrap_or(first_col)
                        } else {
                            first_col
                        };
                        if matches!(node.kind, Kind::Seq(_)) {
                            node.start = seq_dash(src, first_start);
                        }
                    }
                    Some(id)
                }
            };
            if let Some(id) = finished {
                doc.nodes[id].parent = match stack.last() {
                    Some(Open::Map(parent, ..) | Open::Seq(parent, _)) => Some(*parent),
                    None => None,
                };
                match stack.last_mut() {
                    Some(Open::Map(_, entries, pending)) => match pending.take() {
                        Some(key) => entries.push((key, id)),
                        None => *pending = Some(id),
                    },
                    Some(Open::Seq(_, items)) => items.push(id),
                    None => doc.roots.push(id),
                }
            }
        }
        expansion.check(&doc.roots)?;
        Ok(doc)
    }

    fn push(&mut self, node: Node<'a>) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

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

    pub fn entries(&self, id: NodeId) -> &[(NodeId, NodeId)] {
        match &self.nodes[self.deref(id)].kind {
            Kind::Map(entries) => entries,
            _ => &[],
        }
    }

    pub fn items(&self, id: NodeId) -> &[NodeId] {
        match &self.nodes[self.deref(id)].kind {
            Kind::Seq(items) => items,
            _ => &[],
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
            .find(|&&(k, _)| self.str(k) == Some(key))
            .copied()
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
            Kind::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|&(k, v)| {
                        let key = self.str(k).unwrap_or_default().to_owned();
                        (key, self.to_json_depth(v, depth + 1))
                    })
                    .collect(),
            ),
            Kind::Seq(items) => Value::Array(
                items
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
            Kind::Map(entries) => New::Map(
                entries
                    .iter()
                    .map(|&(k, v)| {
                        (
                            self.str(k).unwrap_or_default().to_owned(),
                            self.to_new_depth(v, depth + 1),
                        )
                    })
                    .collect(),
            ),
            Kind::Seq(items) => New::Seq(
                items
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

/// End (exclusive) of the quoted scalar whose opening quote is at or after `start`.
fn quoted_end(src: &str, start: usize, quote: u8) -> Option<usize> {
    let bytes = src.as_bytes();
    let open = start + bytes.get(start..)?.iter().position(|&b| b == quote)?;
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b if b == quote => {
                if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                    i += 2;
                } else {
                    return Some(i + 1);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Sizes of the nodes as they would be with every alias replaced by a copy of its anchored
/// node, computed as the parse goes (nodes are numbered in event order, so `sizes[id]`).
#[derive(Default)]
struct Expansion {
    /// Expanded size of each finished node; `u64::MAX` while a collection is open.
    sizes: Vec<u64>,
    /// The document's own size, each node counted once.
    own: u64,
    aliases: usize,
}

impl Expansion {
    fn scalar(&mut self, value_len: usize) {
        let size = 1 + value_len as u64;
        self.own += size;
        self.sizes.push(size);
    }

    fn open(&mut self) {
        self.own += 1;
        self.sizes.push(u64::MAX);
    }

    fn close(&mut self, id: NodeId, kind: &Kind) {
        let children: u64 = match kind {
            Kind::Map(entries) => entries
                .iter()
                .map(|&(k, v)| self.sizes[k].saturating_add(self.sizes[v]))
                .fold(0, u64::saturating_add),
            Kind::Seq(items) => items
                .iter()
                .map(|&i| self.sizes[i])
                .fold(0, u64::saturating_add),
            _ => 0,
        };
        self.sizes[id] = children.saturating_add(1);
    }

    fn alias(&mut self, target: NodeId, src: &str, at: usize) -> Result<(), String> {
        let (line, col) = line_col(src, at);
        self.aliases += 1;
        if self.aliases > MAX_ALIASES {
            return Err(format!(
                "more than {MAX_ALIASES} aliases (the last at line {line} column {col})"
            ));
        }
        let size = self.sizes[target];
        if size == u64::MAX {
            return Err(format!(
                "the alias at line {line} column {col} refers to a node that contains it"
            ));
        }
        self.own += 1;
        self.sizes.push(size);
        Ok(())
    }

    fn check(&self, roots: &[NodeId]) -> Result<(), String> {
        if self.aliases == 0 {
            return Ok(());
        }
        let expanded = roots
            .iter()
            .map(|&r| self.sizes[r])
            .fold(0, u64::saturating_add);
        let limit = self
            .own
            .saturating_mul(2)
            .saturating_add(ALIAS_EXPANSION_ALLOWANCE);
        if expanded > limit {
            return Err(format!(
                "its aliases expand it beyond {limit} (twice its size plus {ALIAS_EXPANSION_ALLOWANCE}, counting one per node plus the bytes of each scalar): refused as an alias bomb"
            ));
        }
        Ok(())
    }
}

fn first_child(kind: &Kind) -> Option<NodeId> {
    match kind {
        Kind::Map(entries) => entries.first().map(|&(k, _)| k),
        Kind::Seq(items) => items.first().copied(),
        _ => None,
    }
}

/// The `-` indicator of the block sequence item starting at `item`.
fn seq_dash(src: &str, item: usize) -> usize {
    let head = &src.as_bytes()[..item.min(src.len())];
    let mut i = head.len();
    while i > 0 {
        match head[i - 1] {
            b' ' | b'\t' | b'\n' | b'\r' => i -= 1,
            b'-' => return i - 1,
            // Anchors or tags before the item: keep looking further back on the line.
            _ => {
                let line_start = head[..i]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                return head[line_start..i]
                    .iter()
                    .position(|&b| b == b'-')
                    .map_or(item, |p| line_start + p);
            }
        }
    }
    item
}

fn column_of(src: &str, pos: usize) -> Option<usize> {
    let line_start = src[..pos.min(src.len())].rfind('\n').map_or(0, |p| p + 1);
    src.get(line_start..pos).map(|s| s.chars().count())
}

/// YAML 1.2 core-schema resolution of a plain scalar (as Go's yaml.v3 decodes it, roughly).
pub fn resolve_plain(value: &str) -> serde_json::Value {
    use serde_json::Value;
    match value {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = value.parse::<i64>() {
        return Value::from(i);
    }
    if looks_float(value)
        && let Ok(f) = value.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Value::Number(n);
    }
    Value::String(value.to_owned())
}

fn looks_float(value: &str) -> bool {
    let v = value.strip_prefix(['-', '+']).unwrap_or(value);
    !v.is_empty()
        && v.bytes().any(|b| b.is_ascii_digit())
        && v.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && v.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit() || b == b'.')
}

/// Would a plain scalar with this text read back as something other than the same string?
/// Mirrors what Go's yaml.v3 quotes when it writes a string (it also quotes YAML 1.1 booleans,
/// octals and timestamps for old readers).
pub fn needs_quotes(value: &str) -> bool {
    if plainly_safe(value) {
        return false;
    }
    if value.is_empty() || value.trim() != value {
        return true;
    }
    if !resolve_plain(value).is_string() {
        return true;
    }
    let lower = value.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "y" | "n" | "yes" | "no" | "on" | "off" | ".inf" | "-.inf" | "+.inf" | ".nan"
    ) {
        return true;
    }
    let b = value.as_bytes();
    // Hex/octal/binary numbers, and dates/timestamps.
    if b[0].is_ascii_digit() || b[0] == b'-' || b[0] == b'+' || b[0] == b'.' {
        let body = value.trim_start_matches(['-', '+']);
        if body.starts_with("0x") || body.starts_with("0o") || body.starts_with("0b") {
            return true;
        }
        if body
            .bytes()
            .all(|c| c.is_ascii_digit() || c == b'_' || c == b'.' || c == b':')
        {
            return true;
        }
        if value.len() >= 10
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && b[5..7].iter().all(u8::is_ascii_digit)
        {
            return true;
        }
    }
    if crate::fast_yaml::is_indicator(b[0]) && !(b[0] == b'-' && b.len() > 1 && b[1] != b' ') {
        return true;
    }
    value.contains(": ")
        || value.contains(" #")
        || value.ends_with(':')
        || value.chars().any(|c| c.is_control() || c == '\u{feff}')
}

/// The common case answered without allocating: a word that starts with a letter and holds
/// only letters, digits and `-_./`, and is none of the YAML 1.1 booleans or nulls.
fn plainly_safe(value: &str) -> bool {
    let b = value.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'/'))
        && !["y", "n", "yes", "no", "on", "off", "true", "false", "null"]
            .iter()
            .any(|word| word.eq_ignore_ascii_case(value))
}

pub fn double_quoted(value: &str) -> String {
    // JSON string syntax is valid YAML double-quoted syntax.
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Appends a string rendered as a scalar that reads back as the same string, quoted the way Go's
/// yaml.v3 does: double quotes for strings that would resolve to another type, single quotes
/// for ones that only need protecting from YAML syntax. In flow collections (JSON input)
/// strings are always double-quoted, so JSON stays JSON.
pub fn push_rendered(out: &mut String, value: &str, flow: bool) {
    if flow {
        out.push_str(&double_quoted(value));
        return;
    }
    if !needs_quotes(value) {
        out.push_str(value);
        return;
    }
    let resolves_to_other = value.is_empty()
        || !resolve_plain(value).is_string()
        || value.trim() != value
        || value.chars().any(|c| c.is_control());
    if resolves_to_other || value.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        out.push_str(&double_quoted(value));
    } else {
        out.push('\'');
        out.push_str(&value.replace('\'', "''"));
        out.push('\'');
    }
}

/// New content to write into a document.
#[derive(Debug, Clone, PartialEq)]
pub enum New {
    /// A string; quoted when needed to stay a string.
    Str(String),
    /// A scalar written as is (numbers, booleans; must be valid plain YAML).
    Plain(String),
    Map(Vec<(String, New)>),
    Seq(Vec<New>),
}

impl New {
    pub fn str(value: impl Into<String>) -> Self {
        New::Str(value.into())
    }

    /// About how many bytes the value takes once written.
    pub fn approx_len(&self) -> usize {
        match self {
            New::Str(s) | New::Plain(s) => s.len() + 2,
            New::Map(entries) => entries
                .iter()
                .map(|(k, v)| k.len() + 4 + v.approx_len())
                .sum(),
            New::Seq(items) => items.iter().map(|v| v.approx_len() + 4).sum(),
        }
    }

    /// Renders as the value of a block-mapping entry whose key sits at `indent`: either
    /// ` scalar` for the same line or `\n...` lines for collections.
    fn block_value(&self, indent: usize, out: &mut String) {
        match self {
            New::Str(s) => {
                out.push(' ');
                push_rendered(out, s, false);
                out.push('\n');
            }
            New::Plain(s) => {
                out.push(' ');
                out.push_str(s);
                out.push('\n');
            }
            New::Map(entries) if entries.is_empty() => out.push_str(" {}\n"),
            New::Seq(items) if items.is_empty() => out.push_str(" []\n"),
            New::Map(entries) => {
                out.push('\n');
                block_entries(entries, indent + 2, out);
            }
            New::Seq(items) => {
                out.push('\n');
                block_items(items, indent, out);
            }
        }
    }

    /// Like [`New::flow`], but strings are quoted only when they need it (block context).
    pub fn flow_plain(&self, out: &mut String) {
        self.write_flow(out, false);
    }

    /// Flow style with every string double-quoted: valid JSON as well as YAML.
    pub fn flow(&self, out: &mut String) {
        self.write_flow(out, true);
    }

    fn write_flow(&self, out: &mut String, quote_strings: bool) {
        let string = |out: &mut String, s: &str| {
            if quote_strings {
                out.push_str(&double_quoted(s));
            } else {
                push_rendered(out, s, false);
            }
        };
        match self {
            New::Str(s) => string(out, s),
            New::Plain(s) => out.push_str(s),
            New::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    string(out, k);
                    out.push_str(": ");
                    v.write_flow(out, quote_strings);
                }
                out.push('}');
            }
            New::Seq(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write_flow(out, quote_strings);
                }
                out.push(']');
            }
        }
    }
}

/// Block-mapping lines (each ending in a newline) at `indent`.
pub fn block_entries(entries: &[(String, New)], indent: usize, out: &mut String) {
    for (key, value) in entries {
        push_indent(out, indent);
        push_rendered(out, key, false);
        out.push(':');
        value.block_value(indent, out);
    }
}

/// Block-sequence lines at `indent` (the dash's column).
pub fn block_items(items: &[New], indent: usize, out: &mut String) {
    for item in items {
        push_indent(out, indent);
        out.push('-');
        match item {
            New::Map(entries) if !entries.is_empty() => {
                // The first entry continues the dash's line.
                out.push(' ');
                let mark = out.len();
                block_entries(entries, indent + 2, out);
                out.drain(mark..mark + indent + 2);
            }
            New::Seq(items) if !items.is_empty() => {
                out.push(' ');
                let mark = out.len();
                block_items(items, indent + 2, out);
                out.drain(mark..mark + indent + 2);
            }
            other => other.block_value(indent, out),
        }
    }
}

fn push_indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// Text changes at byte spans of the original, applied in one pass at the end.
#[derive(Default)]
pub struct Editor {
    edits: Vec<(usize, usize, String)>,
    /// Bytes of new text queued so far (edits and pending entries), to bound the output.
    queued_bytes: usize,
    /// Entries already queued for insertion into a map node, so that several inserts into one
    /// map (or under one missing key) are merged instead of creating duplicate keys.
    /// Flushed deepest node first, so that inserts at one spot nest correctly.
    pending: std::collections::BTreeMap<NodeId, Vec<(String, New)>>,
}

impl Editor {
    pub fn replace(&mut self, start: usize, end: usize, text: String) {
        self.push_edit((start, end, text));
    }

    fn push_edit(&mut self, edit: (usize, usize, String)) {
        self.queued_bytes += edit.2.len();
        self.edits.push(edit);
    }

    /// About how many bytes of new text the edits queued so far add.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Replaces a scalar's value, keeping its quoting style where that can hold the value.
    /// `as_string` keeps the value a string (quoting if needed); otherwise a plain scalar is
    /// written plain, the way the catalog writes a value whose tag it cleared.
    pub fn set_scalar(&mut self, doc: &Doc, id: NodeId, value: &str, as_string: bool) {
        if is_alias(doc, id) {
            // Editing through an alias would change its anchor and every other alias of it.
            let value = if as_string {
                New::str(value)
            } else {
                New::Plain(untyped_scalar(value))
            };
            self.replace_node(doc, id, &value);
            return;
        }
        if let Some(edit) = scalar_edit(doc, id, value, as_string) {
            self.push_edit(edit);
        }
    }

    /// Appends `item` to sequence `seq` (block or flow).
    pub fn append_item(&mut self, doc: &Doc, seq: NodeId, item: New) {
        let node = &doc.nodes[seq];
        if node.flow || doc.items(seq).is_empty() {
            let mut text = String::new();
            if !doc.items(seq).is_empty() {
                text.push_str(", ");
            }
            if node.flow {
                item.flow(&mut text);
            } else {
                item.flow_plain(&mut text);
            }
            let at = node.end.saturating_sub(1);
            if node.flow {
                self.push_edit((at, at, text));
            }
            return;
        }
        let at = doc.line_end(node.end);
        let mut text = String::new();
        if at == doc.src.len() && !doc.src.ends_with('\n') {
            text.push('\n');
        }
        block_items(&[item], node.col, &mut text);
        self.push_edit((at, at, text));
    }

    /// Replaces the whole node `target` (scalar or collection) with `value`, the way kyaml's
    /// `SetYNode` does: collections are written in block style at the node's indentation (flow
    /// inside flow collections); the rest of the document is untouched.
    pub fn replace_node(&mut self, doc: &Doc, target: NodeId, value: &New) {
        let node = &doc.nodes[target];
        let in_flow = is_in_flow(doc, target);
        let empty_collection = matches!(value, New::Map(e) if e.is_empty())
            || matches!(value, New::Seq(i) if i.is_empty());
        let scalar_like = matches!(value, New::Str(_) | New::Plain(_)) || empty_collection;
        if in_flow {
            let mut text = String::new();
            value.flow(&mut text);
            let (start, end) = value_span(doc, target);
            self.push_edit((start, end, text));
            return;
        }
        let parent = node.parent.map(|p| &doc.nodes[p]);
        let parent_is_seq = parent.is_some_and(|p| matches!(p.kind, Kind::Seq(_)));
        let key_col = key_col_of(doc, target);
        let own_line_block = !node.flow
            && matches!(node.kind, Kind::Map(_) | Kind::Seq(_))
            && !parent_is_seq
            && !doc.src[doc.line_start(node.start)..node.start]
                .chars()
                .any(|c| !c.is_whitespace());
        let mut scalar = String::new();
        if scalar_like {
            value.flow_plain(&mut scalar);
        }
        if parent_is_seq || key_col.is_none() {
            // `- item` (or a root): the first line continues after the dash.
            let (start, end) = value_span(doc, target);
            let text = if scalar_like {
                scalar
            } else {
                let mut lines = String::new();
                render_block(value, node.col, &mut lines);
                lines[node.col.min(lines.len())..]
                    .trim_end_matches('\n')
                    .to_owned()
            };
            self.push_edit((start, end, text));
            return;
        }
        let key_col = key_col.unwrap_or(0);
        let colon = value_colon(doc, target);
        if scalar_like {
            let text = format!(" {scalar}");
            self.push_edit((colon, node.end.max(colon), text));
            return;
        }
        let indent = match (value, &node.kind) {
            (New::Seq(_), Kind::Seq(_)) if own_line_block => node.col,
            (_, Kind::Map(_)) if own_line_block => node.col,
            _ => key_col + 2,
        };
        let mut lines = String::new();
        render_block(value, indent, &mut lines);
        let lines = lines.trim_end_matches('\n');
        if own_line_block {
            self.edits
                .push((doc.line_start(node.start), node.end, lines.to_owned()));
        } else {
            // `key: scalar` or `key: {flow}` becomes `key:` and lines below.
            self.edits
                .push((colon, node.end.max(colon), format!("\n{lines}")));
        }
    }
}

/// Byte just after the `:` that introduces the value `id` of a block or flow mapping entry.
fn value_colon(doc: &Doc, id: NodeId) -> usize {
    let Some(parent) = doc.nodes[id].parent else {
        return doc.nodes[id].start;
    };
    let Some(&(key, _)) = doc.entries(parent).iter().find(|&&(_, v)| v == id) else {
        return doc.nodes[id].start;
    };
    let from = doc.nodes[key].end;
    let bytes = doc.src.as_bytes();
    let mut i = from;
    while i < bytes.len() && bytes[i] != b':' {
        i += 1;
    }
    (i + 1).min(bytes.len())
}

/// The span to overwrite for node `id`; an empty value sits after its key's colon.
fn value_span(doc: &Doc, id: NodeId) -> (usize, usize) {
    let node = &doc.nodes[id];
    if node.start == node.end && doc.src.as_bytes().get(node.start) == Some(&b':') {
        return (node.start + 1, node.start + 1);
    }
    (node.start, node.end)
}

/// Renders a value as block lines at `indent` (each ending in a newline).
fn render_block(value: &New, indent: usize, out: &mut String) {
    match value {
        New::Map(entries) => block_entries(entries, indent, out),
        New::Seq(items) => block_items(items, indent, out),
        other => {
            push_indent(out, indent);
            other.flow_plain(out);
            out.push('\n');
        }
    }
}

/// The edit that sets a scalar's value (see [`Editor::set_scalar`]).
pub fn scalar_edit(
    doc: &Doc,
    id: NodeId,
    value: &str,
    as_string: bool,
) -> Option<(usize, usize, String)> {
    {
        let node = &doc.nodes[id];
        let Kind::Scalar { style, tagged, .. } = &node.kind else {
            return None;
        };
        let (mut start, end) = value_span(doc, id);
        let empty_after_colon = start != node.start;
        let text = match style {
            Style::Single if !value.contains('\n') => format!("'{}'", value.replace('\'', "''")),
            Style::Double | Style::Single => double_quoted(value),
            Style::Plain if !*tagged => {
                if value.is_empty() || (as_string && needs_quotes(value)) || plain_unsafe(value) {
                    double_quoted(value)
                } else {
                    value.to_owned()
                }
            }
            Style::Plain => double_quoted(value),
            Style::Block => {
                // The span starts at the content; the `|`/`>` header belongs to the value.
                if let Some(header) = doc.src[..start].rfind(['|', '>']) {
                    start = header;
                }
                let mut text = double_quoted(value);
                text.push('\n');
                text
            }
        };
        let text = if empty_after_colon {
            format!(" {text}")
        } else {
            text
        };
        Some((start, end, text))
    }
}

impl Editor {
    /// Makes sure `path` exists below `map` and holds `entries` (a map), creating missing maps.
    /// Existing keys are overwritten only when `overwrite`; keys that already exist with the same
    /// value are left alone. Returns how many keys were written or queued.
    pub fn ensure_map(
        &mut self,
        doc: &Doc,
        map: NodeId,
        path: &[&str],
        entries: &[(String, String)],
        overwrite: bool,
    ) -> usize {
        if entries.is_empty() {
            return 0;
        }
        let mut node = map;
        for (i, key) in path.iter().enumerate() {
            match doc.get(node, key) {
                Some(child) if doc.is_map(child) && !is_alias(doc, child) => node = child,
                Some(child) if doc.is_null(child) => {
                    let value = nest(&path[i + 1..], entries);
                    self.replace_null(doc, node, key, child, value);
                    return entries.len();
                }
                Some(_) => return 0,
                None => {
                    let value = nest(&path[i + 1..], entries);
                    self.insert(doc, node, key, value);
                    return entries.len();
                }
            }
        }
        let mut count = 0;
        for (key, value) in entries {
            match doc.get(node, key) {
                Some(existing) => {
                    if overwrite && doc.str(existing) != Some(value.as_str()) {
                        if doc.str(existing).is_some() && !is_alias(doc, existing) {
                            self.set_scalar(doc, existing, value, true);
                        } else {
                            // A collection, or an alias (whose anchor others may share):
                            // the entry gets the string itself.
                            self.replace_node(doc, existing, &New::str(value.clone()));
                        }
                        count += 1;
                    } else if overwrite {
                        count += 1;
                    }
                }
                None => {
                    self.insert(doc, node, key, New::str(value.clone()));
                    count += 1;
                }
            }
        }
        count
    }

    /// Queues `key: value` for insertion at the end of mapping `map`.
    pub fn insert(&mut self, doc: &Doc, map: NodeId, key: &str, value: New) {
        self.queued_bytes += key.len() + value.approx_len();
        let pending = self.pending.entry(map).or_default();
        // Merge into an entry queued earlier under the same key (e.g. two labels under a
        // `labels:` that did not exist).
        if let Some((_, New::Map(existing))) = pending.iter_mut().find(|(k, _)| k == key)
            && let New::Map(more) = value
        {
            for (k, v) in more {
                merge_new(existing, k, v);
            }
            return;
        }
        let _ = doc;
        pending.push((key.to_owned(), value));
    }

    fn replace_null(&mut self, doc: &Doc, map: NodeId, key: &str, null: NodeId, value: New) {
        // Modelled as a pending insert on the null node itself, flushed in `finish`.
        let _ = (map, key);
        self.queued_bytes += value.approx_len();
        let pending = self.pending.entry(null).or_default();
        if let New::Map(entries) = value {
            for (k, v) in entries {
                merge_new(pending, k, v);
            }
        }
        let _ = doc;
    }

    /// Applies every change to `src`.
    pub fn finish(mut self, doc: &Doc) -> String {
        let src = doc.src;
        let pending = std::mem::take(&mut self.pending);
        // Nodes are numbered in document order, parents before children: a later node that
        // ends where an earlier one ends lies inside it, and its lines must come first.
        for (id, entries) in pending.into_iter().rev() {
            let node = &doc.nodes[id];
            match &node.kind {
                Kind::Map(existing) if node.flow => {
                    let mut text = String::new();
                    for (i, (k, v)) in entries.iter().enumerate() {
                        if i > 0 || !existing.is_empty() {
                            text.push_str(", ");
                        }
                        text.push_str(&double_quoted(k));
                        text.push_str(": ");
                        v.flow(&mut text);
                    }
                    let at = node.end.saturating_sub(1);
                    self.edits.push((at, at, text));
                }
                Kind::Map(_) => {
                    let at = doc.line_end(node.end);
                    let mut text = String::new();
                    if at == src.len() && !src.ends_with('\n') {
                        text.push('\n');
                    }
                    block_entries(&entries, node.col, &mut text);
                    self.edits.push((at, at, text));
                }
                Kind::Scalar { .. } => {
                    // A null value being replaced by a map: find its key's column.
                    let in_flow = is_in_flow(doc, id);
                    if in_flow {
                        let mut text = String::new();
                        New::Map(entries).flow(&mut text);
                        self.edits.push((node.start, node.end, text));
                    } else {
                        let key_col = key_col_of(doc, id).unwrap_or(0);
                        self.edits.push((node.start, node.end, String::new()));
                        let at = doc.line_end(node.end);
                        let mut text = String::new();
                        if at == src.len() && !src.ends_with('\n') {
                            text.push('\n');
                        }
                        block_entries(&entries, key_col + 2, &mut text);
                        self.edits.push((at, at, text));
                    }
                }
                _ => {}
            }
        }
        apply_edits(src, self.edits)
    }
}

fn merge_new(entries: &mut Vec<(String, New)>, key: String, value: New) {
    if let Some((_, existing)) = entries.iter_mut().find(|(k, _)| *k == key) {
        if let (New::Map(a), New::Map(b)) = (existing, value) {
            for (k, v) in b {
                merge_new(a, k, v);
            }
        }
    } else {
        entries.push((key, value));
    }
}

fn nest(path: &[&str], entries: &[(String, String)]) -> New {
    let mut value = New::Map(
        entries
            .iter()
            .map(|(k, v)| (k.clone(), New::str(v.clone())))
            .collect(),
    );
    for key in path.iter().rev() {
        value = New::Map(vec![((*key).to_owned(), value)]);
    }
    value
}

fn is_alias(doc: &Doc, id: NodeId) -> bool {
    matches!(doc.nodes[id].kind, Kind::Alias(_))
}

/// A scalar whose tag was cleared, as kyaml writes it: plain (so `3` reads back as a number)
/// unless plain text could not hold it.
pub fn untyped_scalar(value: &str) -> String {
    if value.is_empty() || plain_unsafe(value) {
        double_quoted(value)
    } else {
        value.to_owned()
    }
}

fn plain_unsafe(value: &str) -> bool {
    // Text that would not even parse back as one plain scalar.
    value.contains('\n') || (needs_quotes(value) && resolve_plain(value).is_string())
}

fn is_in_flow(doc: &Doc, id: NodeId) -> bool {
    doc.nodes[id].parent.is_some_and(|p| doc.nodes[p].flow)
}

fn key_col_of(doc: &Doc, value: NodeId) -> Option<usize> {
    let parent = doc.nodes[value].parent?;
    doc.entries(parent)
        .iter()
        .find(|&&(_, v)| v == value)
        .map(|&(k, _)| doc.nodes[k].col)
}

/// Applies non-overlapping edits (sorted by position; inserts at one spot keep their order).
pub fn apply_edits(src: &str, mut edits: Vec<(usize, usize, String)>) -> String {
    edits.sort_by_key(|&(start, end, _)| (start, end));
    let extra: usize = edits.iter().map(|(_, _, t)| t.len()).sum();
    let mut out = String::with_capacity(src.len() + extra);
    let mut at = 0;
    for (start, end, text) in edits {
        if start < at {
            // Overlapping edits would corrupt the text; the earlier one wins.
            continue;
        }
        out.push_str(&src[at..start]);
        out.push_str(&text);
        at = end;
    }
    out.push_str(&src[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(src: &str, f: impl FnOnce(&Doc, &mut Editor)) -> String {
        let doc = Doc::parse(src).unwrap();
        let mut editor = Editor::default();
        f(&doc, &mut editor);
        editor.finish(&doc)
    }

    #[test]
    fn spans_and_insertions_keep_everything_else() {
        let src = "a: 1 # one\nm:\n  k: v   # keep\n\n  # trailing\nz: 'q'\n";
        let out = edit(src, |doc, ed| {
            let root = doc.roots[0];
            let m = doc.get(root, "m").unwrap();
            ed.ensure_map(doc, m, &[], &[("nk".into(), "3".into())], true);
            ed.set_scalar(doc, doc.get(root, "z").unwrap(), "it's", true);
        });
        assert_eq!(
            out,
            "a: 1 # one\nm:\n  k: v   # keep\n  nk: \"3\"\n\n  # trailing\nz: 'it''s'\n"
        );
    }

    #[test]
    fn creates_missing_and_null_maps_once() {
        let src = "metadata:\n  name: x\nspec:\n";
        let out = edit(src, |doc, ed| {
            let root = doc.roots[0];
            let md = doc.get(root, "metadata").unwrap();
            ed.ensure_map(doc, md, &["labels"], &[("a".into(), "b".into())], true);
            ed.ensure_map(doc, md, &["labels"], &[("c".into(), "true".into())], true);
            ed.ensure_map(doc, root, &["spec", "x"], &[("d".into(), "e".into())], true);
        });
        assert_eq!(
            out,
            "metadata:\n  name: x\n  labels:\n    a: b\n    c: \"true\"\nspec:\n  x:\n    d: e\n"
        );
    }

    #[test]
    fn flow_maps_stay_flow() {
        let src = "{\"metadata\": {\"name\": \"x\"}, \"l\": {}}";
        let out = edit(src, |doc, ed| {
            let root = doc.roots[0];
            let md = doc.get(root, "metadata").unwrap();
            ed.ensure_map(doc, md, &["labels"], &[("a".into(), "b".into())], true);
            ed.ensure_map(doc, root, &["l"], &[("c".into(), "d".into())], true);
        });
        assert_eq!(
            out,
            "{\"metadata\": {\"name\": \"x\", \"labels\": {\"a\": \"b\"}}, \"l\": {\"c\": \"d\"}}"
        );
    }

    #[test]
    fn non_ascii_offsets() {
        let src = "é: \"ü\"\nk: v\n";
        let out = edit(src, |doc, ed| {
            ed.set_scalar(doc, doc.get(doc.roots[0], "k").unwrap(), "ö", true);
        });
        assert_eq!(out, "é: \"ü\"\nk: ö\n");
    }

    #[test]
    fn sequence_nodes_start_at_the_dash() {
        let src = "a:\n  - x\n  - y\nb:\n- p: 1\n  q: 2\n";
        let doc = Doc::parse(src).unwrap();
        let a = doc.get(doc.roots[0], "a").unwrap();
        assert_eq!(&src[doc.node(a).start..doc.node(a).end], "- x\n  - y");
        assert_eq!(doc.node(a).col, 2);
        let b = doc.get(doc.roots[0], "b").unwrap();
        assert_eq!(doc.node(b).col, 0);
        let item = doc.items(b)[0];
        assert_eq!(doc.node(item).col, 2);
    }

    #[test]
    fn quoted_and_flow_spans_stop_before_comments() {
        let src = "a: \"1\" # c\nb: 'it''s' # d\nc: [x] # e\nd: {y: z} # f\n";
        let doc = Doc::parse(src).unwrap();
        let text = |k: &str| {
            let n = doc.node(doc.get(doc.roots[0], k).unwrap());
            &src[n.start..n.end]
        };
        assert_eq!(text("a"), "\"1\"");
        assert_eq!(text("b"), "'it''s'");
        assert_eq!(text("c"), "[x]");
        assert_eq!(text("d"), "{y: z}");
    }

    fn laughs(levels: usize) -> String {
        let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for level in 1..levels {
            let items = vec![format!("*a{}", level - 1); 9].join(", ");
            src.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        src
    }

    #[test]
    fn alias_expansion_is_bounded() {
        // Three levels (729 copies) are fine; eight (43 million) are a bomb.
        assert!(Doc::parse(&laughs(3)).is_ok());
        let error = Doc::parse(&laughs(8)).err().unwrap();
        assert!(error.contains("refused as an alias bomb"), "{error}");
        // One big anchored scalar copied many times is a bomb too.
        let big = format!(
            "a: &a {}\nb: [{}]\n",
            "x".repeat(100_000),
            vec!["*a"; 30].join(", ")
        );
        assert!(Doc::parse(&big).err().unwrap().contains("alias bomb"));
        let many = format!("a: &a x\nb: [{}]\n", vec!["*a"; MAX_ALIASES + 1].join(", "));
        let error = Doc::parse(&many).err().unwrap();
        assert!(error.starts_with("more than 10000 aliases"), "{error}");
    }

    #[test]
    fn recursive_aliases_are_refused() {
        for src in ["a: &a [*a]\n", "a: &a {b: *a}\n", "- &x\n  - *x\n"] {
            let error = Doc::parse(src).err().unwrap();
            assert!(
                error.contains("refers to a node that contains it"),
                "{src:?}: {error}"
            );
        }
    }

    #[test]
    fn duplicate_keys_are_refused_with_their_position() {
        for (src, expected) in [
            (
                "a: 1\nb: 2\na: 3\n",
                "duplicate mapping key \"a\" at line 3 column 1 (first at line 1 column 1)",
            ),
            (
                "m: {k: 1, 'k': 2}\n",
                "duplicate mapping key \"k\" at line 1 column 11 (first at line 1 column 5)",
            ),
            (
                "x:\n  - é: 1\n    é: 2\n",
                "duplicate mapping key \"é\" at line 3 column 5 (first at line 2 column 5)",
            ),
        ] {
            assert_eq!(Doc::parse(src).err().as_deref(), Some(expected), "{src:?}");
        }
        let wide: String = (0..100).map(|i| format!("k{i}: v\n")).collect();
        assert!(Doc::parse(&wide).is_ok());
        let error = Doc::parse(&format!("{wide}k7: again\n")).err().unwrap();
        assert!(
            error.starts_with("duplicate mapping key \"k7\" at line 101"),
            "{error}"
        );
    }

    #[test]
    fn tab_separators_parse_and_tabs_in_scalars_stay() {
        let src = "a:\tb\nc: \"x:\ty\"\nd: |\n  e:\tf\ng:\t[h]\n";
        let doc = Doc::parse(src).unwrap();
        let root = doc.roots[0];
        assert_eq!(doc.get_str(root, &["a"]), Some("b"));
        assert_eq!(doc.get_str(root, &["c"]), Some("x:\ty"));
        assert_eq!(doc.get_str(root, &["d"]), Some("e:\tf\n"));
        assert_eq!(doc.src, src);
    }

    #[test]
    fn a_requested_stop_ends_the_parse() {
        let stop = Stop::default();
        stop.request();
        let block: String = (0..3000).map(|i| format!("k{i}: v\n")).collect();
        let flow = format!("[{}]", vec!["x"; 3000].join(", "));
        for src in [block, flow] {
            assert_eq!(
                Doc::parse_until(&src, &stop).err().as_deref(),
                Some(STOPPED)
            );
        }
    }

    #[test]
    fn values_that_are_not_strings_are_replaced_not_skipped() {
        let src = "m:\n  k: {a: b}\n  l:\n    - x\n  s: &s old\n  t: *s\n";
        let out = edit(src, |doc, ed| {
            let m = doc.get(doc.roots[0], "m").unwrap();
            let entries =
                [("k", "v"), ("l", "w"), ("t", "new")].map(|(k, v)| (k.to_owned(), v.to_owned()));
            assert_eq!(ed.ensure_map(doc, m, &[], &entries, true), 3);
        });
        assert_eq!(out, "m:\n  k: v\n  l: w\n  s: &s old\n  t: new\n");
    }

    #[test]
    fn quoting_rules() {
        for s in [
            "",
            "3",
            "true",
            "yes",
            "null",
            "1.5",
            "0x1f",
            "2024-01-01",
            "a: b",
            "-x ",
            "#c",
        ] {
            assert!(needs_quotes(s), "{s}");
        }
        for s in ["abc", "nginx:1.2", "a-b", "-x", "foo.bar/baz"] {
            assert!(!needs_quotes(s), "{s}");
        }
    }
}
