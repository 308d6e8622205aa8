//! Echoing caller-supplied text (an image name, say) in messages and logs without letting the
//! caller decide their size or shape.

use std::borrow::Cow;
use std::fmt;

/// Characters of a caller's string kept when it is echoed; the rest is counted, not shown.
pub const QUOTED_CHARS: usize = 256;

/// `text` as it may be echoed back to a caller or written to a log: double-quoted and escaped
/// like Rust's `{:?}` (so no newline or control character gets through) and cut after
/// [`QUOTED_CHARS`] characters, naming how many bytes were left out. An ordinary image name
/// shows exactly as `format!("{image:?}")` would.
pub fn quoted(text: &str) -> Quoted<'_> {
    Quoted(text)
}

/// See [`quoted`].
#[derive(Clone, Copy)]
pub struct Quoted<'a>(&'a str);

impl<'a> Quoted<'a> {
    /// The text cut as for display but neither quoted nor escaped: for a structured log field,
    /// whose formatter escapes it.
    pub fn bounded(&self) -> Cow<'a, str> {
        let (kept, left_out) = self.split();
        match left_out {
            0 => Cow::Borrowed(kept),
            _ => Cow::Owned(format!("{kept}... ({left_out} more bytes)")),
        }
    }

    /// The part shown, and how many bytes are left out.
    fn split(&self) -> (&'a str, usize) {
        let cut = self
            .0
            .char_indices()
            .nth(QUOTED_CHARS)
            .map_or(self.0.len(), |(at, _)| at);
        (&self.0[..cut], self.0.len() - cut)
    }
}

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kept, left_out) = self.split();
        write!(f, "{kept:?}")?;
        if left_out > 0 {
            write!(f, "... ({left_out} more bytes)")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_show_as_debug_does() {
        let image = "ghcr.io/kptdev/krm-functions-catalog/set-labels:v0.2.0";
        assert_eq!(quoted(image).to_string(), format!("{image:?}"));
    }

    #[test]
    fn long_text_is_cut_and_control_characters_escaped() {
        let long = format!("a\nb{}", "é".repeat(1 << 20));
        let shown = quoted(&long).to_string();
        assert!(shown.starts_with("\"a\\nb"), "{shown}");
        assert!(!shown.contains('\n'));
        assert!(shown.len() < 4 * QUOTED_CHARS, "{} bytes", shown.len());
        let left_out = long.len() - long.char_indices().nth(QUOTED_CHARS).unwrap().0;
        assert!(
            shown.ends_with(&format!("... ({left_out} more bytes)")),
            "{shown}"
        );
        let logged = quoted(&long).bounded();
        assert!(logged.starts_with("a\nb") && logged.len() < 4 * QUOTED_CHARS);
        assert_eq!(quoted("set-labels").bounded(), "set-labels");
    }
}
