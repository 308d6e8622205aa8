//! Why a text did not parse: a kind, and where in the text when there is a place to name.

use std::fmt;

use crate::tree::MAX_NODES;
use crate::{ALIAS_EXPANSION_ALLOWANCE, MAX_ALIASES, MAX_DEPTH, MAX_TEXT_BYTES, Stopped};

/// A place in a text: 1-based line and column (columns counted in characters), as an editor
/// shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl Position {
    /// The position of byte `pos` of `src`.
    pub fn of(src: &str, pos: usize) -> Self {
        let (line, column) = crate::line_col(src, pos);
        Self { line, column }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {} column {}", self.line, self.column)
    }
}

/// Why [`Doc::parse`](crate::Doc::parse) refused a text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The [`Stop`](crate::Stop) was requested while the text was read.
    #[error(transparent)]
    Stopped(#[from] Stopped),
    /// The text is longer than [`MAX_TEXT_BYTES`].
    #[error("the text is {bytes} bytes, more than the {MAX_TEXT_BYTES} a parse takes")]
    TooLong {
        /// The text's length.
        bytes: usize,
    },
    /// The tree would hold more nodes than it can number.
    #[error("more than {MAX_NODES} nodes")]
    TooManyNodes,
    /// The values the tree keeps would hold more than [`MAX_TEXT_BYTES`].
    #[error("the values of its scalars hold more than {MAX_TEXT_BYTES} bytes")]
    TooManyValues,
    /// Collections nest deeper than [`MAX_DEPTH`].
    #[error("nesting deeper than {MAX_DEPTH} levels at {at}")]
    TooDeep {
        /// Where the collection one level too deep opens.
        at: Position,
    },
    /// A mapping holds one key twice (refused, as Go's yaml.v3 and so kpt do).
    #[error("duplicate mapping key {key:?} at {at} (first at {first})")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where it is repeated.
        at: Position,
        /// Where it first is.
        first: Position,
    },
    /// An alias names no anchor defined before it.
    #[error("unknown alias at {at}")]
    UnknownAlias {
        /// Where the alias is.
        at: Position,
    },
    /// More than [`MAX_ALIASES`] aliases.
    #[error("more than {MAX_ALIASES} aliases (the last at {at})")]
    TooManyAliases {
        /// Where the alias one over the limit is.
        at: Position,
    },
    /// An alias inside the node it refers to.
    #[error("the alias at {at} refers to a node that contains it")]
    RecursiveAlias {
        /// Where the alias is.
        at: Position,
    },
    /// The aliases would expand the document beyond `limit`.
    #[error(
        "its aliases expand it beyond {limit} (twice its size plus {ALIAS_EXPANSION_ALLOWANCE}, counting one per node plus the bytes of each scalar): refused as an alias bomb"
    )]
    AliasBomb {
        /// Twice the document's size plus [`ALIAS_EXPANSION_ALLOWANCE`].
        limit: u64,
    },
    /// A collection closes that never opened.
    #[error("unbalanced collection end")]
    Unbalanced,
    /// The text is not YAML (saphyr's message, which names its place).
    #[error(transparent)]
    Syntax(#[from] saphyr_parser::ScanError),
}

impl ParseError {
    /// Where in the text the problem is, when it has a place.
    pub fn position(&self) -> Option<Position> {
        match self {
            Self::TooDeep { at }
            | Self::DuplicateKey { at, .. }
            | Self::UnknownAlias { at }
            | Self::TooManyAliases { at }
            | Self::RecursiveAlias { at } => Some(*at),
            Self::Syntax(error) => Some(Position {
                line: error.marker().line(),
                column: error.marker().col() + 1,
            }),
            Self::Stopped(_)
            | Self::TooLong { .. }
            | Self::TooManyNodes
            | Self::TooManyValues
            | Self::AliasBomb { .. }
            | Self::Unbalanced => None,
        }
    }
}
