//! New content written into a document, rendered in flow or block style.

use crate::{double_quoted, push_rendered};

/// New content to write into a document.
#[derive(Debug, Clone, PartialEq)]
pub enum New {
    /// A string; quoted when needed to stay a string.
    Str(String),
    /// A scalar written as is (numbers, booleans; must be valid plain YAML).
    Plain(String),
    /// A mapping of these entries, in order.
    Map(Vec<(String, New)>),
    /// A sequence of these items.
    Seq(Vec<New>),
}

impl New {
    /// The string `value` ([`New::Str`]).
    pub fn str(value: impl Into<String>) -> Self {
        New::Str(value.into())
    }

    /// About how many bytes the value takes once written.
    pub fn approx_len(&self) -> usize {
        match self {
            New::Str(s) | New::Plain(s) => s.len() + 2,
            New::Map(entries) => approx_entries_len(entries),
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

/// About how many bytes a mapping's entries take once written (see [`New::approx_len`]).
pub(crate) fn approx_entries_len(entries: &[(String, New)]) -> usize {
    entries
        .iter()
        .map(|(k, v)| k.len() + 4 + v.approx_len())
        .sum()
}

/// Block-mapping lines (each ending in a newline) at `indent`.
pub fn block_entries<K: AsRef<str>>(entries: &[(K, New)], indent: usize, out: &mut String) {
    push_entries(entries, indent, indent, out);
}

/// [`block_entries`] whose first line starts `first_indent` spaces in (where it continues a
/// line) rather than `indent`.
fn push_entries<K: AsRef<str>>(
    entries: &[(K, New)],
    indent: usize,
    first_indent: usize,
    out: &mut String,
) {
    for (i, (key, value)) in entries.iter().enumerate() {
        push_indent(out, if i == 0 { first_indent } else { indent });
        push_rendered(out, key.as_ref(), false);
        out.push(':');
        value.block_value(indent, out);
    }
}

/// Block-sequence lines at `indent` (the dash's column).
pub fn block_items(items: &[New], indent: usize, out: &mut String) {
    for item in items {
        match item {
            New::Map(entries) if !entries.is_empty() => block_map_item(entries, indent, out),
            New::Seq(items) if !items.is_empty() => {
                push_indent(out, indent);
                out.push_str("- ");
                let mark = out.len();
                block_items(items, indent + 2, out);
                out.drain(mark..mark + indent + 2);
            }
            other => {
                push_indent(out, indent);
                out.push('-');
                other.block_value(indent, out);
            }
        }
    }
}

/// The lines of a block-sequence item at `indent` (the dash's column) holding a mapping of
/// `entries` (at least one): its first entry continues the dash's line. Keys may be borrowed,
/// so that an item written once need not own them.
pub fn block_map_item<K: AsRef<str>>(entries: &[(K, New)], indent: usize, out: &mut String) {
    push_indent(out, indent);
    out.push_str("- ");
    push_entries(entries, indent + 2, 0, out);
}

pub(crate) fn push_indent(out: &mut String, n: usize) {
    // Whole runs of spaces rather than one character at a time: every line written starts so.
    const SPACES: &str = "                                ";
    let mut left = n;
    while left > 0 {
        let run = left.min(SPACES.len());
        out.push_str(&SPACES[..run]);
        left -= run;
    }
}
