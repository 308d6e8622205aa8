//! JSON as Go's encoding/json writes it, where that differs from serde_json's compact form:
//! `<`, `>` and `&` in strings as `\u003c`, `\u003e`, `\u0026` (Go's HTML escaping, on by
//! default in json.Marshal) and U+2028, U+2029 as `\u2028`, `\u2029`. ConfigHub's executor
//! writes its output and its responses so; a client comparing bytes sees the same.

use std::io;

use serde::Serialize;
use serde_json::ser::{Formatter, Serializer};

/// The compact form (the trait's defaults) with Go's escaping of string contents.
struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(['<', '>', '&', '\u{2028}', '\u{2029}']) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            write!(writer, "\\u{:04x}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

/// `value` as Go's json.Marshal writes it.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut serializer = Serializer::with_formatter(&mut out, GoFormatter);
    value.serialize(&mut serializer)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_characters_and_line_separators_are_escaped_as_go_does() {
        let text = "a<b>&c\u{2028}d\u{2029}é\"\n";
        assert_eq!(
            String::from_utf8(to_vec(&text).unwrap()).unwrap(),
            r#""a\u003cb\u003e\u0026c\u2028d\u2029é\"\n""#
        );
        let back: String = serde_json::from_slice(&to_vec(&text).unwrap()).unwrap();
        assert_eq!(back, text);
    }

    #[test]
    fn structure_is_compact() {
        let value = serde_json::json!({"A": [1, null, true], "B": {"C": "x"}});
        assert_eq!(
            String::from_utf8(to_vec(&value).unwrap()).unwrap(),
            r#"{"A":[1,null,true],"B":{"C":"x"}}"#
        );
    }
}
