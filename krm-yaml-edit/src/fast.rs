//! A fast path for [`Doc::parse`](crate::Doc::parse): a line-oriented parser for the
//! plain block YAML that tools write (streams of documents separated by `---` and `...`
//! lines, block mappings and sequences, single-line plain and quoted scalars, literal block
//! scalars, comments, blank lines). It builds exactly the tree the saphyr-based parser builds
//! (same node order, spans, columns and values) and gives up (`None`) on anything else, leaving
//! that input to the general parser: flow collections, folded scalars, multi-line scalars,
//! anchors, aliases, tags, directives, unusual keys or indentation, and tabs
//! anywhere but between a mapping key's `:` and its value. Debug builds check every accepted
//! input against the general parser.

use std::borrow::Cow;

use crate::{Children, Doc, Kind, MAX_TEXT_BYTES, Node, NodeId, ScalarValue, Stop, Style};

/// Nesting deeper than this goes to the general parser (which refuses it).
const MAX_DEPTH: usize = 256;

type R<T> = Result<T, ()>;

struct P<'a, 's> {
    src: &'a str,
    stop: &'s Stop,
    b: &'a [u8],
    doc: Doc<'a>,
    /// Children of the collections being read (filed in `doc` when each is done).
    entries: Vec<(NodeId, NodeId)>,
    items: Vec<NodeId>,
    /// Start of the line the cursor is on (lines before it are consumed).
    pos: usize,
    /// The next line with content from the cursor: (line start, indent); see [`P::advance`].
    next: Option<(usize, usize)>,
    /// Byte offsets are columns.
    ascii: bool,
}

/// The tree of `src`, or `None` when the fast path does not handle it (or `stop` was requested).
pub fn parse<'a>(src: &'a str, stop: &Stop) -> Option<Doc<'a>> {
    let b = src.as_bytes();
    // Texts too long for the tree's offsets are the general parser's to refuse.
    if b.len() > MAX_TEXT_BYTES
        || crate::bytes::find(b'\r', b).is_some()
        || src.starts_with('\u{feff}')
    {
        return None;
    }
    // Block YAML holds a node for every 7-10 bytes, and a mapping entry for every two nodes or
    // so: enough room that the vectors of a large text are not copied while they grow (the
    // pages not used are never touched).
    let mut doc = Doc::with_capacity(src, src.len() / 6 + 16, src.len() / 12 + 8);
    doc.keys_unique = true;
    let mut p = P {
        src,
        stop,
        b,
        doc,
        entries: Vec::new(),
        items: Vec::new(),
        pos: 0,
        next: None,
        ascii: src.is_ascii(),
    };
    p.advance(0).ok()?;
    p.doc.roots = p.stream().ok()?;
    Some(p.doc)
}

/// The bytes a plain key's scan stops at: its `:`, the line's end, and what the fast path
/// leaves to the general parser (`#`, flow indicators, tabs). The rest are skipped by one
/// lookup each: keys are most of what a parse reads.
static KEY_STOPS: [bool; 256] = byte_set(b":\n#{}[],\t");

/// The bytes a plain value's scan stops at: the line's end, and what may end the value (`#`
/// of a comment) or make it the general parser's (`: `). Values are most of the rest.
static VALUE_STOPS: [bool; 256] = byte_set(b":\n#");

const fn byte_set(set: &[u8]) -> [bool; 256] {
    let mut members = [false; 256];
    let mut i = 0;
    while i < set.len() {
        members[set[i] as usize] = true;
        i += 1;
    }
    members
}

/// A YAML blank (space or tab), a line break or the end: what ends a `:` or `-` indicator.
fn is_space_or_end(b: &[u8], i: usize) -> bool {
    i >= b.len() || matches!(b[i], b' ' | b'\t' | b'\n')
}

/// How many spaces `b` starts with, counted eight bytes at a time: the indentation of every
/// line is most of the bytes a parse of nested YAML skips.
fn leading_spaces(b: &[u8]) -> usize {
    const SPACES: u64 = u64::from_le_bytes([b' '; 8]);
    let mut n = 0;
    while let Some(chunk) = b.get(n..n + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("a chunk of eight bytes"));
        // In little-endian order the lowest set bit falls in the first byte that differs.
        let other = word ^ SPACES;
        if other != 0 {
            return n + (other.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + b[n..].iter().take_while(|&&c| c == b' ').count()
}

fn is_blank(c: u8) -> bool {
    c == b' ' || c == b'\t'
}

impl<'a> P<'a, '_> {
    /// Every document of the text. A document starts at the text's start, after a `---`
    /// line or after a `...` line; an explicit one (`---`) without content is an empty plain
    /// scalar, placed as saphyr places it.
    fn stream(&mut self) -> R<Vec<NodeId>> {
        let mut roots = Vec::new();
        // Whether a `---` opened a document that has no content yet.
        let mut open_explicit = false;
        // Whether the last thing read was a document's content (where `...` may follow).
        let mut after_content = false;
        loop {
            if let Some((ls, indent)) = self.next {
                if indent != 0 {
                    return Err(());
                }
                let root = self.block_node(ls, 0, None, 0)?;
                roots.push(root);
                open_explicit = false;
                after_content = true;
                if self.next.is_some() {
                    return Err(());
                }
                continue;
            }
            let at = self.pos;
            if at >= self.b.len() {
                if open_explicit {
                    // saphyr's column at the end of a text without a final newline is not
                    // the line's; such texts are its to read.
                    if !self.src.ends_with('\n') {
                        return Err(());
                    }
                    roots.push(self.empty_document(at, at)?);
                }
                return Ok(roots);
            }
            // The search for the next line stopped at a document marker at the start of this
            // line.
            let is_start = self.b[at] == b'-';
            self.marker_line(at)?;
            match (is_start, open_explicit) {
                (true, true) => roots.push(self.empty_document(at, at + 3)?),
                (true, false) => open_explicit = true,
                (false, false) if after_content => {}
                // `...` opening the text, repeated, or ending an empty document: left to the
                // general parser.
                (false, _) => return Err(()),
            }
            after_content = false;
        }
    }

    /// Consumes the marker line (`---` or `...`) at `at`: the marker may be followed by blanks
    /// and a comment, nothing else.
    fn marker_line(&mut self, at: usize) -> R<()> {
        let eol = self.eol(at);
        let mut i = at + 3;
        while i < eol && self.b[i] == b' ' {
            i += 1;
        }
        if i < eol && !(self.b[i] == b'#' && i > at + 3) {
            return Err(());
        }
        self.advance((eol + 1).min(self.b.len()))
    }

    fn empty_document(&mut self, start: usize, end: usize) -> R<NodeId> {
        self.push(
            Kind::Scalar {
                value: ScalarValue::verbatim(start, start),
                style: Style::Plain,
                tagged: false,
            },
            start,
            end,
            0,
            None,
        )
    }

    /// End of the line holding `i` (the newline's index, or the text's length).
    fn eol(&self, i: usize) -> usize {
        match self.b[i.min(self.b.len())..]
            .iter()
            .position(|&c| c == b'\n')
        {
            Some(p) => i + p,
            None => self.b.len(),
        }
    }

    /// Moves the cursor to the line starting at `pos` and finds [`P::next`] from there: what
    /// comes next is asked after every move, so it is worked out once, here.
    #[inline(always)]
    fn advance(&mut self, pos: usize) -> R<()> {
        self.pos = pos;
        self.find_next()
    }

    /// Sets [`P::next`] to the next line with content, skipping blank and comment lines. A
    /// document marker (`---`, `...`) ends the document: `None`, with the cursor on its line.
    /// Directives give up. (It sets the field rather than return the line: a result in memory
    /// read back at once stalls the processor on every line.)
    fn find_next(&mut self) -> R<()> {
        let b = self.b;
        if self.stop.requested() {
            return Err(());
        }
        self.next = None;
        loop {
            let ls = self.pos;
            if ls >= b.len() {
                return Ok(());
            }
            let i = ls + leading_spaces(&b[ls..]);
            if i >= b.len() {
                self.pos = b.len();
                return Ok(());
            }
            match b[i] {
                b'\n' => self.pos = i + 1,
                b'#' => self.pos = (self.eol(i) + 1).min(b.len()),
                // Tabs in indentation (or tab-indented blank lines) are the general parser's.
                b'\t' => return Err(()),
                _ => {
                    if i == ls && b[i] == b'%' {
                        return Err(());
                    }
                    if i == ls
                        && (b[ls..].starts_with(b"---") || b[ls..].starts_with(b"..."))
                        && is_space_or_end(b, ls + 3)
                    {
                        self.pos = ls;
                        return Ok(());
                    }
                    self.next = Some((ls, i - ls));
                    return Ok(());
                }
            }
        }
    }

    #[inline]
    fn col(&self, ls: usize, at: usize) -> usize {
        if self.ascii {
            at - ls
        } else {
            self.col_in_text(ls, at)
        }
    }

    /// [`P::col`] of a text that is not all ASCII, kept out of the common path.
    #[inline(never)]
    fn col_in_text(&self, ls: usize, at: usize) -> usize {
        let prefix = &self.src[ls..at];
        if prefix.is_ascii() {
            at - ls
        } else {
            prefix.chars().count()
        }
    }

    /// Adds a node, its parent known: it is read before its children.
    #[inline(always)]
    fn push(
        &mut self,
        kind: Kind,
        start: usize,
        end: usize,
        col: usize,
        parent: Option<NodeId>,
    ) -> R<NodeId> {
        let mut node = Node::new(kind, start, end, col, false);
        node.set_parent(parent);
        self.doc.push(node).ok_or(())
    }

    /// A scalar's value: verbatim at `start..end` of the text, or `rewritten` from it.
    fn scalar_value(&mut self, start: usize, end: usize, rewritten: Cow<str>) -> R<ScalarValue> {
        match rewritten {
            Cow::Borrowed(_) => Ok(ScalarValue::verbatim(start, end)),
            Cow::Owned(value) => self.doc.keep_value(&value).ok_or(()),
        }
    }

    fn is_dash(&self, at: usize) -> bool {
        self.b[at] == b'-' && is_space_or_end(self.b, at + 1)
    }

    /// A block node whose first line is the content line at `ls` with `indent`.
    fn block_node(
        &mut self,
        ls: usize,
        indent: usize,
        parent: Option<NodeId>,
        depth: usize,
    ) -> R<NodeId> {
        if depth > MAX_DEPTH {
            return Err(());
        }
        let at = ls + indent;
        if self.is_dash(at) {
            self.seq(ls, at, parent, depth)
        } else if let Some(colon) = self.key_end(at)? {
            self.map(ls, at, colon, parent, depth)
        } else {
            Err(())
        }
    }

    /// If a mapping key starts at `at`: the index of its `:`, where the key's text ends.
    #[inline(always)]
    fn key_end(&self, at: usize) -> R<Option<usize>> {
        let b = self.b;
        match b[at] {
            q @ (b'"' | b'\'') => {
                let eol = self.eol(at);
                let Some(close) = quoted_close(b, at, eol, q) else {
                    return Err(());
                };
                if close < eol && b[close] == b':' && is_space_or_end(b, close + 1) {
                    Ok(Some(close))
                } else {
                    Ok(None)
                }
            }
            c if is_indicator(c) => Ok(None),
            _ => {
                for (i, &c) in b[at..].iter().enumerate() {
                    if !KEY_STOPS[usize::from(c)] {
                        continue;
                    }
                    match c {
                        b':' if is_space_or_end(b, at + i + 1) => {
                            if b[at + i - 1] == b' ' {
                                return Err(());
                            }
                            return Ok(Some(at + i));
                        }
                        b':' => {}
                        b'\n' => return Ok(None),
                        _ => return Err(()),
                    }
                }
                Ok(None)
            }
        }
    }

    /// A block mapping whose first key starts at `at` (on the line starting at `ls`) and ends
    /// at `colon`.
    fn map(
        &mut self,
        mut ls: usize,
        mut at: usize,
        mut colon: usize,
        parent: Option<NodeId>,
        depth: usize,
    ) -> R<NodeId> {
        let col = self.col(ls, at);
        let id = self.push(Kind::Map(Children::default()), at, at, col, parent)?;
        let base = self.entries.len();
        // The signatures of the plain keys read (see `key_signature`), and whether two keys
        // may be the same: only then are they compared.
        let mut signatures = 0;
        let mut may_repeat = false;
        loop {
            if colon - at > 1000 {
                return Err(());
            }
            let key = self.scalar_at(ls, at, colon, id)?;
            if matches!(self.b[at], b'"' | b'\'') {
                // Its value is not its text: `"a"` and `a` are one key.
                may_repeat = true;
            } else {
                let signature = key_signature(&self.b[at..colon]);
                may_repeat |= signatures & signature != 0;
                signatures |= signature;
            }
            // Most values are plain scalars after one space, which need none of the checks of
            // the general case.
            let value = match self.b.get(colon + 1..colon + 3) {
                Some(&[b' ', c]) if c.is_ascii_alphanumeric() => {
                    self.plain_value(ls, colon + 2, col, id)?
                }
                // Nothing after the `:`: the value is on the lines below.
                Some(&[b'\n', _]) => {
                    self.advance(colon + 2)?;
                    self.below(ls, colon + 1, false, col, id, depth)?
                }
                _ => self.value(ls, colon + 1, col, id, depth)?,
            };
            self.entries.push((key, value));
            match self.next {
                Some((next, indent)) if indent == col && !self.is_dash(next + indent) => {
                    ls = next;
                    at = next + indent;
                    colon = self.key_end(at)?.ok_or(())?;
                }
                Some((_, indent)) if indent >= col => return Err(()),
                _ => break,
            }
        }
        let end = self.doc.nodes[self.entries[base..].last().ok_or(())?.1].end();
        if may_repeat && self.doc.repeated_key(&self.entries[base..]).is_some() {
            // Refused after the parse, which names the first repeat in document order.
            self.doc.keys_unique = false;
        }
        let entries = self.doc.add_entries(&self.entries[base..]);
        self.entries.truncate(base);
        let node = &mut self.doc.nodes[id];
        node.set_end(end.max(node.start()));
        node.set_children(entries);
        Ok(id)
    }

    /// A block sequence whose first dash is at `at` (on the line starting at `ls`).
    fn seq(
        &mut self,
        mut ls: usize,
        mut at: usize,
        parent: Option<NodeId>,
        depth: usize,
    ) -> R<NodeId> {
        let col = self.col(ls, at);
        let id = self.push(Kind::Seq(Children::default()), at, at, col, parent)?;
        let base = self.items.len();
        loop {
            let item = self.value(ls, at + 1, col, id, depth)?;
            self.items.push(item);
            match self.next {
                Some((next, indent)) if indent == col && self.is_dash(next + indent) => {
                    ls = next;
                    at = next + indent;
                }
                Some((_, indent)) if indent > col => return Err(()),
                _ => break,
            }
        }
        let end = self.doc.nodes[*self.items[base..].last().ok_or(())?].end();
        let items = self.doc.add_items(&self.items[base..]);
        self.items.truncate(base);
        let node = &mut self.doc.nodes[id];
        node.set_end(end.max(node.start()));
        node.set_children(items);
        Ok(id)
    }

    /// The value after a key's `:` or an item's `-` at `from` on the line starting at `ls`, in
    /// collection `parent`; `parent_col` is the column of the key or dash. Leaves the cursor
    /// after the value.
    fn value(
        &mut self,
        ls: usize,
        from: usize,
        parent_col: usize,
        parent: NodeId,
        depth: usize,
    ) -> R<NodeId> {
        let b = self.b;
        let is_item = b[from - 1] == b'-';
        let mut q = from;
        // Tabs may separate a key's `:` from its value (`key:<TAB>value`); after a dash they
        // would open questions of indentation the general parser settles.
        while q < b.len() && (b[q] == b' ' || (b[q] == b'\t' && !is_item)) {
            q += 1;
        }
        if q < b.len() && b[q] == b'\t' {
            return Err(());
        }
        if q == b.len() || b[q] == b'\n' || b[q] == b'#' {
            let eol = self.eol(q);
            if q < eol && q == from {
                return Err(());
            }
            self.advance((eol + 1).min(b.len()))?;
            return self.below(ls, from, q != from, parent_col, parent, depth);
        }
        if q == from {
            return Err(());
        }
        if is_item {
            if self.is_dash(q) {
                return Err(());
            }
            if let Some(colon) = self.key_end(q)? {
                // `- key: value`: a mapping inside the item.
                return self.map(ls, q, colon, Some(parent), depth + 1);
            }
        }
        let (id, eol) = match b[q] {
            b'"' | b'\'' => {
                let eol = self.eol(q);
                let close = quoted_close(b, q, eol, b[q]).ok_or(())?;
                let id = self.scalar_at(ls, q, close, parent)?;
                self.expect_comment_or_eol(close, eol)?;
                (id, eol)
            }
            b'-' if is_space_or_end(b, q + 1) => return Err(()),
            // saphyr starts a sequence whose item is `|-` at the `-` of the header.
            b'|' if is_item && matches!(b.get(q + 1), Some(b'-' | b'+')) => return Err(()),
            b'|' => return self.literal(q, self.eol(q), parent_col, parent),
            c if c != b'-' && is_indicator(c) => return Err(()),
            _ => return self.plain_value(ls, q, parent_col, parent),
        };
        self.end_value_line(eol, parent_col)?;
        Ok(id)
    }

    /// The value after a key's `:` or an item's `-` at `from` (on the line starting at `ls`)
    /// with nothing after it on its line (`spaced` if blanks or a comment are), the cursor past
    /// that line: a nested block, an indentless sequence or a null.
    #[inline(always)]
    fn below(
        &mut self,
        ls: usize,
        from: usize,
        spaced: bool,
        parent_col: usize,
        parent: NodeId,
        depth: usize,
    ) -> R<NodeId> {
        let is_item = self.b[from - 1] == b'-';
        match self.next {
            Some((next, indent)) if indent > parent_col => {
                self.block_node(next, indent, Some(parent), depth + 1)
            }
            Some((next, indent))
                if indent == parent_col && !is_item && self.is_dash(next + indent) =>
            {
                self.seq(next, next + indent, Some(parent), depth + 1)
            }
            _ if spaced => Err(()),
            _ => {
                // saphyr puts an empty value at a key's colon, or just after a dash.
                let at = if is_item { from } else { from - 1 };
                let col = self.col(ls, at);
                self.push(
                    Kind::Scalar {
                        value: ScalarValue::verbatim(at, at),
                        style: Style::Plain,
                        tagged: false,
                    },
                    at,
                    at,
                    col,
                    Some(parent),
                )
            }
        }
    }

    /// The plain scalar starting at `q` on the line starting at `ls`, which it ends: a value in
    /// collection `parent` whose key or dash is at `parent_col`.
    #[inline(always)]
    fn plain_value(&mut self, ls: usize, q: usize, parent_col: usize, parent: NodeId) -> R<NodeId> {
        let (mut end, eol) = self.plain_end(q)?;
        while end > q && is_blank(self.b[end - 1]) {
            end -= 1;
        }
        let col = self.col(ls, q);
        let id = self.push(
            Kind::Scalar {
                value: ScalarValue::verbatim(q, end),
                style: Style::Plain,
                tagged: false,
            },
            q,
            end,
            col,
            Some(parent),
        )?;
        self.end_value_line(eol, parent_col)?;
        Ok(id)
    }

    /// Moves past the line a value ended at `eol`; `parent_col` is the column of its key or
    /// dash.
    #[inline(always)]
    fn end_value_line(&mut self, eol: usize, parent_col: usize) -> R<()> {
        self.advance((eol + 1).min(self.b.len()))?;
        // A more indented line next would continue a multi-line scalar.
        match self.next {
            Some((_, indent)) if indent > parent_col => Err(()),
            _ => Ok(()),
        }
    }

    /// Where the plain scalar starting at `q` ends, trailing blanks included (at a comment or
    /// the end of its line), and the end of its line: one pass over the line. A `: ` inside it
    /// is the general parser's.
    #[inline(always)]
    fn plain_end(&self, q: usize) -> R<(usize, usize)> {
        let b = self.b;
        let mut i = q;
        while let Some(&c) = b.get(i) {
            if VALUE_STOPS[usize::from(c)] {
                match c {
                    b'\n' => return Ok((i, i)),
                    b'#' if i > q && is_blank(b[i - 1]) => return Ok((i, self.eol(i))),
                    b':' if is_space_or_end(b, i + 1) => return Err(()),
                    _ => {}
                }
            }
            i += 1;
        }
        Ok((i, i))
    }

    /// A literal block scalar (`|`, `|-`, `|+`) whose header is at `at`, ending its line at
    /// `eol`; `parent_col` is the column of its key or dash. Leaves the cursor on the line that
    /// ends it. Folded scalars, indentation indicators, tabs and blank lines holding more
    /// spaces than the content's indentation are the general parser's.
    fn literal(&mut self, at: usize, eol: usize, parent_col: usize, parent: NodeId) -> R<NodeId> {
        let b = self.b;
        let mut i = at + 1;
        let chomping = b.get(i).copied().filter(|c| matches!(c, b'-' | b'+'));
        i += usize::from(chomping.is_some());
        let blanks = i;
        while i < eol && b[i] == b' ' {
            i += 1;
        }
        if i < eol && !(b[i] == b'#' && i > blanks) {
            return Err(());
        }
        if eol >= b.len() {
            return Err(());
        }
        // The span runs from the first content character to the end of the last line with
        // content.
        let mut indent = None;
        let mut content_end = 0;
        let mut start = 0;
        let mut value = String::new();
        let mut empty_lines = 0;
        let mut line = eol + 1;
        loop {
            if line >= b.len() {
                break;
            }
            let line_end = self.eol(line);
            let text = &b[line..line_end];
            let spaces = text.iter().take_while(|&&c| c == b' ').count();
            if spaces == text.len() {
                match indent {
                    None if spaces > 0 => return Err(()),
                    Some(n) if spaces > n => return Err(()),
                    _ => empty_lines += 1,
                }
                line = line_end + 1;
                continue;
            }
            if text[spaces] == b'\t' {
                return Err(());
            }
            let n = match indent {
                Some(n) => n,
                None if spaces > parent_col => {
                    indent = Some(spaces);
                    start = line + spaces;
                    spaces
                }
                None => return Err(()),
            };
            if spaces < n {
                break;
            }
            if self.stop.requested() {
                return Err(());
            }
            value.extend(std::iter::repeat_n('\n', empty_lines));
            empty_lines = 0;
            value.push_str(&self.src[line + n..line_end]);
            value.push('\n');
            content_end = line_end;
            line = line_end + 1;
        }
        let Some(n) = indent else {
            return Err(());
        };
        match chomping {
            Some(b'-') => {
                value.pop();
            }
            Some(_) => value.extend(std::iter::repeat_n('\n', empty_lines)),
            None => {}
        }
        let value = self.doc.keep_value(&value).ok_or(())?;
        let id = self.push(
            Kind::Scalar {
                value,
                style: Style::Block,
                tagged: false,
            },
            start,
            content_end,
            n,
            Some(parent),
        )?;
        self.advance(line.min(b.len()))?;
        Ok(id)
    }

    fn expect_comment_or_eol(&self, from: usize, eol: usize) -> R<()> {
        let b = self.b;
        let mut i = from;
        while i < eol && is_blank(b[i]) {
            i += 1;
        }
        if i == eol || (b[i] == b'#' && i > from) {
            Ok(())
        } else {
            Err(())
        }
    }

    /// A scalar from `at` to `end` (exclusive; for quoted scalars, past the closing quote) in
    /// collection `parent`.
    #[inline(always)]
    fn scalar_at(&mut self, ls: usize, at: usize, end: usize, parent: NodeId) -> R<NodeId> {
        let (value, style) = match self.b[at] {
            b'\'' | b'"' => self.quoted_value(at, end)?,
            _ => (ScalarValue::verbatim(at, end), Style::Plain),
        };
        let col = self.col(ls, at);
        self.push(
            Kind::Scalar {
                value,
                style,
                tagged: false,
            },
            at,
            end,
            col,
            Some(parent),
        )
    }

    /// The value and style of the quoted scalar from `at` to `end`, kept out of
    /// [`P::scalar_at`]: most keys and values are plain.
    #[inline(never)]
    fn quoted_value(&mut self, at: usize, end: usize) -> R<(ScalarValue, Style)> {
        let inner = &self.src[at + 1..end - 1];
        if self.b[at] == b'\'' {
            let value = if inner.contains("''") {
                Cow::Owned(inner.replace("''", "'"))
            } else {
                Cow::Borrowed(inner)
            };
            Ok((self.scalar_value(at + 1, end - 1, value)?, Style::Single))
        } else {
            let value = unescape(inner).ok_or(())?;
            Ok((self.scalar_value(at + 1, end - 1, value)?, Style::Double))
        }
    }
}

/// A bit standing for a plain key's length and first and last bytes: keys whose bits differ
/// differ, so a mapping whose keys all have different bits holds no key twice without any
/// two being compared.
fn key_signature(key: &[u8]) -> u64 {
    let (first, last) = (key[0], key[key.len() - 1]);
    let mixed = (key.len() as u64 | u64::from(first) << 32 | u64::from(last) << 40)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // The top six bits of the product depend on all of its factor's bits.
    1 << (mixed >> 58)
}

/// Index just past the closing quote of the quoted scalar opening at `at`, on this line.
fn quoted_close(b: &[u8], at: usize, eol: usize, quote: u8) -> Option<usize> {
    let mut i = at + 1;
    while i < eol {
        match b[i] {
            b'\\' if quote == b'"' => i += 2,
            c if c == quote => {
                if quote == b'\'' && i + 1 < eol && b[i + 1] == b'\'' {
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

/// Characters that start something other than a plain scalar (or that we leave to saphyr).
pub(crate) fn is_indicator(c: u8) -> bool {
    matches!(
        c,
        b'-' | b'?'
            | b':'
            | b','
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'#'
            | b'&'
            | b'*'
            | b'!'
            | b'|'
            | b'>'
            | b'\''
            | b'"'
            | b'%'
            | b'@'
            | b'`'
    )
}

/// The common double-quoted escapes; anything else goes to the general parser.
fn unescape(s: &str) -> Option<Cow<'_, str>> {
    if !s.contains('\\') {
        return Some(Cow::Borrowed(s));
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next()? {
            '\\' => '\\',
            '"' => '"',
            '/' => '/',
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            '0' => '\0',
            ' ' => ' ',
            _ => return None,
        });
    }
    Some(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inputs the fast path must take, each checked against the general parser.
    const ACCEPTED: &[&str] = &[
        "a: |\n  x\n  y\nb: 1\n",
        "a: |\n  x\n---\nb: |-\n  y\n\n...\n",
        "a: |+\n  x\n\n---\n",
        "a: |-\n  x\n\n  y\n\n\nb: 1\n",
        "a: |\n  x",
        "- |\n  x\n   y\n- b\n",
        "a: |  # c\n  x\n",
        "a:\n  b: |+\n    x\n\n  c: 1\n",
        "a: |\n  x\n\n# c\nb: 1\n",
        "a:\n  b: |\n    x\n   # c\n  d: 1\n",
        "a: |+\n  x\n\n",
        "a: |\n  x \n \n  é\n",
        "a: |\n\n  x\n  # not a comment\nb: 1\n",
        "- |\n  x\n-\n",
        "- a: |\n    x\n      y\n  b: 1\n",
        "a: |-\n  x\n",
        "a: 1\n",
        "a: 1",
        "a:\n",
        "a:",
        "a: 1 # one\nm:\n  k: v   # keep\n\n  # trailing\nz: 'q'\n",
        "metadata:\n  name: x\nspec:\n",
        "a:\n  - x\n  - y\nb:\n- p: 1\n  q: 2\n",
        "a: \"1\" # c\nb: 'it''s' # d\n",
        "é: \"ü\"\nk: v\n",
        "k: é\nl:\n  é: ü # ö\n  m: n\n",
        "# head\n\napiVersion: v1\nkind: List\nitems:\n- a: b\n  c:\n  - d\n  -\n  - e: f\n    g: \"h\\\"i\\\\\"\n-\n- x\n",
        "a:\n  b:\n    c:\n      d: e\n  f: g\nh: i\n",
        "args:\n- --port=80\n- -v\n- \"-x\"\nurl: http://a:b/c\nimage: nginx:1.2\n",
        "a: b#c\nd: e  # f\ng: h{i}[j],k\n",
        "a: # comment\n  b: c\nd: # c\n- e\n",
        "a:\n- b\n- c\nd: e\n",
        "- a\n- b\n",
        "-\n  a: b\n- c: d\n",
        "a: \"\"\nb: ''\nc: ~\nd: null\n",
        "\"quoted key\": 1\n'single': 2\n",
        "x:\n  y: 1\n\n\n   # odd comment\nz: 2\n",
        "-\n- a\n-\n",
        "list:\n  -   a: b\n      c: d\n  - e\n",
        "a:\tb\n",
        "a:\t\tb # c\nd: \t'e'\t# f\n",
        "- k:\tv\n  l: x\ty\t\n",
        // Streams of documents, as units and `kubectl get -o yaml` write them.
        "a: 1\n---\n",
        "a: 1\n---\nb: 2\n",
        "---\na: 1\n",
        "--- # c\na: 1\n",
        "# x\n---\na: 1\n---\n# c\n\nb: 2\n...\n",
        "a: 1\n...\n---\nb: 2\n",
        "a: 1\n...\nb: 2\n",
        "a: 1\n---\n---\nb: 2\n",
        "---\n",
        "---\n---\n",
        "---\n# c\n---\n",
        "a: 1\n---   \n",
        "a: 1\n--- # c\n",
        "a: 1\n...\n",
        "a: 1\n...",
        "a: 1\n---\n# end\n",
        "a: 1\n---\n\n",
        "- a\n---\n- b\n",
        "a:\n  b: c\n---\nd:\n- e\n---\nf: g # h\n---\n",
        "",
        "# only a comment\n",
    ];

    #[test]
    fn accepts_common_block_yaml_exactly_as_saphyr() {
        for src in ACCEPTED {
            let fast = parse(src, &Stop::default())
                .unwrap_or_else(|| panic!("fast path gave up on {src:?}"));
            fast.assert_same_as_general();
        }
    }

    #[test]
    fn leaves_the_rest_to_saphyr() {
        for src in [
            "a: [1, 2]\n",
            "{a: b}\n",
            "a: >\n  x\n",
            "a: |2\n   x\n",
            "a: |\n  x\n   \n",
            "- |-\n  x\n",
            "a: |\n\tx\n",
            "a: |\n",
            "a: |x\n  y\n",
            "a: &x 1\nb: *x\n",
            "a: !t 1\n",
            "--- a: 1\n",
            "a: 1\n---x\n",
            "a: 1\n--- b\n",
            "---\n...\n",
            "...\na: 1\n",
            "a: 1\n...\n...\n",
            "a: 1\n---",
            "%YAML 1.2\n---\na: 1\n",
            "a: b\n---\n  c: d\n",
            "-  \n- a\n-   # y\n",
            "b:\n- c:   \n  d:  # x\n",
            "a: b\n  c\n",
            "a: \"b\n  c\"\n",
            "a:\tb: c\n",
            "-\ta\n",
            "\ta: b\n",
            "a:\n\t- b\n",
            "a: b: c\n",
            "a: 1\n b: 2\n",
            "? a\n: b\n",
            "- - a\n",
            "a\n",
            "a: \"\\u00e9\"\n",
            "a: 1\n  # c\n    b: 2\n",
            "a:\n  - b\n  c: d\n",
        ] {
            if let Some(doc) = parse(src, &Stop::default()) {
                doc.assert_same_as_general();
            }
            // Whatever the fast path does, Doc::parse agrees with saphyr's verdict.
            assert_eq!(
                Doc::parse(src).is_ok(),
                Doc::parse_general(src).is_ok(),
                "{src:?}"
            );
        }
    }
}
