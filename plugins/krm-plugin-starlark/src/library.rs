//! What `load()` offers: the catalog's module names (qri-io/starlib, starlark-go's libraries and
//! its own `krmfn.star`). Those that reach outside the sandbox (http) or that krm-runner does
//! not implement load, but each use of them fails naming the library.

use std::fmt;

use allocative::Allocative;
use base64::Engine;
use starlark::environment::{FrozenModule, GlobalsBuilder};
use starlark::eval::{Arguments, Evaluator, FileLoader};
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::dict::DictRef;
use starlark::values::float::UnpackFloat;
use starlark::values::list::AllocList;
use starlark::values::tuple::AllocTuple;
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagable, StarlarkValue, Value,
};
use starlark_derive::starlark_value;

use super::binary::{alloc_data, bytes_of};
use super::convert;
use krm_yaml_edit::{Doc, New, block_entries, block_items};

/// Answers `load()` statements.
pub struct Loader;

/// Libraries that load but whose every use fails, with why.
const UNAVAILABLE: &[(&str, &str, &str)] = &[
    ("http.star", "http", "network access is not allowed"),
    ("time.star", "time", "clock access is not allowed"),
    (
        "xlsx.star",
        "xlsx",
        "its one function, get_url, downloads the workbook and network access is not allowed",
    ),
];

impl FileLoader for Loader {
    fn load(&self, path: &str) -> starlark::Result<FrozenModule> {
        let globals = match path {
            "krmfn.star" => GlobalsBuilder::new()
                .with(|g| g.namespace("krmfn", krmfn))
                .build(),
            "encoding/json.star" => GlobalsBuilder::new().with(super::amplify::add_json).build(),
            "encoding/csv.star" => GlobalsBuilder::new().with(super::csv::add_csv).build(),
            "encoding/base64.star" => GlobalsBuilder::new()
                .with(|g| g.namespace("base64", base64_module))
                .build(),
            "encoding/yaml.star" => GlobalsBuilder::new()
                .with(|g| g.namespace("yaml", yaml_module))
                .build(),
            "geo.star" => GlobalsBuilder::new().with(super::geo::add_geo).build(),
            "html.star" => GlobalsBuilder::new().with(super::html::add_html).build(),
            "bsoup.star" => GlobalsBuilder::new().with(super::html::add_bsoup).build(),
            "zipfile.star" => GlobalsBuilder::new()
                .with(super::zipfile::add_zipfile)
                .build(),
            "hash.star" => GlobalsBuilder::new()
                .with(|g| g.namespace("hash", hash_module))
                .build(),
            "math.star" => GlobalsBuilder::new()
                .with(|g| {
                    g.namespace("math", |math| {
                        math_module(math);
                        math.set("pi", std::f64::consts::PI);
                        math.set("e", std::f64::consts::E);
                    })
                })
                .build(),
            "re.star" => GlobalsBuilder::new()
                .with(|g| g.namespace("re", re_module))
                .build(),
            _ => match UNAVAILABLE.iter().find(|(name, _, _)| *name == path) {
                Some((name, symbol, reason)) => {
                    let mut builder = GlobalsBuilder::new();
                    builder.set(
                        symbol,
                        Unavailable {
                            what: (*symbol).to_owned(),
                            reason: format!("the {name} library is not available: {reason}"),
                        },
                    );
                    builder.build()
                }
                None => {
                    return Err(starlark::Error::new_other(anyhow::anyhow!(
                        "cannot load {path:?}: no such library (available: krmfn.star, \
                         encoding/json.star, encoding/base64.star, encoding/csv.star, \
                         encoding/yaml.star, hash.star, math.star, re.star, zipfile.star, \
                         html.star, bsoup.star, geo.star)"
                    )));
                }
            },
        };
        FrozenModule::from_globals(&globals)
            .map_err(|e| starlark::Error::new_other(anyhow::anyhow!("cannot load {path:?}: {e:?}")))
    }
}

/// A value standing for something the sandbox does not offer: using it fails with `reason`.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagable)]
pub struct Unavailable {
    what: String,
    reason: String,
}

starlark_simple_value!(Unavailable);

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}: unavailable>", self.what)
    }
}

impl Unavailable {
    fn error(&self) -> starlark::Error {
        starlark::Error::new_other(anyhow::anyhow!("{}: {}", self.what, self.reason))
    }
}

#[starlark_value(type = "unavailable")]
impl<'v> StarlarkValue<'v> for Unavailable {
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(heap.alloc(Unavailable {
            what: format!("{}.{attribute}", self.what),
            reason: self.reason.clone(),
        }))
    }

    fn at(&self, _index: Value<'v>, _heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Err(self.error())
    }

    fn invoke(
        &self,
        _me: Value<'v>,
        _args: &Arguments<'v, '_>,
        _eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        Err(self.error())
    }
}

/// A string field of a resource dict (`metadata.name`), empty when absent, as the SDK reads it.
fn field(resource: Value, path: &[&str]) -> String {
    let mut value = resource;
    for key in path {
        match DictRef::from_value(value).and_then(|d| d.get_str(key)) {
            Some(next) => value = next,
            None => return String::new(),
        }
    }
    value.unpack_str().unwrap_or_default().to_owned()
}

#[starlark_module]
fn krmfn(builder: &mut GlobalsBuilder) {
    /// As catalog v0.5.1: compares the object's (group, version, kind) with
    /// ("", api_version, kind), so only objects of the core group match.
    fn match_gvk(
        #[starlark(require = pos)] resource: Value,
        #[starlark(require = pos)] api_version: &str,
        #[starlark(require = pos)] kind: &str,
    ) -> anyhow::Result<bool> {
        let object_api_version = field(resource, &["apiVersion"]);
        let (group, version) = krm_catalog_function::rl::split_api_version(&object_api_version);
        Ok(group.is_empty() && version == api_version && field(resource, &["kind"]) == kind)
    }

    fn match_name(
        #[starlark(require = pos)] resource: Value,
        #[starlark(require = pos)] name: &str,
    ) -> anyhow::Result<bool> {
        Ok(field(resource, &["metadata", "name"]) == name)
    }

    fn match_namespace(
        #[starlark(require = pos)] resource: Value,
        #[starlark(require = pos)] namespace: &str,
    ) -> anyhow::Result<bool> {
        Ok(field(resource, &["metadata", "namespace"]) == namespace)
    }
}

fn base64_engine(encoding: &str) -> anyhow::Result<base64::engine::GeneralPurpose> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    Ok(match encoding {
        "standard" => STANDARD,
        "standard_raw" => STANDARD_NO_PAD,
        "url" => URL_SAFE,
        "url_raw" => URL_SAFE_NO_PAD,
        other => anyhow::bail!(
            "unknown base64 encoding {other:?} (standard, standard_raw, url, url_raw)"
        ),
    })
}

#[starlark_module]
fn base64_module(builder: &mut GlobalsBuilder) {
    /// Encodes a string's bytes or a `bytes` value.
    fn encode<'v>(
        #[starlark(require = pos)] data: Value<'v>,
        #[starlark(default = "standard")] encoding: &str,
    ) -> anyhow::Result<String> {
        let bytes = bytes_of(data).ok_or_else(|| {
            anyhow::anyhow!(
                "base64.encode: expected a string or bytes, not {}",
                data.get_type()
            )
        })?;
        Ok(base64_engine(encoding)?.encode(bytes))
    }

    /// A string when the decoded data is UTF-8, else `bytes` (an archive for `ZipFile`, say).
    fn decode<'v>(
        #[starlark(require = pos)] data: &str,
        #[starlark(default = "standard")] encoding: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let bytes = base64_engine(encoding)?.decode(data)?;
        Ok(alloc_data(heap, bytes))
    }
}

#[starlark_module]
fn yaml_module(builder: &mut GlobalsBuilder) {
    fn loads<'v>(
        #[starlark(require = pos)] text: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let doc = Doc::parse(text).map_err(|e| anyhow::anyhow!("yaml.loads: {e}"))?;
        Ok(match doc.roots.first() {
            Some(&root) => convert::to_value(&doc, root, heap),
            None => Value::new_none(),
        })
    }

    fn dumps<'v>(
        #[starlark(require = pos)] value: Value<'v>,
        heap: Heap<'v>,
    ) -> starlark::Result<String> {
        super::amplify::check_yaml_dump(value, heap)?;
        let new = convert::to_new(value, "yaml.dumps", 0, true)
            .map_err(|e| starlark::Error::new_other(anyhow::Error::msg(e)))?;
        let mut out = String::new();
        match &new {
            New::Map(entries) if !entries.is_empty() => block_entries(entries, 0, &mut out),
            New::Seq(items) if !items.is_empty() => block_items(items, 0, &mut out),
            scalar => {
                scalar.flow_plain(&mut out);
                out.push('\n');
            }
        }
        Ok(out)
    }
}

#[starlark_module]
fn hash_module(builder: &mut GlobalsBuilder) {
    fn md5(#[starlark(require = pos)] data: &str) -> anyhow::Result<String> {
        use md5::Digest;
        Ok(hex(&md5::Md5::digest(data.as_bytes())))
    }

    fn sha1(#[starlark(require = pos)] data: &str) -> anyhow::Result<String> {
        use sha1::Digest;
        Ok(hex(&sha1::Sha1::digest(data.as_bytes())))
    }

    fn sha256(#[starlark(require = pos)] data: &str) -> anyhow::Result<String> {
        use sha2::Digest;
        Ok(hex(&sha2::Sha256::digest(data.as_bytes())))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[starlark_module]
fn math_module(builder: &mut GlobalsBuilder) {
    fn ceil(#[starlark(require = pos)] x: UnpackFloat) -> anyhow::Result<i64> {
        Ok(x.0.ceil() as i64)
    }

    fn floor(#[starlark(require = pos)] x: UnpackFloat) -> anyhow::Result<i64> {
        Ok(x.0.floor() as i64)
    }

    fn fabs(#[starlark(require = pos)] x: UnpackFloat) -> anyhow::Result<f64> {
        Ok(x.0.abs())
    }

    fn sqrt(#[starlark(require = pos)] x: UnpackFloat) -> anyhow::Result<f64> {
        Ok(x.0.sqrt())
    }

    fn pow(
        #[starlark(require = pos)] x: UnpackFloat,
        #[starlark(require = pos)] y: UnpackFloat,
    ) -> anyhow::Result<f64> {
        Ok(x.0.powf(y.0))
    }

    fn exp(#[starlark(require = pos)] x: UnpackFloat) -> anyhow::Result<f64> {
        Ok(x.0.exp())
    }

    fn log(
        #[starlark(require = pos)] x: UnpackFloat,
        base: Option<UnpackFloat>,
    ) -> anyhow::Result<f64> {
        Ok(match base {
            Some(base) => x.0.log(base.0),
            None => x.0.ln(),
        })
    }

    fn round(#[starlark(require = pos)] x: UnpackFloat) -> anyhow::Result<f64> {
        Ok(x.0.round())
    }
}

fn regex(pattern: &str) -> anyhow::Result<regex::Regex> {
    // The crate's own size limits bound what a hostile pattern can cost; matching is linear.
    regex::Regex::new(pattern).map_err(|e| anyhow::anyhow!("invalid pattern {pattern:?}: {e}"))
}

#[starlark_module]
fn re_module(builder: &mut GlobalsBuilder) {
    /// Whole matches, or the group (several groups: a tuple of them) of each match.
    fn findall<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] text: &str,
        #[starlark(default = 0)] flags: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let _ = flags;
        let re = regex(pattern)?;
        let groups = re.captures_len() - 1;
        let found: Vec<Value> = re
            .captures_iter(text)
            .map(|caps| {
                let group = |i: usize| heap.alloc(caps.get(i).map_or("", |m| m.as_str()));
                match groups {
                    0 => group(0),
                    1 => group(1),
                    n => heap.alloc(AllocTuple((1..=n).map(group))),
                }
            })
            .collect();
        Ok(heap.alloc(AllocList(found)))
    }

    fn split<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] text: &str,
        #[starlark(default = 0)] maxsplit: i32,
        #[starlark(default = 0)] flags: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let _ = flags;
        let re = regex(pattern)?;
        let parts: Vec<Value> = if maxsplit > 0 {
            re.splitn(text, maxsplit as usize + 1)
                .map(|s| heap.alloc(s))
                .collect()
        } else {
            re.split(text).map(|s| heap.alloc(s)).collect()
        };
        Ok(heap.alloc(AllocList(parts)))
    }

    /// `repl` may name groups as `\1`; other backslash escapes are taken literally. Refused
    /// before replacing when the result could pass what is left of the heap budget.
    fn sub<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] repl: &str,
        #[starlark(require = pos)] text: &str,
        #[starlark(default = 0)] count: i32,
        #[starlark(default = 0)] flags: i32,
        heap: Heap<'v>,
    ) -> starlark::Result<String> {
        let _ = flags;
        let re = regex(pattern).map_err(starlark::Error::new_other)?;
        let mut replacement = String::with_capacity(repl.len());
        let (mut literal_bytes, mut group_references) = (0u64, 0u64);
        let mut chars = repl.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '$' => {
                    replacement.push_str("$$");
                    literal_bytes += 1;
                }
                '\\' if chars.peek().is_some_and(char::is_ascii_digit) => {
                    replacement.push_str("${");
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        replacement.push(d);
                    }
                    replacement.push('}');
                    group_references += 1;
                }
                c => {
                    replacement.push(c);
                    literal_bytes += c.len_utf8() as u64;
                }
            }
        }
        let limit = usize::try_from(count.max(0)).unwrap_or(0);
        // Matches do not overlap, so each group reference adds at most the text once.
        let text_bytes = text.len() as u64;
        let matches = match limit {
            0 => re.find_iter(text).count(),
            n => re.find_iter(text).take(n).count(),
        } as u64;
        let bytes = text_bytes
            .saturating_add(matches.saturating_mul(literal_bytes))
            .saturating_add(group_references.saturating_mul(text_bytes));
        let left = super::heap_left(heap);
        if bytes > left {
            return Err(super::over_budget("`re.sub`", Some(bytes), left));
        }
        Ok(re.replacen(text, limit, replacement.as_str()).into_owned())
    }
}
