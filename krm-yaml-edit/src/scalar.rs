//! Plain scalars: how YAML reads them, and how to write a value so it reads back the same.

/// What a plain scalar's text resolves to (YAML 1.2 core schema, as Go's yaml.v3 decodes it,
/// roughly).
enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Float(serde_json::Number),
    Str,
}

fn resolve(value: &str) -> Resolved {
    match value {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        _ => {}
    }
    if let Ok(i) = value.parse::<i64>() {
        return Resolved::Int(i);
    }
    if looks_float(value)
        && let Ok(f) = value.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Resolved::Float(n);
    }
    Resolved::Str
}

/// YAML 1.2 core-schema resolution of a plain scalar (as Go's yaml.v3 decodes it, roughly).
pub fn resolve_plain(value: &str) -> serde_json::Value {
    use serde_json::Value;
    match resolve(value) {
        Resolved::Null => Value::Null,
        Resolved::Bool(b) => Value::Bool(b),
        Resolved::Int(i) => Value::from(i),
        Resolved::Float(n) => Value::Number(n),
        Resolved::Str => Value::String(value.to_owned()),
    }
}

/// Whether a plain scalar with this text reads as a string (without copying it into a value:
/// asked of every string written).
fn resolves_to_string(value: &str) -> bool {
    matches!(resolve(value), Resolved::Str)
}

fn looks_float(value: &str) -> bool {
    let v = value.strip_prefix(['-', '+']).unwrap_or(value);
    // The first byte first: it settles most strings without a pass over them.
    v.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'.')
        && v.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && v.bytes().any(|b| b.is_ascii_digit())
}

/// Would a plain scalar with this text read back as something other than the same string?
/// Mirrors what Go's yaml.v3 quotes when it writes a string (it also quotes YAML 1.1 booleans,
/// octals and timestamps for old readers).
pub fn needs_quotes(value: &str) -> bool {
    if plainly_safe(value) {
        return false;
    }
    if value.is_empty() || value.trim() != value {
        return true;
    }
    if !resolves_to_string(value) {
        return true;
    }
    if is_short_word(
        value,
        &[
            "y", "n", "yes", "no", "on", "off", ".inf", "-.inf", "+.inf", ".nan",
        ],
    ) {
        return true;
    }
    let b = value.as_bytes();
    // Hex/octal/binary numbers, and dates/timestamps.
    if b[0].is_ascii_digit() || b[0] == b'-' || b[0] == b'+' || b[0] == b'.' {
        let body = value.trim_start_matches(['-', '+']);
        if body.starts_with("0x") || body.starts_with("0o") || body.starts_with("0b") {
            return true;
        }
        if body
            .bytes()
            .all(|c| c.is_ascii_digit() || c == b'_' || c == b'.' || c == b':')
        {
            return true;
        }
        if value.len() >= 10
            && b[..4].iter().all(u8::is_ascii_digit)
            && b[4] == b'-'
            && b[7] == b'-'
            && b[5..7].iter().all(u8::is_ascii_digit)
        {
            return true;
        }
    }
    if crate::fast::is_indicator(b[0]) && !(b[0] == b'-' && b.len() > 1 && b[1] != b' ') {
        return true;
    }
    value.ends_with(':') || breaks_plain_text(value)
}

/// Whether the text holds `: ` or ` #` (which end a plain scalar or start a comment), a
/// control character or a byte order mark. Every string written (messages of results
/// included) is asked: the `:` and `#` are found a vector at a time, and the rest is asked of
/// the characters only when some byte is not printable ASCII.
fn breaks_plain_text(value: &str) -> bool {
    let b = value.as_bytes();
    let separator = crate::bytes::positions2(b':', b'#', b).any(|at| match b[at] {
        b':' => b.get(at + 1) == Some(&b' '),
        _ => at > 0 && b[at - 1] == b' ',
    });
    // Folded without an early exit, so that it is compiled to vector instructions.
    let printable_ascii = b
        .iter()
        .fold(true, |all, &c| all & (b' '..=b'~').contains(&c));
    separator || (!printable_ascii && value.chars().any(|c| c.is_control() || c == '\u{feff}'))
}

/// The bytes of a [`plainly_safe`] word, each told by one lookup: keys and values written
/// are mostly such words.
static WORD_BYTES: [bool; 256] = {
    let mut word = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        word[c] = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/');
        c += 1;
    }
    word
};

/// The common case answered without allocating: a word that starts with a letter and holds
/// only letters, digits and `-_./`, and is none of the YAML 1.1 booleans or nulls.
fn plainly_safe(value: &str) -> bool {
    let b = value.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(|&c| WORD_BYTES[usize::from(c)])
        && !is_short_word(
            value,
            &["y", "n", "yes", "no", "on", "off", "true", "false", "null"],
        )
}

/// Whether `value` is one of `words` (none longer than five bytes) in any ASCII case: most
/// strings written are longer, and are told apart by their length alone.
fn is_short_word(value: &str, words: &[&str]) -> bool {
    debug_assert!(words.iter().all(|word| word.len() <= 5));
    value.len() <= 5 && words.iter().any(|word| word.eq_ignore_ascii_case(value))
}

/// `value` as a double-quoted YAML scalar.
pub fn double_quoted(value: &str) -> String {
    // JSON string syntax is valid YAML double-quoted syntax.
    serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned())
}

/// Appends a string rendered as a scalar that reads back as the same string, quoted the way Go's
/// yaml.v3 does: double quotes for strings that would resolve to another type, single quotes
/// for ones that only need protecting from YAML syntax. In flow collections (JSON input)
/// strings are always double-quoted, so JSON stays JSON.
pub fn push_rendered(out: &mut String, value: &str, flow: bool) {
    if flow {
        out.push_str(&double_quoted(value));
        return;
    }
    if !needs_quotes(value) {
        out.push_str(value);
        return;
    }
    let resolves_to_other = value.is_empty()
        || !resolves_to_string(value)
        || value.trim() != value
        || value.chars().any(|c| c.is_control());
    if resolves_to_other || value.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
        out.push_str(&double_quoted(value));
    } else {
        out.push('\'');
        out.push_str(&value.replace('\'', "''"));
        out.push('\'');
    }
}

/// A scalar whose tag was cleared, as kyaml writes it: plain (so `3` reads back as a number)
/// unless plain text could not hold it.
pub fn untyped_scalar(value: &str) -> String {
    if value.is_empty() || plain_unsafe(value) {
        double_quoted(value)
    } else {
        value.to_owned()
    }
}

pub(crate) fn plain_unsafe(value: &str) -> bool {
    // Text that would not even parse back as one plain scalar.
    value.contains('\n') || (needs_quotes(value) && resolves_to_string(value))
}
