//! A node encoded alone as kyaml writes it (`RNode.String()`: yaml.v3's encoder, indent 2,
//! sequences not indented under their key), from the tree and its text: scalars in their
//! written style, anchors, tags and aliases kept, block scalars re-emitted with yaml.v3's
//! indicators, flow collections joined to one line, and the comments yaml.v3's parser
//! attaches to the node and the nodes below it.

use std::borrow::Cow;

use crate::{Doc, Kind, MAX_DEPTH, NodeId, Style};

/// Where a node is written: alone, after `key:`, or after `- `.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    Value,
    Item,
}

/// A line of the text between nodes.
#[derive(Clone, Copy)]
enum Line<'a> {
    Blank,
    /// A comment (from its `#`, trailing blanks cut) starting at this column.
    Comment(usize, &'a str),
    Content,
}

/// The head and foot comments yaml.v3 attaches to a key or item: lines, `""` for a blank
/// line inside a head.
#[derive(Default)]
struct Around<'a> {
    head: Vec<&'a str>,
    foot: Vec<&'a str>,
}

impl<'a> Doc<'a> {
    /// The node encoded alone as kyaml's `RNode.String()` writes it, ending in a newline.
    ///
    /// Comments are placed as yaml.v3's scanner places them (scannerc.go
    /// yaml_parser_scan_comments): a run of comments right after a node and followed by a
    /// blank line, or by a line indented less than the collection it closes, is that node's
    /// foot; other comments are the head of the key or item after them; a comment on a
    /// scalar's or flow collection's line is its line comment, one on a key's line whose
    /// value is a block collection the key's. The emitter (emitterc.go) writes them at the
    /// node's indentation, a line comment one space after the node, and a blank line after
    /// a foot comment when the next line is at the same indentation.
    pub fn encode(&self, id: NodeId) -> String {
        let mut encoder = Encoder {
            doc: self,
            out: String::new(),
            handed_down: None,
            props_below: false,
            foot_indent: None,
        };
        let own = self.own_comments(id);
        encoder.comments(&own.head, 0);
        if !encoder.out.is_empty() {
            encoder.out.push('\n');
        }
        encoder.node(id, 0, Place::Root, 0);
        encoder.foot(&own.foot, 0);
        // A document's own foot comment: after a blank line at its end (emitterc.go
        // yaml_emitter_emit_document_end writes it set apart by a blank line).
        let document_foot = self.document_foot(id);
        if !document_foot.is_empty() {
            encoder.foot_indent = Some(0);
            encoder.comments(&document_foot, 0);
        }
        if !encoder.out.ends_with('\n') {
            encoder.out.push('\n');
        }
        encoder.out
    }

    /// The comments after a blank line at the end of the document whose root is `id` (a
    /// collection's last entry takes those before it).
    fn document_foot(&self, id: NodeId) -> Vec<&'a str> {
        // Roots are numbered in the order of their documents.
        if self.node(id).parent().is_some() || self.roots.binary_search(&id).is_err() {
            return Vec::new();
        }
        let after = self.lines_after(id);
        let taken = self.taken_below(id, &after, 0).min(after.len());
        let rest = &after[taken..];
        match rest.iter().position(|l| matches!(l, Line::Comment(..))) {
            Some(first) if first > 0 => head_of(&rest[first..]),
            _ => Vec::new(),
        }
    }

    /// The comment and blank lines above a node's first line, and what precedes the node on
    /// that line: with [`Doc::comments_after`] and its own text, all that kyaml's text of it
    /// and of the nodes below it is made of; two nodes written alike with these alike, at the
    /// same column, kyaml writes alike.
    pub fn comments_before(&self, id: NodeId) -> &'a str {
        let start = self.node(id).start();
        &self.src[self.comment_block_start(self.line_start(start))..start]
    }

    /// From a node's end to the end of the comment and blank lines after its last line (see
    /// [`Doc::comments_before`]).
    pub fn comments_after(&self, id: NodeId) -> &'a str {
        let end = self.text_end(id);
        let mut to = self.line_end(end);
        for line in self.src[to..].split_inclusive('\n') {
            if matches!(line_kind(line), Line::Content) {
                break;
            }
            to += line.len();
        }
        &self.src[end..to]
    }

    /// The lines of the text from byte `from` (a line start) up to `to`.
    fn lines(&self, from: usize, to: usize) -> Vec<Line<'a>> {
        let text = self.src.get(from.min(to)..to).unwrap_or_default();
        text.split_inclusive('\n').map(line_kind).collect()
    }

    /// The comment and blank lines right after the node (from the next line on), up to the
    /// next content line: read no further, as every key and item asks.
    fn lines_after(&self, id: NodeId) -> Vec<Line<'a>> {
        let from = self.line_end(self.text_end(id));
        self.src[from..]
            .split_inclusive('\n')
            .map(line_kind)
            .take_while(|line| !matches!(line, Line::Content))
            .collect()
    }

    /// The indentation a block collection opens for yaml.v3's scanner: none for a flow
    /// collection, a scalar, or a sequence written at its key's column.
    fn level(&self, id: NodeId) -> Option<usize> {
        let node = self.node(id);
        if node.flow() {
            return None;
        }
        match node.kind {
            Kind::Map(children) if !children.is_empty() => Some(node.col()),
            Kind::Seq(children) if !children.is_empty() => {
                let indentless = node.parent().is_some_and(|parent| {
                    matches!(self.node(parent).kind, Kind::Map(_))
                        && self.node(parent).col() == node.col()
                        && !self.node(parent).flow()
                });
                (!indentless).then_some(node.col())
            }
            _ => None,
        }
    }

    /// The value below a key or item whose trailing comments it may take: a block
    /// collection's last child's, through sequences that open no indentation.
    fn last_value(&self, id: NodeId) -> Option<NodeId> {
        match self.node(id).kind {
            Kind::Map(_) => self.entries(id).last().map(|&(_, v)| v),
            Kind::Seq(_) => self.items(id).last().copied(),
            _ => None,
        }
    }

    /// How many of `lines` (those after node `value`) the collections ending with `value`
    /// take as foot comments: the leading comment lines at or beyond each one's indentation.
    fn taken_below(&self, value: NodeId, lines: &[Line], depth: usize) -> usize {
        if depth > MAX_DEPTH || self.node(value).flow() {
            return 0;
        }
        let deeper = self
            .last_value(value)
            .map_or(0, |last| self.taken_below(last, lines, depth + 1));
        match self.level(value) {
            Some(level) => {
                let run = lines
                    .iter()
                    .take_while(|l| matches!(l, Line::Comment(col, _) if *col >= level))
                    .count();
                run.max(deeper)
            }
            None => deeper,
        }
    }

    /// The node whose text ends child `index` of a collection: a key's value, or the item.
    fn subtree(&self, parent: NodeId, index: usize) -> NodeId {
        match self.node(parent).kind {
            Kind::Map(_) => self.entries(parent)[index].1,
            _ => self.items(parent)[index],
        }
    }

    /// Where child `index` of a block collection is written first: its key, or its item's
    /// line for an item (the dash).
    fn child_start(&self, parent: NodeId, index: usize) -> usize {
        match self.node(parent).kind {
            Kind::Map(_) => self.node(self.entries(parent)[index].0).start(),
            _ => {
                let item = self.items(parent)[index];
                let start = self.node(item).start();
                let mut line = self.line_start(start);
                let mut before = &self.src[line..start];
                // An item may start below its dash, past comments.
                while before.trim().is_empty() && line > 0 {
                    line = self.line_start(line - 1);
                    let text = self.rest_of_line(line);
                    before = text.find(" #").map_or(text, |cut| &text[..cut]);
                    if !before.trim().is_empty() && !before.trim_start().starts_with('#') {
                        break;
                    }
                }
                // The item's own dash is the last one before it (`- - item`).
                let bytes = before.as_bytes();
                let dash = (0..bytes.len()).rev().find(|&i| {
                    bytes[i] == b'-' && bytes.get(i + 1).is_none_or(|b| b.is_ascii_whitespace())
                });
                match dash {
                    Some(dash) if before.trim_start().starts_with('-') => line + dash,
                    _ => start,
                }
            }
        }
    }

    /// The head and foot comments of child `index` of block collection `parent`.
    fn around(&self, parent: NodeId, index: usize) -> Around<'a> {
        let mut around = Around::default();
        let start = self.child_start(parent, index);
        let line = self.line_start(start);
        if index == 0 {
            // Only a child that leads its line has a head (else it is its parent's).
            if self.src[line..start].trim().is_empty() {
                let from = self.comment_block_start(line);
                let above = self.lines(from, line);
                // Below a dash on a line of its own, the comment on the dash's line heads the
                // collection's first child (yaml.v3's parser gives it that head).
                let dash_comment = (from > 0)
                    .then(|| self.line_start(from - 1))
                    .filter(|&dash_line| {
                        self.rest_of_line(dash_line).trim_start().starts_with('-')
                            && self
                                .node(parent)
                                .parent()
                                .is_some_and(|seq| matches!(self.node(seq).kind, Kind::Seq(_)))
                    })
                    .and_then(|dash_line| {
                        let text = self.rest_of_line(dash_line);
                        text.find(" #").map(|at| text[at + 1..].trim_end())
                    });
                around.head.extend(dash_comment);
                around.head.extend(head_of(&above));
                // A document's head comment set apart from its first key by a blank line is
                // the document's, which yaml.v3 writes followed by a blank line.
                let document = self.node(parent).parent().is_none();
                if document && matches!(above.last(), Some(Line::Blank)) && !around.head.is_empty()
                {
                    around.head.push("");
                }
            }
        } else {
            let before = self.subtree(parent, index - 1);
            let lines = self.lines(self.line_end(self.text_end(before)), line);
            let rest = &lines[self.taken_below(before, &lines, 0).min(lines.len())..];
            around.head = head_of(&rest[foot_len(rest)..]);
        }
        let count = match self.node(parent).kind {
            Kind::Map(children) | Kind::Seq(children) => children.len(),
            _ => 0,
        };
        let own = self.subtree(parent, index);
        let after = self.lines_after(own);
        let taken = self.taken_below(own, &after, 0).min(after.len());
        let rest = &after[taken..];
        if index + 1 < count {
            let foot = &rest[..foot_len(rest)];
            if !self.dedented(parent, own, foot) {
                around.foot = comment_texts(foot);
            }
        } else if let Some(level) = self.level(parent) {
            let run = rest
                .iter()
                .take_while(|l| matches!(l, Line::Comment(col, _) if *col >= level))
                .count();
            around.foot = comment_texts(&rest[..run]);
        }
        // A foot carried over from before this item, or before the item holding this map.
        let carried = match self.node(parent).kind {
            Kind::Seq(_) if !self.is_block_map(own) => self.carried(parent, index),
            Kind::Map(_) if index == 0 => self
                .node(parent)
                .parent()
                .filter(|&seq| matches!(self.node(seq).kind, Kind::Seq(_)))
                .and_then(|seq| {
                    let item = self.items(seq).binary_search(&parent).ok()?;
                    Some(self.carried(seq, item))
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        if !carried.is_empty() {
            around.foot.splice(0..0, carried);
        }
        around
    }

    /// An empty plain scalar (a key or dash with nothing after it).
    fn is_empty_value(&self, id: NodeId) -> bool {
        matches!(
            self.node(id).kind,
            Kind::Scalar {
                style: Style::Plain,
                tagged: false,
                ..
            }
        ) && self.str(id) == Some("")
    }

    fn is_block_map(&self, id: NodeId) -> bool {
        let node = self.node(id);
        matches!(node.kind, Kind::Map(children) if !children.is_empty()) && !node.flow()
    }

    /// Whether `foot`, comments right after item `item` of sequence `seq` (then a blank
    /// line), are indented less than the innermost collection that item ends in: yaml.v3's
    /// scanner then ties them to no node before them, and its parser gives them to the next
    /// node it reads (the next item, or that item's first key).
    fn dedented(&self, seq: NodeId, item: NodeId, foot: &[Line]) -> bool {
        let Some(Line::Comment(col, _)) = foot.first() else {
            return false;
        };
        if !matches!(self.node(seq).kind, Kind::Seq(_)) {
            return false;
        }
        let mut innermost = self.level(seq).or_else(|| {
            let parent = self.node(seq).parent()?;
            Some(self.node(parent).col())
        });
        let mut node = Some(item);
        for _ in 0..=MAX_DEPTH {
            let Some(id) = node else { break };
            if let Some(level) = self.level(id) {
                innermost = Some(level);
            }
            node = self.last_value(id);
        }
        innermost.is_some_and(|innermost| *col < innermost)
    }

    /// The comments right after item `index - 1` of sequence `seq` that yaml.v3 carries over
    /// to item `index` (see [`Doc::dedented`]).
    fn carried(&self, seq: NodeId, index: usize) -> Vec<&'a str> {
        if index == 0 {
            return Vec::new();
        }
        let before = self.items(seq)[index - 1];
        let line = self.line_start(self.child_start(seq, index));
        let lines = self.lines(self.line_end(self.text_end(before)), line);
        let rest = &lines[self.taken_below(before, &lines, 0).min(lines.len())..];
        let foot = &rest[..foot_len(rest)];
        if self.dedented(seq, before, foot) {
            comment_texts(foot)
        } else {
            Vec::new()
        }
    }

    /// Where the comment and blank lines just above line `line` start.
    fn comment_block_start(&self, line: usize) -> usize {
        let mut start = line;
        while start > 0 {
            let previous = self.line_start(start - 1);
            let text = self.src[previous..start].trim();
            if !text.is_empty() && !text.starts_with('#') {
                break;
            }
            start = previous;
        }
        start
    }

    /// A node's own head and foot comments: an item's, which the encoder writes with it.
    fn own_comments(&self, id: NodeId) -> Around<'a> {
        match self.node(id).parent() {
            Some(parent)
                if matches!(self.node(parent).kind, Kind::Seq(_)) && !self.node(parent).flow() =>
            {
                // Items are numbered in the order they are written.
                let index = self.items(parent).binary_search(&id).ok();
                index.map_or_else(Around::default, |i| self.around(parent, i))
            }
            _ => Around::default(),
        }
    }

    /// The comment on the rest of the line after a flow entry ending at `end`, past the comma
    /// after it.
    fn flow_line_comment(&self, end: usize) -> Option<&'a str> {
        let rest = self.rest_of_line(end).trim_start();
        let rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        rest.starts_with('#').then(|| rest.trim_end())
    }

    /// The comments on lines of their own between a flow entry ending at `end` and the next
    /// one, starting at `start`: the next one's head.
    fn flow_head_comments(&self, end: usize, start: usize) -> Vec<&'a str> {
        let gap = self.src.get(end..start).unwrap_or_default();
        gap.find('\n').map_or_else(Vec::new, |first_break| {
            gap[first_break + 1..]
                .lines()
                .map(str::trim)
                .filter(|line| line.starts_with('#'))
                .collect()
        })
    }

    /// The comment on the rest of the line after byte `pos`, from its `#`.
    fn comment_after(&self, pos: usize) -> Option<&'a str> {
        let rest = self.rest_of_line(pos).trim();
        rest.starts_with('#').then_some(rest)
    }

    /// The line holding a block scalar's header (`key: &a |2-`), up to the comment on it, and
    /// that comment: the line above its content (its span starts at the content).
    fn block_header(&self, id: NodeId) -> (&'a str, Option<&'a str>) {
        let start = self.node(id).start();
        let split = |text: &'a str| match text.find(" #") {
            Some(cut) => (&text[..cut], Some(text[cut + 1..].trim_end())),
            None => (text, None),
        };
        // With an anchor or tag, the span starts at them, on the header's line.
        let (first, comment) = split(self.rest_of_line(start));
        let header_token = |token: &str| {
            token.starts_with(['&', '!'])
                || token.starts_with(['|', '>'])
                    && token[1..]
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b == b'+' || b == b'-')
        };
        if first
            .split_whitespace()
            .next_back()
            .is_some_and(|t| t.starts_with(['|', '>']))
            && first.split_whitespace().all(header_token)
        {
            let line = self.line_start(start);
            return (&self.src[line..start + first.len()], comment);
        }
        let mut line = self.line_start(start);
        while line > 0 {
            line = self.line_start(line - 1);
            let text = self.rest_of_line(line);
            if text.trim().is_empty() {
                continue;
            }
            return split(text);
        }
        ("|", None)
    }

    /// Whether yaml.v3 writes `key` as a simple key (emitterc.go
    /// yaml_emitter_check_simple_key): an alias, an empty collection, or a scalar on one line
    /// whose value, anchor and tag take at most 128 bytes.
    fn simple_key(&self, key: NodeId) -> bool {
        let node = self.node(key);
        let (anchor, tag) = self.properties(key);
        let properties = anchor.map_or(0, |a| a.len() - 1) + tag.map_or(0, str::len);
        match node.kind {
            Kind::Alias(_) => true,
            Kind::Map(children) | Kind::Seq(children) => children.is_empty(),
            Kind::Scalar {
                style: Style::Block,
                ..
            } => false,
            Kind::Scalar { .. } => {
                let value = self.str(key).unwrap_or_default();
                !value.contains('\n') && properties + value.len() <= 128
            }
        }
    }

    /// Where a node's text ends: a block scalar's span runs on over the comment and blank
    /// lines after it, up to the next node; so does a block collection's that ends with one.
    fn text_end(&self, mut id: NodeId) -> usize {
        // Only a block scalar's span ends in blanks: most nodes end where their span does.
        let end = self.node(id).end();
        if !self.src[..end].ends_with([' ', '\t', '\n', '\r']) {
            return end;
        }
        for _ in 0..=MAX_DEPTH {
            let node = self.node(id);
            match node.kind {
                Kind::Scalar {
                    style: Style::Block,
                    ..
                } => return self.block_scalar_end(id),
                Kind::Map(_) | Kind::Seq(_) if !node.flow() => match self.last_value(id) {
                    Some(last) => id = last,
                    None => return node.end(),
                },
                _ => return node.end(),
            }
        }
        self.node(id).end()
    }

    /// The end of a block scalar's last content line: the lines of its span indented at
    /// least as its first content line, blank lines aside.
    fn block_scalar_end(&self, id: NodeId) -> usize {
        let node = self.node(id);
        let mut pos = self.line_start(node.start());
        // With an anchor or tag, the span starts on the header's line.
        let on_header = !self.src[pos..node.start()].trim().is_empty();
        let mut content_indent = None;
        let mut last = node.start();
        for (i, line) in self.src[pos..node.end()].split_inclusive('\n').enumerate() {
            let at = pos;
            pos += line.len();
            let body = line.trim_end();
            if (i == 0 && on_header) || body.trim().is_empty() {
                continue;
            }
            let indent = body.len() - body.trim_start().len();
            match content_indent {
                Some(content) if indent < content => break,
                Some(_) => {}
                None => content_indent = Some(indent),
            }
            last = at + body.len();
        }
        last
    }

    /// The line above a block collection that holds content, where its anchor and tag are
    /// written (`key: &a`): its code and the comment after it. None for a collection that
    /// starts on a line after other text (`- k: v`), whose properties there are its first
    /// key's.
    fn header_line(&self, id: NodeId) -> Option<(&'a str, Option<&'a str>)> {
        let start = self.node(id).start();
        let mut above = self.line_start(start);
        if !self.src[above..start].trim().is_empty() {
            return None;
        }
        loop {
            if above == 0 {
                return None;
            }
            above = self.line_start(above - 1);
            let text = self.rest_of_line(above);
            let (code, comment) = match text.find(" #") {
                Some(cut) => (&text[..cut], Some(text[cut + 1..].trim_end())),
                None => (text, None),
            };
            let code = code.trim();
            if !code.is_empty() && !code.starts_with('#') {
                return Some((code, comment));
            }
        }
    }

    /// The comment after a block collection's anchor or tag (`key: &a # comment`): yaml.v3
    /// gives it to the first node below, the line comment of its first key or item.
    fn properties_comment(&self, id: NodeId) -> Option<&'a str> {
        let node = self.node(id);
        if node.flow() || !matches!(node.kind, Kind::Map(_) | Kind::Seq(_)) {
            return None;
        }
        let (anchor, tag) = self.properties(id);
        anchor.or(tag)?;
        self.header_line(id)?.1
    }

    /// The anchor and tag written before a node (`&a`, `!!str`), as written.
    fn properties(&self, id: NodeId) -> (Option<&'a str>, Option<&'a str>) {
        let node = self.node(id);
        let start = node.start();
        let line = self.line_start(start);
        let block = !node.flow() && matches!(node.kind, Kind::Map(_) | Kind::Seq(_));
        if let Kind::Scalar { style, .. } = node.kind {
            if style == Style::Block {
                // Written before the indicator on the header's line.
                let (code, _) = self.block_header(id);
                return tokens_properties(code.split_whitespace().rev().skip(1));
            }
            let (anchor, tag, _) = split_properties(&self.src[start..node.end()]);
            return (anchor, tag);
        }
        let before = if block {
            match self.header_line(id) {
                Some(header) => header.0,
                None => return (None, None),
            }
        } else {
            &self.src[line..start]
        };
        tokens_properties(before.split_whitespace().rev())
    }
}

fn line_kind(line: &str) -> Line<'_> {
    let body = line.trim_end();
    let trimmed = body.trim_start();
    if trimmed.is_empty() {
        Line::Blank
    } else if trimmed.starts_with('#') {
        Line::Comment(body.len() - trimmed.len(), trimmed)
    } else {
        Line::Content
    }
}

/// How many of `lines` (between two siblings, after what the earlier one's collections took)
/// are the earlier sibling's foot: the comments right after it when a blank line follows.
fn foot_len(lines: &[Line]) -> usize {
    let run = lines
        .iter()
        .take_while(|l| matches!(l, Line::Comment(..)))
        .count();
    if run > 0 && matches!(lines.get(run), Some(Line::Blank)) {
        run
    } else {
        0
    }
}

/// The comments of `lines` as a head: blank lines at its ends dropped, one kept between.
fn head_of<'a>(lines: &[Line<'a>]) -> Vec<&'a str> {
    let mut head = Vec::new();
    for line in lines {
        match line {
            Line::Comment(_, text) => head.push(*text),
            Line::Blank if head.last().is_some_and(|last: &&str| !last.is_empty()) => {
                head.push("");
            }
            _ => {}
        }
    }
    if head.last() == Some(&"") {
        head.pop();
    }
    head
}

fn comment_texts<'a>(lines: &[Line<'a>]) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|l| match l {
            Line::Comment(_, text) => Some(*text),
            _ => None,
        })
        .collect()
}

struct Encoder<'d, 'a> {
    doc: &'d Doc<'a>,
    out: String,
    /// A line comment handed down to the next key or item written (see
    /// [`Doc::properties_comment`]), unless that one has its own.
    handed_down: Option<&'a str>,
    /// Set before a block collection whose anchor or tag goes below the key's line comment.
    props_below: bool,
    /// After a foot comment, its indentation: yaml.v3's emitter writes a blank line before
    /// the next line at that indentation.
    foot_indent: Option<usize>,
}

impl<'a> Encoder<'_, 'a> {
    /// Starts a line at `indent`.
    fn line(&mut self, indent: usize) {
        if !self.out.is_empty() && !self.out.ends_with('\n') {
            self.out.push('\n');
        }
        if self.foot_indent.take() == Some(indent) {
            self.out.push('\n');
        }
        self.out.extend(std::iter::repeat_n(' ', indent));
    }

    fn comments(&mut self, lines: &[&str], indent: usize) {
        for text in lines {
            if text.is_empty() {
                // A blank line between comments: end the comment's line, then an empty one.
                if !self.out.is_empty() && !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
                self.out.push('\n');
            } else {
                self.line(indent);
                self.out.push_str(text);
            }
        }
    }

    /// Starts a key or item at `indent` after its head comments; `inline`, right after the
    /// `- ` of the item holding it, where yaml.v3 also writes the first head comment line.
    fn head(&mut self, lines: &[&str], indent: usize, inline: bool) {
        match lines.split_first() {
            Some((first, rest)) if inline => {
                self.out.push_str(first);
                self.comments(rest, indent);
                self.line(indent);
            }
            _ if inline => {}
            _ => {
                self.comments(lines, indent);
                self.line(indent);
            }
        }
    }

    fn foot(&mut self, lines: &[&str], indent: usize) {
        if !lines.is_empty() {
            self.comments(lines, indent);
            self.foot_indent = Some(indent);
        }
    }

    /// The line comment after a scalar or alias at `place` (its key or dash at `indent`): its
    /// `own`, else the one handed down. As yaml.v3's parser does, a value with its own passes
    /// the handed-down one on to the next key, of its map or of a map around it; an item with
    /// its own takes the handed-down one, its own going on the line below.
    fn value_comment(&mut self, own: Option<&'a str>, place: Place, indent: usize) {
        let handed_down = self.handed_down.take();
        match (own, handed_down) {
            (Some(own), Some(handed_down)) if place == Place::Item => {
                self.line_comment(Some(handed_down));
                self.line(indent);
                self.out.push_str(own);
            }
            (Some(own), handed_down) => {
                self.line_comment(Some(own));
                self.handed_down = handed_down;
            }
            (None, handed_down) => self.line_comment(handed_down),
        }
    }

    fn line_comment(&mut self, comment: Option<&str>) {
        if let Some(comment) = comment {
            self.out.push(' ');
            self.out.push_str(comment);
        }
    }

    /// Writes node `id` at `place`; `indent` is the column of the key or dash before it.
    fn node(&mut self, id: NodeId, indent: usize, place: Place, depth: usize) {
        let doc = self.doc;
        let props_below = std::mem::take(&mut self.props_below);
        if depth > MAX_DEPTH {
            return;
        }
        let node = doc.node(id);
        let (anchor, tag) = doc.properties(id);
        let block_collection = !node.flow() && matches!(node.kind, Kind::Map(_) | Kind::Seq(_));
        let mut props = String::new();
        for prop in [anchor, tag].into_iter().flatten() {
            if !props.is_empty() {
                props.push(' ');
            }
            props.push_str(prop);
        }
        // A block collection below a key starts on the next line; below a dash, yaml.v3
        // writes its first entry on the dash's line, wherever it was written.
        let own_lines = block_collection && place == Place::Value;
        if props_below {
            self.out.push('\n');
        } else if place != Place::Root && !(own_lines && props.is_empty()) {
            self.out.push(' ');
        }
        if !props.is_empty() {
            self.out.push_str(&props);
            if !block_collection {
                self.out.push(' ');
            }
        }
        match node.kind {
            Kind::Alias(_) => {
                self.out.push_str(&doc.src[node.start()..node.end()]);
                self.value_comment(doc.comment_after(node.end()), place, indent);
            }
            Kind::Scalar {
                style: Style::Block,
                ..
            } if analyze(doc.str(id).unwrap_or_default()).block => {
                self.block_scalar(id, indent + 2);
            }
            // yaml.v3 writes an empty value as nothing, without the space after `:` or `-`.
            Kind::Scalar { .. } if doc.is_empty_value(id) => {
                if place != Place::Root && self.out.ends_with(' ') {
                    self.out.pop();
                }
                let handed_down = self.handed_down.take();
                self.line_comment(handed_down);
            }
            Kind::Scalar { .. } => {
                self.out.push_str(&scalar_text(doc, id, false, false));
                self.value_comment(doc.comment_after(node.end()), place, indent);
            }
            _ if node.flow() => {
                // yaml.v3's emitter indents a flow collection's lines one step past the
                // mapping or dash it is written at (yaml_emitter_increase_indent), and its
                // closing bracket, on a line of its own, back at that step.
                let (flow_indent, outer) = match place {
                    Place::Root => (2, 0),
                    Place::Value | Place::Item => (indent + 2, indent),
                };
                self.flow(id, depth, flow_indent, outer);
                let handed_down = self.handed_down.take();
                self.line_comment(doc.comment_after(node.end()).or(handed_down));
            }
            Kind::Map(_) => {
                self.handed_down = doc.properties_comment(id).or(self.handed_down.take());
                let entries_indent = match place {
                    Place::Root => 0,
                    Place::Value | Place::Item => indent + 2,
                };
                let inline = place == Place::Item && props.is_empty();
                self.entries(id, entries_indent, inline, depth);
            }
            Kind::Seq(_) => {
                self.handed_down = doc.properties_comment(id).or(self.handed_down.take());
                let (items_indent, inline) = match place {
                    Place::Root => (0, false),
                    Place::Value => (indent, false),
                    Place::Item => (indent + 2, props.is_empty()),
                };
                self.items(id, items_indent, inline, depth);
            }
        }
    }

    fn entries(&mut self, map: NodeId, indent: usize, inline: bool, depth: usize) {
        let doc = self.doc;
        for (i, &(key, value)) in doc.entries(map).iter().enumerate() {
            let handed_down = self.handed_down.take();
            let around = doc.around(map, i);
            self.head(&around.head, indent, inline && i == 0);
            if doc.simple_key(key) {
                self.scalar_with_properties(key, false, true);
            } else {
                // yaml_emitter_check_simple_key: a collection, or a scalar on several lines
                // or longer than 128 bytes, is written as an explicit `? key` line.
                self.out.push('?');
                self.node(key, indent, Place::Item, depth + 1);
                self.line(indent);
            }
            self.out.push(':');
            let value_node = doc.node(value);
            if !value_node.flow() && matches!(value_node.kind, Kind::Map(_) | Kind::Seq(_)) {
                let key_end = doc.node(key).end();
                let line = doc.rest_of_line(key_end);
                // The comment on the key's line, right after `:` (yaml.v3 gives one after an
                // anchor or tag to the first node below).
                let comment = line
                    .find('#')
                    .filter(|&at| line[..at].trim() == ":")
                    .map(|at| line[at..].trim_end());
                // One handed down goes there unless the key has its own; before a value with
                // an anchor or tag, yaml.v3's emitter then writes those on the next line, at
                // its first column.
                let (anchor, tag) = doc.properties(value);
                self.props_below = comment.is_none()
                    && handed_down.is_some()
                    && (anchor.is_some() || tag.is_some());
                self.line_comment(comment.or(handed_down));
            } else if matches!(value_node.kind, Kind::Scalar { .. } | Kind::Alias(_)) {
                // yaml.v3's emitter writes a key's line comment after a scalar value without
                // one of its own; one with its own passes it on.
                self.handed_down = handed_down;
            }
            self.node(value, indent, Place::Value, depth + 1);
            if value_node.flow() {
                // yaml.v3 carries it past a flow collection, to the next key.
                self.handed_down = handed_down;
            }
            self.foot(&around.foot, indent);
        }
    }

    fn items(&mut self, seq: NodeId, indent: usize, inline: bool, depth: usize) {
        let doc = self.doc;
        for (i, &item) in doc.items(seq).iter().enumerate() {
            let around = doc.around(seq, i);
            self.head(&around.head, indent, inline && i == 0);
            self.out.push('-');
            self.node(item, indent, Place::Item, depth + 1);
            self.handed_down = None;
            self.foot(&around.foot, indent);
        }
    }

    /// A scalar or alias in the middle of a line (a key, a flow collection's entry), with its
    /// anchor and tag.
    fn scalar_with_properties(&mut self, id: NodeId, flow: bool, key: bool) {
        let doc = self.doc;
        let (anchor, tag) = doc.properties(id);
        for prop in [anchor, tag].into_iter().flatten() {
            self.out.push_str(prop);
            self.out.push(' ');
        }
        self.out.push_str(&scalar_text(doc, id, flow, key));
    }

    /// A flow collection on one line (`{a: b, c: d}`, `[1, 2]`), unless comments inside it
    /// make yaml.v3's emitter break it (emitterc.go yaml_emitter_emit_flow_sequence_item,
    /// _flow_mapping_key): after an entry with a line comment it writes `,` (after a nested
    /// flow collection: on the next line), the comment and a line break; head comments go on
    /// lines of their own; lines after a break start at `indent`, a sequence's closing bracket
    /// at `outer`, a mapping's at the first column.
    fn flow(&mut self, id: NodeId, depth: usize, indent: usize, outer: usize) {
        let doc = self.doc;
        if depth > MAX_DEPTH {
            return;
        }
        let flow_node = |encoder: &mut Self, node: NodeId, key: bool| match doc.node(node).kind {
            Kind::Map(_) | Kind::Seq(_) => {
                let (anchor, tag) = doc.properties(node);
                for prop in [anchor, tag].into_iter().flatten() {
                    encoder.out.push_str(prop);
                    encoder.out.push(' ');
                }
                encoder.flow(node, depth + 1, indent + 2, indent);
            }
            Kind::Scalar { .. } | Kind::Alias(_) => encoder.scalar_with_properties(node, true, key),
        };
        // Whether an entry's line comment wrote the comma after it.
        let mut trail = false;
        // Writes what goes before the entry starting at `start`, after the one ending at
        // `previous` (or after the opening bracket at `previous`, for the first): a comma
        // unless a line comment wrote one, head comments, and the indentation at the start of
        // a line or a space after a comma.
        let between =
            |encoder: &mut Self, previous: usize, first: bool, start: usize, trail: &mut bool| {
                if !first && !std::mem::take(trail) {
                    encoder.out.push(',');
                }
                for comment in doc.flow_head_comments(previous, start) {
                    if !encoder.out.ends_with('\n') {
                        encoder.out.push('\n');
                    }
                    encoder.out.extend(std::iter::repeat_n(' ', indent));
                    encoder.out.push_str(comment);
                    encoder.out.push('\n');
                }
                if encoder.out.ends_with('\n') {
                    encoder.out.extend(std::iter::repeat_n(' ', indent));
                } else if !first {
                    encoder.out.push(' ');
                }
            };
        // After an entry's value: its line comment, if it has one; after a scalar the comma
        // goes before it, after a flow collection on the next line.
        let after = |encoder: &mut Self, value: NodeId, trail: &mut bool| {
            let Some(comment) = doc.flow_line_comment(doc.node(value).end()) else {
                return;
            };
            if matches!(doc.node(value).kind, Kind::Scalar { .. } | Kind::Alias(_)) {
                encoder.out.push(',');
                *trail = true;
            }
            encoder.out.push(' ');
            encoder.out.push_str(comment);
            encoder.out.push('\n');
        };
        let node = doc.node(id);
        // A flow collection's span starts at its bracket.
        let open = node.start() + 1;
        match node.kind {
            Kind::Map(_) => {
                self.out.push('{');
                let mut previous = open;
                for (i, &(key, value)) in doc.entries(id).iter().enumerate() {
                    between(self, previous, i == 0, doc.node(key).start(), &mut trail);
                    if doc.simple_key(key) {
                        flow_node(self, key, true);
                        self.out.push_str(": ");
                    } else {
                        self.out.push_str("? ");
                        flow_node(self, key, true);
                        self.out.push_str(" : ");
                    }
                    flow_node(self, value, false);
                    after(self, value, &mut trail);
                    previous = doc.node(value).end();
                }
                self.out.push('}');
            }
            Kind::Seq(_) => {
                self.out.push('[');
                let mut previous = open;
                for (i, &item) in doc.items(id).iter().enumerate() {
                    between(self, previous, i == 0, doc.node(item).start(), &mut trail);
                    flow_node(self, item, false);
                    after(self, item, &mut trail);
                    previous = doc.node(item).end();
                }
                if self.out.ends_with('\n') {
                    self.out.extend(std::iter::repeat_n(' ', outer));
                }
                self.out.push(']');
            }
            Kind::Scalar { .. } | Kind::Alias(_) => flow_node(self, id, false),
        }
    }

    /// A literal or folded block scalar as yaml.v3's emitter writes it (emitterc.go
    /// yaml_emitter_write_block_scalar_hints, _write_literal_scalar, _write_folded_scalar),
    /// its content at `indent`.
    fn block_scalar(&mut self, id: NodeId, indent: usize) {
        let doc = self.doc;
        let value = doc.str(id).unwrap_or_default();
        let (code, comment) = doc.block_header(id);
        let indicator = code.split_whitespace().next_back().unwrap_or_default();
        let folded = indicator.starts_with('>');
        self.out.push(if folded { '>' } else { '|' });
        if value.starts_with([' ', '\n']) {
            self.out.push('2');
        }
        let bytes = value.as_bytes();
        let keep = bytes.len() >= 2 && bytes.ends_with(b"\n\n") || value == "\n";
        if !value.ends_with('\n') {
            self.out.push('-');
        } else if keep {
            self.out.push('+');
        }
        self.value_comment(comment, Place::Value, indent);
        // yaml.v3 writes an extra line break after each content line of a folded scalar
        // (its lookahead starts at the value's first byte rather than at the break).
        let extra_breaks = folded
            && value
                .trim_start_matches('\n')
                .chars()
                .next()
                .is_some_and(|c| c != ' ' && c != '\t');
        self.out.push('\n');
        let mut at_line_start = true;
        let mut leading_spaces = true;
        for c in value.chars() {
            if c == '\n' {
                if extra_breaks && !at_line_start && !leading_spaces {
                    self.out.push('\n');
                }
                self.out.push('\n');
                at_line_start = true;
            } else {
                if at_line_start {
                    self.out.extend(std::iter::repeat_n(' ', indent));
                    leading_spaces = c == ' ' || c == '\t';
                }
                self.out.push(c);
                at_line_start = false;
            }
        }
    }
}

/// The anchor and tag among `tokens` (read backwards from a node), up to the first other one.
fn tokens_properties<'a>(
    tokens: impl Iterator<Item = &'a str>,
) -> (Option<&'a str>, Option<&'a str>) {
    let (mut anchor, mut tag) = (None, None);
    for token in tokens {
        if token.starts_with('&') && anchor.is_none() {
            anchor = Some(token);
        } else if token.starts_with('!') && tag.is_none() {
            tag = Some(token);
        } else {
            break;
        }
    }
    (anchor, tag)
}

/// The anchor and tag at the start of a scalar's span (the general parser's spans hold them),
/// and the offset of the scalar's own text.
fn split_properties(text: &str) -> (Option<&str>, Option<&str>, usize) {
    let (mut anchor, mut tag) = (None, None);
    let mut rest = text;
    while rest.starts_with(['&', '!']) {
        let token = &rest[..rest.find(char::is_whitespace).unwrap_or(rest.len())];
        if token.starts_with('&') {
            anchor = Some(token);
        } else {
            tag = Some(token);
        }
        rest = rest[token.len()..].trim_start();
    }
    (anchor, tag, text.len() - rest.len())
}

/// The styles yaml.v3's emitter allows for a value (emitterc.go yaml_emitter_analyze_scalar).
struct Allowed {
    flow_plain: bool,
    block_plain: bool,
    single_quoted: bool,
    block: bool,
    multiline: bool,
}

fn analyze(value: &str) -> Allowed {
    if value.is_empty() {
        return Allowed {
            flow_plain: false,
            block_plain: true,
            single_quoted: true,
            block: false,
            multiline: false,
        };
    }
    let is_break = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
    let is_blank = |c: Option<char>| c.is_none_or(|c| c == ' ' || c == '\t' || is_break(c));
    let (mut flow_indicators, mut block_indicators) = (false, false);
    if value.starts_with("---") || value.starts_with("...") {
        (flow_indicators, block_indicators) = (true, true);
    }
    let (mut line_breaks, mut special, mut tabs) = (false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    let mut chars = value.chars().peekable();
    let mut first = true;
    while let Some(c) = chars.next() {
        let followed_by_whitespace = is_blank(chars.peek().copied());
        if first {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => (flow_indicators, block_indicators) = (true, true),
                '?' | ':' => {
                    flow_indicators = true;
                    block_indicators |= followed_by_whitespace;
                }
                '-' if followed_by_whitespace => {
                    (flow_indicators, block_indicators) = (true, true);
                }
                _ => {}
            }
        } else {
            match c {
                ',' | '?' | '[' | ']' | '{' | '}' => flow_indicators = true,
                ':' => {
                    flow_indicators = true;
                    block_indicators |= followed_by_whitespace;
                }
                '#' if preceded_by_whitespace => (flow_indicators, block_indicators) = (true, true),
                _ => {}
            }
        }
        let printable = matches!(c, '\n' | ' '..='~' | '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
            && c != '\u{FEFF}';
        if c == '\t' {
            tabs = true;
        } else if !printable {
            special = true;
        }
        if c == ' ' {
            break_space |= previous_break;
            (previous_space, previous_break) = (true, false);
        } else if is_break(c) {
            line_breaks = true;
            space_break |= previous_space;
            (previous_space, previous_break) = (false, true);
        } else {
            (previous_space, previous_break) = (false, false);
        }
        preceded_by_whitespace = is_blank(Some(c));
        first = false;
    }
    let edges = value.starts_with(' ')
        || value.starts_with(is_break)
        || value.ends_with(' ')
        || value.ends_with(is_break);
    let plain = !edges && !break_space && !space_break && !tabs && !special && !line_breaks;
    Allowed {
        flow_plain: plain && !flow_indicators,
        block_plain: plain && !block_indicators,
        single_quoted: !break_space && !space_break && !tabs && !special,
        block: !value.ends_with(' ') && !space_break && !special,
        multiline: line_breaks,
    }
}

/// A scalar (not a block one that stays one) as yaml.v3 writes it again in a flow collection
/// or in block context, as a key or not: in its written style unless yaml.v3 must choose
/// another for its value (yaml_emitter_select_scalar_style), as written when on one line.
fn scalar_text<'a>(doc: &Doc<'a>, id: NodeId, flow: bool, key: bool) -> Cow<'a, str> {
    let node = doc.node(id);
    let text = &doc.src[node.start().min(node.end())..node.end()];
    let Kind::Scalar { style: written, .. } = node.kind else {
        return Cow::Borrowed(text);
    };
    let text = &text[split_properties(text).2..];
    let value = doc.str(id).unwrap_or_default();
    let allowed = analyze(value);
    let mut style = written;
    if key && allowed.multiline {
        style = Style::Double;
    }
    if style == Style::Plain
        && ((flow && !allowed.flow_plain)
            || (!flow && !allowed.block_plain)
            || (value.is_empty() && (flow || key)))
    {
        style = Style::Single;
    }
    if style == Style::Single && !allowed.single_quoted {
        style = Style::Double;
    }
    if style == Style::Block && (!allowed.block || flow || key) {
        style = Style::Double;
    }
    let one_line = !text.contains('\n');
    match style {
        Style::Plain | Style::Single if style == written && one_line => Cow::Borrowed(text),
        Style::Plain if !value.contains('\n') => Cow::Owned(value.to_owned()),
        Style::Single if !value.contains('\n') => {
            Cow::Owned(format!("'{}'", value.replace('\'', "''")))
        }
        _ => Cow::Owned(double_quoted(value)),
    }
}

/// `value` double-quoted as yaml.v3's emitter writes it (emitterc.go
/// yaml_emitter_write_double_quoted_scalar, with unicode output): printable characters as
/// they are, the others escaped.
fn double_quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        let printable = matches!(c, ' '..='~' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
            && c != '\u{FEFF}';
        let escape = match c {
            '\0' => "\\0",
            '\u{7}' => "\\a",
            '\u{8}' => "\\b",
            '\t' => "\\t",
            '\n' => "\\n",
            '\u{B}' => "\\v",
            '\u{C}' => "\\f",
            '\r' => "\\r",
            '\u{1B}' => "\\e",
            '"' => "\\\"",
            '\\' => "\\\\",
            '\u{85}' => "\\N",
            '\u{2028}' => "\\L",
            '\u{2029}' => "\\P",
            _ if printable => {
                out.push(c);
                continue;
            }
            _ => {
                let code = u32::from(c);
                if code <= 0xFF {
                    out.push_str(&format!("\\x{code:02X}"));
                } else if code <= 0xFFFF {
                    out.push_str(&format!("\\u{code:04X}"));
                } else {
                    out.push_str(&format!("\\U{code:08X}"));
                }
                continue;
            }
        };
        out.push_str(escape);
    }
    out.push('"');
    out
}
