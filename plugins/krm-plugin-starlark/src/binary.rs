//! Bytes a program holds that are not text. starlib's Go strings hold any bytes, so its
//! `base64.decode` and a zip entry's `read()` give the raw data; starlark-rust's strings are
//! UTF-8, so here such data (an archive from a ConfigMap's `binaryData`, a binary entry) is a
//! `bytes` value: `ZipFile` reads it, `base64.encode` writes it back as text, `len` and `==`
//! work, and it cannot be left in an item. Its data lives outside the Starlark heap and is
//! counted against the heap budget (see [`super::hold_outside_heap`]).

use std::fmt;

use allocative::Allocative;
use starlark::starlark_simple_value;
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagablePanic, StarlarkValue, Value, ValueLike,
};
use starlark_derive::starlark_value;

#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct Bytes(Box<[u8]>);

starlark_simple_value!(Bytes);

impl fmt::Display for Bytes {
    // The data itself may be large and is not text: `str()` and `print` show its size.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<bytes: {} bytes>", self.0.len())
    }
}

#[starlark_value(type = "bytes")]
impl<'v> StarlarkValue<'v> for Bytes {
    fn length(&self) -> starlark::Result<i32> {
        i32::try_from(self.0.len())
            .map_err(|_| starlark::Error::new_other(anyhow::anyhow!("bytes too long for len()")))
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<Bytes>()
            .is_some_and(|other| other.0 == self.0))
    }

    fn to_bool(&self) -> bool {
        !self.0.is_empty()
    }
}

/// The bytes of a string or of a `bytes` value.
pub fn bytes_of<'v>(value: Value<'v>) -> Option<&'v [u8]> {
    match value.unpack_str() {
        Some(text) => Some(text.as_bytes()),
        None => value.downcast_ref::<Bytes>().map(|bytes| &bytes.0[..]),
    }
}

/// `data` as a string when it is UTF-8, else as `bytes`; counted against the heap budget by
/// the caller, which measured it first.
pub fn alloc_data(heap: Heap<'_>, data: Vec<u8>) -> Value<'_> {
    match String::from_utf8(data) {
        Ok(text) => heap.alloc(text),
        Err(e) => {
            let data = e.into_bytes().into_boxed_slice();
            super::hold_outside_heap(data.len() as u64);
            heap.alloc_simple(Bytes(data))
        }
    }
}
