//! Builtins whose text can be far larger than their input: `str`, `repr`, `print`,
//! `json.encode` and `%` formatting. starlark-rust builds their text in one Rust buffer before
//! the heap budget is checked again, and a list holding one large string many times (or lists
//! nesting a shared list, whose text grows exponentially) would ask the allocator for more than
//! the machine has and abort the process. The guarded versions measure the text first, with a
//! walk that stops as soon as it passes what is left of the heap budget, and refuse it then.
//! `%` reaches its guard as [`repeat`](super::repeat) routes `*`: every `a % b` calls the global
//! [`PERCENT`]; `%=` is refused when the program is read.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder, GlobalsStatic, LibraryExtension};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::syntax::AstModule;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::none::NoneType;
use starlark::values::string::StarlarkStr;
use starlark::values::structs::StructRef;
use starlark::values::tuple::{TupleRef, UnpackTuple};
use starlark::values::{FrozenValue, Heap, StringValue, Value, ValueIdentity};
use starlark_map::StarlarkHasherBuilder;

use super::{MAX_HEAP_BYTES, heap_left, over_budget};

/// The global every `%` calls. Not an identifier, so no program can name, shadow or redefine it.
pub const PERCENT: &str = "%";

/// Makes every `a % b` of `ast` a call of [`PERCENT`].
pub fn guard_formatting(ast: &mut AstModule) {
    ast.replace_binary_operators(&HashMap::from([(PERCENT.to_owned(), PERCENT.to_owned())]));
}

static GUARDED_TEXT: GlobalsStatic = GlobalsStatic::new("krm-guarded-text", guarded_text);
static GUARDED_PERCENT: GlobalsStatic = GlobalsStatic::new("krm-guarded-percent", guarded_percent);

/// Replaces `str`, `repr` and `print` in the globals being built, and adds [`PERCENT`].
pub fn add_guarded_text(builder: &mut GlobalsBuilder) {
    GUARDED_TEXT.populate(builder);
    builder.set(PERCENT, GUARDED_PERCENT.function());
}

/// The `json` namespace of `encoding/json.star`, with `encode` guarded.
pub fn add_json(builder: &mut GlobalsBuilder) {
    builder.namespace("json", guarded_json);
}

/// How a value is written: `str()` (a string as itself), `repr()` (quoted and escaped), or JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Text {
    Str,
    Repr,
    Json,
}

/// The text would pass the limit.
struct TooLarge;

/// Measures an upper bound of values' text, giving up as soon as one passes `limit`. Each
/// string and container is measured once however often it is shared, so the walk costs the
/// number of distinct values, not the (possibly exponential) size of the text.
struct TextBytes<'v> {
    limit: u64,
    heap: Heap<'v>,
    /// Keyed by address: the interpreter's own hasher, far cheaper than SipHash here.
    measured: HashMap<(ValueIdentity<'v>, Text), u64, StarlarkHasherBuilder>,
    /// Containers being measured: meeting one again is a cycle, written `[...]`.
    open: HashSet<ValueIdentity<'v>, StarlarkHasherBuilder>,
}

impl<'v> TextBytes<'v> {
    fn new(limit: u64, heap: Heap<'v>) -> Self {
        TextBytes {
            limit,
            heap,
            measured: HashMap::default(),
            open: HashSet::default(),
        }
    }

    fn within(&self, bytes: u64) -> Result<u64, TooLarge> {
        if bytes > self.limit {
            return Err(TooLarge);
        }
        Ok(bytes)
    }

    fn bytes(&mut self, value: Value<'v>, text: Text) -> Result<u64, TooLarge> {
        let string = value.unpack_str();
        match string {
            // Small strings and other leaves are cheap to measure again, and remembering them
            // would cost more memory than they hold.
            Some(string) if string.len() < REMEMBERED_STRING_BYTES => {
                return self.within(string_bytes(string, text));
            }
            None if !is_container(value) => {
                if let Some(bytes) = super::geo::text_bytes(value) {
                    return self.within(bytes);
                }
                // Numbers, None, booleans, functions: their text is small or as large as the
                // value.
                let slack = if text == Text::Json { 8 } else { 0 };
                return self.within(value.to_repr().len() as u64 + slack);
            }
            _ => {}
        }
        let key = (value.identity(), text);
        if let Some(&bytes) = self.measured.get(&key) {
            return Ok(bytes);
        }
        let bytes = if let Some(string) = string {
            self.within(string_bytes(string, text))?
        } else if !self.open.insert(key.0) {
            return Ok(5);
        } else {
            let inner = if text == Text::Json {
                Text::Json
            } else {
                Text::Repr
            };
            let bytes = self.children(value, inner);
            self.open.remove(&key.0);
            bytes?
        };
        self.measured.insert(key, bytes);
        Ok(bytes)
    }

    /// `[a, b]`, `(a,)`, `{k: v}`, `struct(name = v)`, `set([a])`: brackets and separators
    /// counted generously, then each part.
    fn children(&mut self, value: Value<'v>, inner: Text) -> Result<u64, TooLarge> {
        let mut total: u64 = 0;
        let mut add = |this: &mut Self, bytes: u64| {
            total = this.within(total.saturating_add(bytes))?;
            Ok::<_, TooLarge>(())
        };
        if let Some(list) = ListRef::from_value(value) {
            add(self, 2)?;
            for item in list.iter() {
                let bytes = self.bytes(item, inner)?;
                add(self, bytes + 2)?;
            }
        } else if let Some(tuple) = TupleRef::from_value(value) {
            add(self, 3)?;
            for item in tuple.iter() {
                let bytes = self.bytes(item, inner)?;
                add(self, bytes + 2)?;
            }
        } else if let Some(dict) = DictRef::from_value(value) {
            add(self, 2)?;
            for (key, item) in dict.iter() {
                let bytes = self.bytes(key, inner)? + self.bytes(item, inner)?;
                add(self, bytes + 4)?;
            }
        } else if let Some(fields) = StructRef::from_value(value) {
            add(self, 8)?;
            for (name, item) in fields.iter() {
                let bytes = self.bytes(item, inner)?;
                add(self, bytes + name.as_str().len() as u64 + 5)?;
            }
        } else if value.get_type() == "set" {
            add(self, 7)?;
            let items = value.iterate(self.heap).map_err(|_| TooLarge)?;
            for item in items {
                let bytes = self.bytes(item, inner)?;
                add(self, bytes + 2)?;
            }
        }
        Ok(total)
    }
}

/// Strings at least this long are measured once per walk however often they are shared.
const REMEMBERED_STRING_BYTES: usize = 64;

/// The values [`TextBytes::children`] walks into.
fn is_container(value: Value) -> bool {
    ListRef::from_value(value).is_some()
        || TupleRef::from_value(value).is_some()
        || DictRef::from_value(value).is_some()
        || StructRef::from_value(value).is_some()
        || value.get_type() == "set"
}

/// At most how many bytes `string` takes written as `text`: a `repr` escape is at most four
/// bytes per byte (`\x01`, or `\U0001f63f` for four), a JSON escape six (`\u0001`).
fn string_bytes(string: &str, text: Text) -> u64 {
    let len = string.len() as u64;
    let escaped = |needs: fn(u8) -> bool| string.bytes().filter(|&b| needs(b)).count() as u64;
    match text {
        Text::Str => len,
        Text::Repr => {
            2 + len + 3 * escaped(|b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\')
        }
        Text::Json => 2 + len + 5 * escaped(|b| b < 0x20 || b == b'"' || b == b'\\'),
    }
}

/// Refuses `what` when its text could be larger than what is left of the heap budget.
fn check_text<'v>(
    what: &str,
    values: &[Value<'v>],
    text: Text,
    heap: Heap<'v>,
) -> starlark::Result<()> {
    let left = heap_left(heap);
    let mut measure = TextBytes::new(left, heap);
    let mut total: u64 = 0;
    for &value in values {
        match measure.bytes(value, text) {
            Ok(bytes) => total = total.saturating_add(bytes + 1),
            Err(TooLarge) => return Err(over_budget(what, None, left)),
        }
    }
    if total > left {
        return Err(over_budget(what, Some(total), left));
    }
    Ok(())
}

/// Refuses `format % args` when its result could be larger than what is left of the heap
/// budget: the format plus the text of each argument (a tuple's items, else `args` itself).
fn check_percent<'v>(format: &str, args: Value<'v>, heap: Heap<'v>) -> starlark::Result<()> {
    let left = heap_left(heap);
    let what = "formatting a string with `%`";
    let mut measure = TextBytes::new(left, heap);
    let arguments = match TupleRef::from_value(args) {
        Some(tuple) => tuple.iter().try_fold(0, |total: u64, item| {
            Ok(total.saturating_add(measure.bytes(item, Text::Repr)?))
        }),
        None => measure.bytes(args, Text::Repr),
    };
    match arguments {
        Err(TooLarge) => Err(over_budget(what, None, left)),
        Ok(bytes) => {
            let total = bytes.saturating_add(format.len() as u64);
            if total > left {
                return Err(over_budget(what, Some(total), left));
            }
            Ok(())
        }
    }
}

/// Refuses `format.format(...)` when its result could be larger than what is left of the heap
/// budget: the format plus, for each replacement field it may hold, the largest argument's text.
pub fn check_format<'v>(
    format: &str,
    arguments: impl Iterator<Item = Value<'v>>,
    heap: Heap<'v>,
) -> starlark::Result<()> {
    let fields = format.matches('{').count() as u64;
    if fields == 0 {
        return Ok(());
    }
    let left = heap_left(heap);
    let what = "formatting a string with `format`";
    let mut measure = TextBytes::new(left, heap);
    let mut largest = 0;
    for value in arguments {
        match measure.bytes(value, Text::Repr) {
            Ok(bytes) => largest = largest.max(bytes),
            Err(TooLarge) => return Err(over_budget(what, None, left)),
        }
    }
    let total = (format.len() as u64).saturating_add(fields.saturating_mul(largest));
    if total > left {
        return Err(over_budget(what, Some(total), left));
    }
    Ok(())
}

/// Refuses what a program leaves in `ctx.resource_list` when it could be written as more text
/// than the heap budget: a value it shares is written again at each use, so a few lists nesting
/// one list would stand for more YAML than the machine holds.
pub fn check_output<'v>(resource_list: Value<'v>, heap: Heap<'v>) -> Result<(), String> {
    let limit = MAX_HEAP_BYTES as u64;
    match TextBytes::new(limit, heap).bytes(resource_list, Text::Json) {
        Ok(bytes) if bytes <= limit => Ok(()),
        _ => Err(format!(
            "ctx.resource_list would be written as more than {limit} bytes (the heap budget of \
             {} MiB): a value is written again wherever it is shared",
            MAX_HEAP_BYTES >> 20
        )),
    }
}

/// Refuses `yaml.dumps(value)` when its text could be larger than what is left of the heap
/// budget.
pub fn check_yaml_dump<'v>(value: Value<'v>, heap: Heap<'v>) -> starlark::Result<()> {
    check_text("`yaml.dumps()` of this value", &[value], Text::Json, heap)
}

/// The interpreter's own `print`, called once the line is known to fit.
fn plain_print() -> FrozenValue {
    static PLAIN: OnceLock<Globals> = OnceLock::new();
    PLAIN
        .get_or_init(|| Globals::extended_by(&[LibraryExtension::Print]))
        .iter()
        .find(|(name, _)| *name == "print")
        .map(|(_, value)| value)
        .expect("the Print extension defines print")
}

#[starlark_module]
fn guarded_text(builder: &mut GlobalsBuilder) {
    /// `str(x)`, refused when its text would not fit the heap budget.
    #[starlark(as_type = StarlarkStr)]
    fn str<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if a.unpack_str().is_some() {
            return Ok(a);
        }
        check_text("`str()` of this value", &[a], Text::Str, eval.heap())?;
        Ok(eval.heap().alloc(a.to_str()))
    }

    /// `repr(x)`, refused when its text would not fit the heap budget.
    fn repr<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<StringValue<'v>> {
        check_text("`repr()` of this value", &[a], Text::Repr, eval.heap())?;
        Ok(eval.heap().alloc_str(&a.to_repr()))
    }

    /// `print(...)`, refused when its line would not fit the heap budget.
    fn print<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<NoneType> {
        check_text(
            "`print()` of these values",
            &args.items,
            Text::Str,
            eval.heap(),
        )?;
        eval.eval_function(plain_print().to_value(), &args.items, &[])?;
        Ok(NoneType)
    }
}

#[starlark_module]
fn guarded_percent(builder: &mut GlobalsBuilder) {
    /// `lhs % rhs`, refused when it would format a string beyond the heap budget.
    fn percent<'v>(
        #[starlark(require = pos)] lhs: Value<'v>,
        #[starlark(require = pos)] rhs: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let heap = eval.heap();
        if let Some(format) = lhs.unpack_str() {
            check_percent(format, rhs, heap)?;
        }
        lhs.percent(rhs, heap)
    }
}

#[starlark_module]
fn guarded_json(builder: &mut GlobalsBuilder) {
    /// `json.encode(x)`, refused when its text would not fit the heap budget.
    fn encode<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<String> {
        check_text(
            "`json.encode()` of this value",
            &[x],
            Text::Json,
            eval.heap(),
        )?;
        x.to_json().map_err(starlark::Error::new_other)
    }

    fn decode<'v>(#[starlark(require = pos)] x: &str, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
        Ok(heap.alloc(serde_json::from_str::<serde_json::Value>(x)?))
    }
}
