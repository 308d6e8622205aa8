//! `encoding/csv.star` (qri-io/starlib v0.5.0): `csv.read_all` and `csv.write_all`, with the
//! meaning of Go's `encoding/csv` that starlib wraps. The csv crate reads and writes the
//! records; Go's stricter reading (a quote inside an unquoted field, or text after a closing
//! quote, is an error unless `lazy_quotes`) and its `trim_leading_space` (which lets a quote
//! after the spaces open a quoted field) are applied by a pass over the text first.
//! Both functions measure what they would allocate and refuse it past the heap budget.

// `read_all` takes the seven parameters starlib's has (the generated function adds the heap).
#![allow(clippy::too_many_arguments)]

use std::borrow::Cow;
use std::fmt::Write as _;

use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::dict::DictRef;
use starlark::values::float::StarlarkFloat;
use starlark::values::list::{AllocList, ListRef};
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, Value, ValueLike};

use super::{heap_left, over_budget};

/// Heap bytes of a Starlark string besides its text (header, length and hash, padding).
const STRING_OVERHEAD: u64 = 24;
/// Heap bytes of a Starlark list besides its items (the list, its array's header).
const LIST_OVERHEAD: u64 = 64;

pub fn add_csv(builder: &mut GlobalsBuilder) {
    builder.namespace("csv", csv_module);
}

fn error(function: &str, message: impl std::fmt::Display) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("csv.{function}: {message}"))
}

/// A one-byte separator, as starlib requires (`""` means the default).
fn single_byte(
    function: &str,
    parameter: &str,
    value: &str,
    default: Option<u8>,
) -> starlark::Result<Option<u8>> {
    match value.as_bytes() {
        [] => Ok(default),
        &[byte] => Ok(Some(byte)),
        _ => Err(error(
            function,
            format!("expected {parameter} param to be a single-character string"),
        )),
    }
}

/// How Go's reader takes the text, beyond what the csv crate does.
struct Reading {
    comma: u8,
    comment: Option<u8>,
    lazy_quotes: bool,
    trim_leading_space: bool,
    /// Records whose errors Go ignores (`skip`).
    skip: u64,
}

fn is_line_end(byte: u8) -> bool {
    byte == b'\n' || byte == b'\r'
}

/// Applies Go's quote rules and leading-space trimming: returns the text the csv crate reads
/// (comment lines blanked, so that a `#` uncovered by trimming is not taken for one and line
/// numbers stay), or Go's error, naming its line and column.
fn prepare<'a>(text: &'a str, how: &Reading) -> Result<Cow<'a, str>, String> {
    #[derive(Clone, Copy, PartialEq)]
    enum At {
        LineStart,
        FieldStart,
        Unquoted,
        Quoted,
        QuoteInQuoted,
        Comment,
    }
    let bytes = text.as_bytes();
    let rewrites = how.trim_leading_space || how.comment.is_some();
    let mut out: Vec<u8> = Vec::with_capacity(if rewrites { bytes.len() } else { 0 });
    let (mut at, mut line, mut column) = (At::LineStart, 1u64, 0u64);
    let (mut record, mut record_line) = (0u64, 1u64);
    let fail = |record: u64, record_line: u64, line: u64, column: u64, what: &str| {
        if record <= how.skip {
            return Ok(());
        }
        let position = if record_line == line {
            format!("parse error on line {line}, column {column}")
        } else {
            format!("record on line {record_line}; parse error on line {line}, column {column}")
        };
        Err(format!("{position}: {what}"))
    };
    for (index, &byte) in bytes.iter().enumerate() {
        column += 1;
        let mut keep = true;
        if at == At::LineStart && !is_line_end(byte) {
            record += 1;
            record_line = line;
            at = if Some(byte) == how.comment {
                At::Comment
            } else {
                At::FieldStart
            };
        }
        match at {
            At::LineStart => {}
            At::Comment => {
                keep = is_line_end(byte);
                if keep {
                    at = At::LineStart;
                }
            }
            At::FieldStart if how.trim_leading_space && byte != how.comma && is_space(byte) => {
                keep = false;
            }
            At::FieldStart if byte == b'"' => at = At::Quoted,
            At::FieldStart | At::Unquoted => {
                if byte == how.comma {
                    at = At::FieldStart;
                } else if is_line_end(byte) {
                    at = At::LineStart;
                } else if byte == b'"' && !how.lazy_quotes {
                    fail(
                        record,
                        record_line,
                        line,
                        column,
                        "bare \" in non-quoted field",
                    )?;
                    at = At::Unquoted;
                } else {
                    at = At::Unquoted;
                }
            }
            At::Quoted => {
                if byte == b'"' {
                    at = At::QuoteInQuoted;
                }
            }
            At::QuoteInQuoted => {
                if byte == b'"' {
                    at = At::Quoted;
                } else if byte == how.comma {
                    at = At::FieldStart;
                } else if is_line_end(byte) {
                    at = At::LineStart;
                } else if how.lazy_quotes {
                    at = At::Quoted;
                } else {
                    fail(
                        record,
                        record_line,
                        line,
                        column,
                        "extraneous or missing \" in quoted-field",
                    )?;
                    at = At::Quoted;
                }
            }
        }
        // A lone `\r` ends a line too (starlib turns it into `\r\n` before Go reads).
        if byte == b'\n' || (byte == b'\r' && bytes.get(index + 1) != Some(&b'\n')) {
            line += 1;
            column = 0;
        }
        if rewrites && keep {
            out.push(byte);
        }
    }
    if at == At::Quoted && !how.lazy_quotes {
        fail(
            record,
            record_line,
            line,
            column + 1,
            "extraneous or missing \" in quoted-field",
        )?;
    }
    if !rewrites {
        return Ok(Cow::Borrowed(text));
    }
    // Only whole ASCII bytes were dropped from valid UTF-8, so what remains is valid too.
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|e| format!("cannot read the text: {e}"))
}

/// The spaces Go's `TrimLeadingSpace` drops before a field (its ASCII ones; line ends end the
/// record instead).
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | 0x0b | 0x0c)
}

/// Go's `%v` of what starlib's `util.Unmarshal` makes of a value.
fn go_text(function: &str, value: Value, out: &mut String, limit: u64) -> starlark::Result<()> {
    if out.len() as u64 > limit {
        return Err(over_budget(&format!("`csv.{function}`"), None, limit));
    }
    if value.is_none() {
        out.push_str("<nil>");
    } else if let Some(text) = value.unpack_str() {
        out.push_str(text);
    } else if let Some(flag) = value.unpack_bool() {
        out.push_str(if flag { "true" } else { "false" });
    } else if value.get_type() == "int" {
        out.push_str(&value.to_str());
    } else if let Some(number) = value.downcast_ref::<StarlarkFloat>() {
        out.push_str(&go_float(number.0));
    } else if let Some(items) = rows_of(value) {
        out.push('[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            go_text(function, item, out, limit)?;
        }
        out.push(']');
    } else if let Some(dict) = DictRef::from_value(value) {
        // Go prints a map's entries sorted by key.
        let mut entries: Vec<(String, Value)> = Vec::with_capacity(dict.len());
        for (key, item) in dict.iter() {
            let mut text = String::new();
            go_text(function, key, &mut text, limit)?;
            entries.push((text, item));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        out.push_str("map[");
        for (i, (key, item)) in entries.into_iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&key);
            out.push(':');
            go_text(function, item, out, limit)?;
        }
        out.push(']');
    } else if value.get_type() == "set" {
        return Err(error(function, "sets aren't yet supported"));
    } else {
        return Err(error(
            function,
            format!("unrecognized starlark type: {}", value.get_type()),
        ));
    }
    Ok(())
}

/// Go's `%v` of a float64: the shortest text that reads back, with an exponent (at least two
/// digits) below 1e-4 and from 1e21.
fn go_float(number: f64) -> String {
    if !number.is_finite() {
        return match number {
            n if n.is_nan() => "NaN".into(),
            n if n > 0.0 => "+Inf".into(),
            _ => "-Inf".into(),
        };
    }
    let magnitude = number.abs();
    if magnitude != 0.0 && !(1e-4..1e21).contains(&magnitude) {
        let text = format!("{number:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(digits) => ('-', digits),
            None => ('+', exponent),
        };
        let mut out = String::with_capacity(text.len() + 2);
        let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
        return out;
    }
    format!("{number}")
}

#[starlark_module]
fn csv_module(builder: &mut GlobalsBuilder) {
    /// All records of `source` as lists of strings. `skip` records are read first and dropped
    /// (their errors ignored, as starlib does); `fields_per_record` 0 takes the first record's
    /// count, a negative one allows any.
    fn read_all<'v>(
        #[starlark(require = pos)] source: Value<'v>,
        #[starlark(default = "")] comma: &str,
        #[starlark(default = "")] comment: &str,
        #[starlark(default = false)] lazy_quotes: bool,
        #[starlark(default = false)] trim_leading_space: bool,
        #[starlark(default = 0)] fields_per_record: i64,
        #[starlark(default = 0)] skip: i64,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let function = "read_all";
        let Some(text) = source.unpack_str() else {
            return Err(error(
                function,
                format!("source must be a string, not {}", source.get_type()),
            ));
        };
        let comma = single_byte(function, "comma", comma, Some(b','))?.unwrap_or(b',');
        let comment = single_byte(function, "comment", comment, None)?;
        if matches!(comma, b'"' | b'\r' | b'\n') || Some(comma) == comment {
            return Err(error(function, "invalid field or comment delimiter"));
        }
        let skip = u64::try_from(skip).unwrap_or(0);
        let how = Reading {
            comma,
            comment,
            lazy_quotes,
            trim_leading_space,
            skip,
        };
        let prepared = prepare(text, &how).map_err(|e| error(function, e))?;
        let mut reader = csv::ReaderBuilder::new()
            .delimiter(comma)
            .has_headers(false)
            .flexible(true)
            .from_reader(prepared.as_bytes());
        let left = heap_left(heap);
        let mut expected = usize::try_from(fields_per_record).ok().filter(|&n| n > 0);
        let mut bytes = LIST_OVERHEAD;
        let mut records: Vec<csv::StringRecord> = Vec::new();
        for (index, record) in reader.records().enumerate() {
            let record = record.map_err(|e| error(function, e))?;
            let fields = record.len();
            let wanted = *expected.get_or_insert(fields);
            if (index as u64) < skip {
                continue;
            }
            if fields_per_record >= 0 && fields != wanted {
                let line = record.position().map_or(0, |p| p.line());
                return Err(error(
                    function,
                    format!("record on line {line}: wrong number of fields"),
                ));
            }
            bytes = bytes.saturating_add(LIST_OVERHEAD + 8).saturating_add(
                record
                    .iter()
                    .map(|f| STRING_OVERHEAD + 8 + f.len() as u64)
                    .sum(),
            );
            if bytes > left {
                return Err(over_budget("`csv.read_all`", None, left));
            }
            records.push(record);
        }
        Ok(heap.alloc(AllocList(records.iter().map(|record| {
            heap.alloc(AllocList(record.iter().map(|field| heap.alloc(field))))
        }))))
    }

    /// `source`, a list of lists, as CSV text; each value written as Go's `%v` writes it.
    fn write_all<'v>(
        #[starlark(require = pos)] source: Value<'v>,
        #[starlark(default = "")] comma: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<String> {
        let function = "write_all";
        let comma = single_byte(function, "comma", comma, Some(b','))?.unwrap_or(b',');
        if matches!(comma, b'"' | b'\r' | b'\n') {
            return Err(error(function, "invalid field delimiter"));
        }
        let rows =
            rows_of(source).ok_or_else(|| error(function, "expected value to be an array type"))?;
        let left = heap_left(heap);
        let mut writer = csv::WriterBuilder::new()
            .delimiter(comma)
            .flexible(true)
            .from_writer(Vec::new());
        for (i, row) in rows.into_iter().enumerate() {
            let cells = rows_of(row)
                .ok_or_else(|| error(function, format!("row {i} is not an array type")))?;
            let mut record = Vec::with_capacity(cells.len());
            for cell in cells {
                let mut text = String::new();
                go_text(function, cell, &mut text, left)?;
                record.push(text);
            }
            writer
                .write_record(&record)
                .and_then(|()| writer.flush().map_err(csv::Error::from))
                .map_err(|e| error(function, e))?;
            // Quoting at most doubles a field: the text written so far bounds what is kept.
            let written = writer.get_ref().len() as u64;
            if written > left {
                return Err(over_budget("`csv.write_all`", Some(written), left));
            }
        }
        let text = writer
            .into_inner()
            .map_err(|e| error(function, e.error()))?;
        String::from_utf8(text).map_err(|e| error(function, e))
    }
}

/// The items of a list or tuple (starlib's `util.Unmarshal` takes both as arrays).
fn rows_of(value: Value) -> Option<Vec<Value>> {
    ListRef::from_value(value)
        .map(|l| l.content().to_vec())
        .or_else(|| TupleRef::from_value(value).map(|t| t.content().to_vec()))
}
