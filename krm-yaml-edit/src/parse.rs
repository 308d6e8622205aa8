//! The general parser (saphyr's events), which takes any YAML the fast path declines.

use saphyr_parser::{Event, Parser, ScalarStyle};

use crate::limits::check_text_size;
use crate::tree::narrow;
use crate::{
    ALIAS_EXPANSION_ALLOWANCE, Children, Doc, Kind, MAX_ALIASES, MAX_DEPTH, Node, NodeId,
    ParseError, Position, Stop, Style,
};

/// How often (in parser events) the general parser looks at its [`Stop`].
const STOP_CHECK_EVENTS: usize = 1024;

/// saphyr refuses a tab as the only separator after a mapping's `:` (`key:<TAB>value`), which
/// YAML allows (tabs may separate tokens within a line) and kpt reads.
const TAB_AFTER_COLON: &str = "':' must be followed by a valid YAML whitespace";

enum Open {
    Map(NodeId, Vec<(NodeId, NodeId)>, Option<NodeId>),
    Seq(NodeId, Vec<NodeId>),
}

impl<'a> Doc<'a> {
    /// Parses `src` (see [`Doc::parse_until`]).
    pub fn parse(src: &'a str) -> Result<Self, ParseError> {
        Self::parse_until(src, &Stop::default())
    }

    /// Parses `src`, giving up with [`Stopped`](crate::Stopped) once `stop` is requested. Duplicate keys,
    /// recursive aliases, alias bombs, nesting deeper than [`MAX_DEPTH`] and texts longer than
    /// [`MAX_TEXT_BYTES`](crate::MAX_TEXT_BYTES) are errors.
    pub fn parse_until(src: &'a str, stop: &Stop) -> Result<Self, ParseError> {
        let doc = match crate::fast::parse(src, stop) {
            Some(doc) => {
                #[cfg(debug_assertions)]
                doc.assert_same_as_general();
                doc
            }
            None => Self::parse_general_until(src, stop)?,
        };
        stop.check()?;
        if !doc.keys_unique {
            doc.check_unique_keys()?;
        }
        Ok(doc)
    }

    /// Refuses a mapping that holds one key twice (as Go's yaml.v3, and so kpt, does): which of
    /// the two values counts would otherwise depend on who reads it.
    pub fn check_unique_keys(&self) -> Result<(), ParseError> {
        for node in &self.nodes {
            let Kind::Map(entries) = node.kind else {
                continue;
            };
            if let Some((first, again)) = self.repeated_key(&self.entries[entries.range()]) {
                return Err(ParseError::DuplicateKey {
                    key: self.str(again).unwrap_or_default().to_owned(),
                    at: Position::of(self.src, self.nodes[again].start()),
                    first: Position::of(self.src, self.nodes[first].start()),
                });
            }
        }
        Ok(())
    }

    /// The first key of a mapping's `entries` that an earlier key repeats: (earlier, repeat).
    pub(crate) fn repeated_key(&self, entries: &[(NodeId, NodeId)]) -> Option<(NodeId, NodeId)> {
        /// Up to this many entries, comparing every pair is cheaper than hashing.
        const LINEAR: usize = 16;
        // Most mappings of a resource hold one entry.
        if entries.len() < 2 {
            return None;
        }
        if entries.len() <= LINEAR {
            // Each key's text looked up once: the fast path asks this of every mapping.
            let mut texts = [None; LINEAR];
            for (text, &(key, _)) in texts.iter_mut().zip(entries) {
                *text = self.str(key);
            }
            let texts = &texts[..entries.len()];
            return texts.iter().enumerate().find_map(|(i, text)| {
                let text = text.as_ref()?;
                let earlier = texts[..i].iter().position(|t| t.as_ref() == Some(text))?;
                Some((entries[earlier].0, entries[i].0))
            });
        }
        let mut seen: std::collections::HashMap<&str, NodeId> = Default::default();
        entries.iter().find_map(|&(key, _)| {
            let earlier = *seen.entry(self.str(key)?).or_insert(key);
            (earlier != key).then_some((earlier, key))
        })
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
        if let Some(difference) = self.difference(&general) {
            panic!("{difference} of {:?}", self.src);
        }
    }

    /// The first difference between this tree and `other`, if any (scalars compared by their
    /// values, wherever each tree keeps them): for checking one parser against the other.
    #[cfg(any(test, debug_assertions))]
    pub fn difference(&self, other: &Doc) -> Option<String> {
        if self.roots != other.roots {
            return Some(format!("roots {:?} and {:?}", self.roots, other.roots));
        }
        if self.nodes.len() != other.nodes.len() {
            return Some(format!(
                "{} nodes and {}",
                self.nodes.len(),
                other.nodes.len()
            ));
        }
        for (i, (a, b)) in self.nodes.iter().zip(&other.nodes).enumerate() {
            let same_kind = match (a.kind, b.kind) {
                (
                    Kind::Scalar { style, tagged, .. },
                    Kind::Scalar {
                        style: other_style,
                        tagged: other_tagged,
                        ..
                    },
                ) => style == other_style && tagged == other_tagged && self.str(i) == other.str(i),
                (kind, other_kind) => kind == other_kind,
            };
            let place = |n: &Node| (n.start(), n.end(), n.col(), n.flow(), n.parent());
            if !same_kind || place(a) != place(b) {
                return Some(format!(
                    "node {i}: {a:?} {:?} and {b:?} {:?}",
                    self.str(i),
                    other.str(i)
                ));
            }
        }
        if self.entries != other.entries {
            return Some("entries differ".into());
        }
        (self.items != other.items).then(|| "items differ".into())
    }

    /// The general parser (saphyr events) alone, to check the fast path against it.
    #[cfg(any(test, debug_assertions))]
    pub fn parse_general(src: &'a str) -> Result<Self, ParseError> {
        Self::parse_general_until(src, &Stop::default())
    }

    fn parse_general_until(src: &'a str, stop: &Stop) -> Result<Self, ParseError> {
        check_text_size(src.len())?;
        match Self::parse_events(src, src, stop) {
            Err(ParseError::Syntax(error)) if error.info().starts_with(TAB_AFTER_COLON) => {
                Self::parse_tab_separated(src, stop)
            }
            parsed => parsed,
        }
    }

    /// Parses `src` with every tab that directly follows a `:` read as a space (same length,
    /// so every offset holds). A tab that turns out to sit inside a scalar (a quoted or block
    /// scalar holding `:<TAB>`) is content, not a separator: it is restored and the text parsed
    /// again, which settles it since tabs in separators do not change where scalars end.
    fn parse_tab_separated(src: &'a str, stop: &Stop) -> Result<Self, ParseError> {
        let bytes = src.as_bytes();
        let mut tabs: Vec<usize> = (1..bytes.len())
            .filter(|&i| bytes[i] == b'\t' && bytes[i - 1] == b':')
            .collect();
        for _ in 0..3 {
            let mut spaced = bytes.to_vec();
            for &i in &tabs {
                spaced[i] = b' ';
            }
            // Only ASCII tabs became ASCII spaces: the text is still UTF-8.
            let spaced = String::from_utf8(spaced).expect("tabs replaced by spaces");
            let doc = Self::parse_events(&spaced, src, stop)?;
            // `tabs` is sorted: each scalar finds the tabs inside it by binary search.
            let mut in_scalars: Vec<usize> = Vec::new();
            for node in &doc.nodes {
                if matches!(node.kind, Kind::Scalar { .. }) {
                    let first = tabs.partition_point(|&tab| tab < node.start());
                    let after = tabs.partition_point(|&tab| tab < node.end());
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
    fn parse_events(scanned: &str, src: &'a str, stop: &Stop) -> Result<Self, ParseError> {
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
        let mut doc = Doc::with_capacity(src, 0, 0);
        let mut anchors: std::collections::HashMap<usize, NodeId> = Default::default();
        let mut stack: Vec<Open> = Vec::new();
        let mut expansion = Expansion::default();
        let mut parser = Parser::new_from_str(scanned);
        let mut events = 0usize;
        while let Some(next) = parser.next_event() {
            events += 1;
            if events.is_multiple_of(STOP_CHECK_EVENTS) {
                stop.check()?;
            }
            let (event, span) = next?;
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
                    // saphyr's span of a quoted scalar can run over a trailing comment, and a
                    // block scalar's on to the next token, over the next line's indentation.
                    let end = match style {
                        Style::Single => quoted_end(src, start, b'\'').unwrap_or(end),
                        Style::Double => quoted_end(src, start, b'"').unwrap_or(end),
                        Style::Block => start + content_len(&src[start..end.max(start)]),
                        Style::Plain => end,
                    };
                    expansion.scalar(value.len());
                    let value = doc.keep_value(&value).ok_or(ParseError::TooManyValues)?;
                    let id = doc
                        .push(Node::new(
                            Kind::Scalar {
                                value,
                                style,
                                tagged: tag.is_some(),
                            },
                            start,
                            end,
                            col,
                            false,
                        ))
                        .ok_or(ParseError::TooManyNodes)?;
                    if anchor > 0 {
                        anchors.insert(anchor, id);
                    }
                    Some(id)
                }
                Event::Alias(anchor) => {
                    let target = *anchors
                        .get(&anchor)
                        .ok_or_else(|| ParseError::UnknownAlias {
                            at: Position::of(src, start),
                        })?;
                    expansion.alias(target, src, start)?;
                    Some(
                        doc.push(Node::new(
                            Kind::Alias(narrow(target)),
                            start,
                            end,
                            col,
                            false,
                        ))
                        .ok_or(ParseError::TooManyNodes)?,
                    )
                }
                Event::MappingStart(anchor, _) | Event::SequenceStart(anchor, _) => {
                    if stack.len() >= MAX_DEPTH {
                        return Err(ParseError::TooDeep {
                            at: Position::of(src, start),
                        });
                    }
                    let is_map = matches!(event, Event::MappingStart(..));
                    expansion.open();
                    // The span runs on over the blanks and comments after a flow
                    // collection's bracket (`[ x ]`, `[ # c`).
                    let bracket = opening_bracket(&src[start..end.max(start)]);
                    let flow = bracket.is_some();
                    // A block collection starts at its first entry; the span may cover an
                    // anchor or tag before it, which belongs to the parent line.
                    let (start, col) = match bracket {
                        Some(at) => (start + at, col),
                        None => (end, col),
                    };
                    let kind = if is_map {
                        Kind::Map(Children::default())
                    } else {
                        Kind::Seq(Children::default())
                    };
                    let id = doc
                        .push(Node::new(kind, start, start, col, flow))
                        .ok_or(ParseError::TooManyNodes)?;
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
                    let (id, children) = match stack.pop() {
                        Some(Open::Map(id, entries, _)) => (id, doc.add_entries(&entries)),
                        Some(Open::Seq(id, items)) => (id, doc.add_items(&items)),
                        None => return Err(ParseError::Unbalanced),
                    };
                    doc.nodes[id].set_children(children);
                    let (first, last) = first_and_last_child(&doc, id);
                    let node_end = if doc.nodes[id].flow() {
                        // The closing bracket (the event's span may run over a comment).
                        (start + 1).min(end)
                    } else {
                        last.map_or(doc.nodes[id].start(), |last| doc.nodes[last].end())
                    };
                    expansion.close(id, doc.entries(id), doc.items(id));
                    let node = &mut doc.nodes[id];
                    node.set_end(node_end.max(node.start()));
                    // A block collection's start is its first child (the event may sit on an
                    // anchor, or be empty in indentless sequences).
                    if !node.flow()
                        && let Some(first) = first
                    {
                        let (first_start, first_col) =
                            (doc.nodes[first].start(), doc.nodes[first].col());
                        let node = &mut doc.nodes[id];
                        if matches!(node.kind, Kind::Seq(_)) {
                            // The dash sits two columns before the item in `- item`.
                            let dash = seq_dash(src, first_start);
                            node.set_start(dash);
                            node.set_col(column_of(src, dash).unwrap_or(first_col));
                        } else {
                            node.set_start(first_start);
                            node.set_col(first_col);
                        }
                    }
                    Some(id)
                }
            };
            if let Some(id) = finished {
                doc.nodes[id].set_parent(match stack.last() {
                    Some(Open::Map(parent, ..) | Open::Seq(parent, _)) => Some(*parent),
                    None => None,
                });
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

    /// Closes collection `id` with its children (a mapping's entries or a sequence's items).
    fn close(&mut self, id: NodeId, entries: &[(NodeId, NodeId)], items: &[NodeId]) {
        let children: u64 = entries
            .iter()
            .map(|&(k, v)| self.sizes[k].saturating_add(self.sizes[v]))
            .chain(items.iter().map(|&i| self.sizes[i]))
            .fold(0, u64::saturating_add);
        self.sizes[id] = children.saturating_add(1);
    }

    fn alias(&mut self, target: NodeId, src: &str, at: usize) -> Result<(), ParseError> {
        self.aliases += 1;
        if self.aliases > MAX_ALIASES {
            return Err(ParseError::TooManyAliases {
                at: Position::of(src, at),
            });
        }
        let size = self.sizes[target];
        if size == u64::MAX {
            return Err(ParseError::RecursiveAlias {
                at: Position::of(src, at),
            });
        }
        self.own += 1;
        self.sizes.push(size);
        Ok(())
    }

    fn check(&self, roots: &[NodeId]) -> Result<(), ParseError> {
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
            return Err(ParseError::AliasBomb { limit });
        }
        Ok(())
    }
}

/// The first and last child of a collection (a mapping's first key and last value).
fn first_and_last_child(doc: &Doc, id: NodeId) -> (Option<NodeId>, Option<NodeId>) {
    match doc.nodes[id].kind {
        Kind::Map(_) => {
            let entries = doc.entries(id);
            (
                entries.first().map(|&(k, _)| k),
                entries.last().map(|&(_, v)| v),
            )
        }
        Kind::Seq(_) => {
            let items = doc.items(id);
            (items.first().copied(), items.last().copied())
        }
        _ => (None, None),
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

/// The length of a block scalar's text, from its first content character, up to the end of
/// its last line with content (zero when it has none).
fn content_len(text: &str) -> usize {
    let mut len = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        if !body.trim().is_empty() {
            len = at + body.len();
        }
        at += line.len();
    }
    len
}

/// Where the text of a collection's start event ends in a flow collection's opening bracket
/// (after anchors, tags, blanks and comments), its offset; none for a block collection.
fn opening_bracket(text: &str) -> Option<usize> {
    let mut last = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        // A comment starts at a `#` at the start of a line or after a blank; anchors and tags
        // may hold other ones.
        let code_end = line
            .char_indices()
            .find(|&(at, c)| {
                c == '#'
                    && line[..at]
                        .chars()
                        .next_back()
                        .is_none_or(char::is_whitespace)
            })
            .map_or(line.len(), |(at, _)| at);
        let code = line[..code_end].trim_end();
        if let Some(c) = code.chars().next_back() {
            last = Some((offset + code.len() - c.len_utf8(), c));
        }
        offset += line.len();
    }
    last.filter(|&(_, c)| matches!(c, '[' | '{'))
        .map(|(at, _)| at)
}
