//! Lossless YAML editing: parse once into a tree that remembers byte spans, then change the
//! original text only at those spans. Whatever no function touched stays byte-identical, with
//! its comments, quoting and blank lines, by construction.
//!
//! [`Doc::parse`] takes the line-oriented [`fast`] path for the plain block YAML tools write and
//! the general parser for everything else; [`Editor`] queues changes at the tree's spans and
//! writes the result once. Shared by the `builtin` plugin and the ConfigHub function executor.

#![deny(missing_docs)]

mod bytes;
mod edit;
mod encode;
mod error;
// Public for property tests that hold the fast path to the general parser's trees.
pub mod fast;
mod limits;
mod new;
mod parse;
mod scalar;
mod top_level;
mod tree;

pub use edit::{Editor, block_span, scalar_edit};
pub use error::{ParseError, Position};
pub use limits::{
    ALIAS_EXPANSION_ALLOWANCE, MAX_ALIASES, MAX_DEPTH, MAX_TEXT_BYTES, Stop, Stopped,
};
pub use new::{New, block_entries, block_items, block_map_item};
pub use scalar::{double_quoted, needs_quotes, push_rendered, resolve_plain, untyped_scalar};
pub use top_level::TopLevel;
pub use tree::{Children, Doc, Kind, Node, NodeId, ScalarValue, Style, line_col};

#[cfg(test)]
mod tests;
