//! What a parse refuses, and how a call that ended stops one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ParseError;

/// Nesting deeper than this is refused rather than risking the stack on hostile input.
pub const MAX_DEPTH: usize = 512;

/// Texts longer than this are refused: the tree keeps byte offsets in 32 bits. (A function's
/// input is far smaller: the runner bounds its messages well below this.)
pub const MAX_TEXT_BYTES: usize = u32::MAX as usize;

/// Refuses a text longer than [`MAX_TEXT_BYTES`].
pub(crate) fn check_text_size(len: usize) -> Result<(), ParseError> {
    if len > MAX_TEXT_BYTES {
        return Err(ParseError::TooLong { bytes: len });
    }
    Ok(())
}

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
    /// Asks the work to give up.
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the work must give up.
    pub fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// [`Stopped`] once the work must give up.
    pub fn check(&self) -> Result<(), Stopped> {
        if self.requested() {
            Err(Stopped)
        } else {
            Ok(())
        }
    }
}

/// Work given up because its [`Stop`] was requested: the call ended (cancelled, or past its
/// deadline), and whoever answers the call says why it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stopped: the call ended")]
pub struct Stopped;
