//! The top-level keys of a document, found line by line without parsing their values: enough to
//! read a ResourceList's `kind` or to put its `functionConfig` in place, for a fraction of a
//! parse of a large list (whose items the function that receives it parses anyway).

use std::ops::Range;

/// More top-level keys than a ResourceList or a KRM object has: such a document is left to the
/// parser, which bounds what it reads (and the keys here are compared pairwise).
const MAX_KEYS: usize = 64;

/// A document whose root is a block mapping at column 0, read only as far as its keys.
///
/// [`TopLevel::scan`] answers only when that reading is certainly the parser's: every line at
/// column 0 is a comment, a compact sequence item (`- `), or a key of plain characters followed
/// by `:` and a value that ends on its line or continues on indented lines. Anything else (a
/// flow or quoted root, document markers, directives, tabs, quoted or complex keys, anchors,
/// aliases and tags, a flow collection or quoted scalar opened on a key's line, a repeated key)
/// gives `None`, and callers parse the document instead. Whether the values are valid YAML is
/// left to that parse too.
pub struct TopLevel<'a> {
    src: &'a str,
    entries: Vec<TopEntry<'a>>,
}

struct TopEntry<'a> {
    key: &'a str,
    /// What follows `key:` on its line, comment included, without the line break.
    inline: Range<usize>,
    /// From just after the colon to the end of the value's last line (before its line break):
    /// trailing blank lines and comments at column 0 are not the value's.
    value: Range<usize>,
}

impl<'a> TopLevel<'a> {
    /// The top-level keys of `src`, or `None` when `src` is not plainly a block mapping at
    /// column 0 (see [`TopLevel`]).
    pub fn scan(src: &'a str) -> Option<Self> {
        let bytes = src.as_bytes();
        if crate::bytes::find(b'\r', bytes).is_some() {
            return None;
        }
        let mut entries: Vec<TopEntry<'a>> = Vec::new();
        let mut start = 0;
        let line_ends = crate::bytes::positions(b'\n', bytes).chain(std::iter::once(bytes.len()));
        for end in line_ends {
            let line = &bytes[start..end];
            match line.first() {
                None | Some(b'#') => {}
                Some(b'\t') => return None,
                Some(b' ') => {
                    // A line of spaces alone is blank: the value it follows may go on.
                    if line.iter().any(|&b| b != b' ') {
                        entries.last_mut()?.value.end = end;
                    }
                }
                Some(b'-') if line == b"-" || line.starts_with(b"- ") => {
                    let entry = entries.last_mut()?;
                    if !is_bare(&src[entry.inline.clone()]) {
                        return None;
                    }
                    entry.value.end = end;
                }
                Some(_) => {
                    let entry = key_line(src, start, end)?;
                    let repeated = entries.iter().any(|known| known.key == entry.key);
                    if repeated || entries.len() == MAX_KEYS {
                        return None;
                    }
                    entries.push(entry);
                }
            }
            start = end + 1;
        }
        if entries.is_empty() {
            return None;
        }
        Some(Self { src, entries })
    }

    /// The keys, in document order.
    pub fn keys(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.entries.iter().map(|entry| entry.key)
    }

    /// Whether the document has `key` at the top level.
    pub fn has(&self, key: &str) -> bool {
        self.entry(key).is_some()
    }

    /// The value of `key` when it is a plain scalar on the key's line (its comment left out);
    /// `None` for any other value, which only a parse can read.
    pub fn plain_scalar(&self, key: &str) -> Option<&'a str> {
        let entry = self.entry(key)?;
        if entry.value.end != entry.inline.end {
            return None;
        }
        let value = without_comment(&self.src[entry.inline.clone()]);
        let plain = !value.is_empty()
            && !value.starts_with(|c: char| "|>\"'[]{},&*!%@`#?:-".contains(c))
            && !value.contains(": ");
        plain.then_some(value)
    }

    /// The edit that gives `key` the value `mapping` (block YAML, written as given, indented
    /// under the key): the byte range of the document to replace, and the text to put there.
    /// It replaces `key`'s value when the document has `key`, and adds `key: mapping` at the end
    /// otherwise; every other byte stays. `None` when `mapping` is not plainly a block mapping.
    pub fn mapping_edit(&self, key: &str, mapping: &str) -> Option<(Range<usize>, String)> {
        TopLevel::scan(mapping)?;
        let mut text = String::with_capacity(mapping.len() + mapping.len() / 8 + key.len() + 3);
        let range = match self.entry(key) {
            Some(entry) => entry.value.clone(),
            None => {
                if !self.src.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(key);
                text.push(':');
                self.src.len()..self.src.len()
            }
        };
        for line in mapping.lines() {
            text.push('\n');
            if !line.is_empty() {
                text.push_str("  ");
                text.push_str(line);
            }
        }
        if range.start == self.src.len() {
            text.push('\n');
        }
        Some((range, text))
    }

    fn entry(&self, key: &str) -> Option<&TopEntry<'a>> {
        self.entries.iter().find(|entry| entry.key == key)
    }
}

/// The entry a line at column 0 starts, when its key is plain and its value ends on the line
/// or continues on indented lines.
fn key_line(src: &str, start: usize, end: usize) -> Option<TopEntry<'_>> {
    let line = &src[start..end];
    let colon = line.find(':')?;
    let key = &line[..colon];
    let plain_key = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'));
    if !plain_key {
        return None;
    }
    let inline_start = start + colon + 1;
    let inline = &src[inline_start..end];
    if !(inline.is_empty() || inline.starts_with(' ')) {
        return None;
    }
    let value = inline.trim_start_matches(' ');
    let empty_flow = ["[]", "{}"].contains(&without_comment(value));
    let opens_what_may_not_close =
        value.starts_with(|c: char| "[{\"'&*!%@`?\t".contains(c)) && !empty_flow;
    if opens_what_may_not_close {
        return None;
    }
    Some(TopEntry {
        key,
        inline: inline_start..end,
        value: inline_start..end,
    })
}

/// Nothing but a comment, if that, after a key's colon.
fn is_bare(inline: &str) -> bool {
    without_comment(inline).is_empty()
}

/// `value` without its comment (` #` to the end) and surrounding spaces.
fn without_comment(value: &str) -> &str {
    let value = value.trim_start_matches(' ');
    let code = if value.starts_with('#') {
        ""
    } else {
        value.find(" #").map_or(value, |comment| &value[..comment])
    };
    code.trim_end_matches(' ')
}
