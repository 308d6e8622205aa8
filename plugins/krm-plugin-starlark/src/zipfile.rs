//! `zipfile.star` (qri-io/starlib v0.5.0): `ZipFile(data)` reads an archive held in a string or
//! `bytes` value; `namelist()` gives its entries' names in order and `open(name).read()` an
//! entry's contents (a string, or `bytes` when they are not UTF-8). Stored and deflated entries
//! are read, with the zip crate.
//!
//! Archives are hostile: the index the crate builds, the names and every entry's contents are
//! measured against what is left of the heap budget before they are made, an entry is read no
//! further than the size it declares (a zip bomb that lies about it is stopped there), and each
//! error names the function and the entry.

use std::fmt;
use std::io::{Cursor, Read};
use std::sync::{Arc, Mutex};

use allocative::Allocative;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder, MethodsStatic};
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::list::AllocList;
use starlark::values::{
    Heap, NoSerialize, ProvidesStaticType, StarlarkPagablePanic, StarlarkValue, Value, ValueLike,
};
use starlark_derive::starlark_value;
use zip::ZipArchive;

use super::binary::{alloc_data, bytes_of};
use super::{heap_left, hold_outside_heap, over_budget};

/// Bytes the zip crate's index takes per entry it may hold, at most (its record of the entry,
/// besides the name). A central directory entry takes at least 46 bytes of the archive.
const INDEX_BYTES_PER_ENTRY: u64 = 512;
const MIN_DIRECTORY_ENTRY_BYTES: u64 = 46;
/// Heap bytes of a Starlark string besides its text.
const STRING_OVERHEAD: u64 = 24;

type Archive = ZipArchive<Cursor<Arc<[u8]>>>;

pub fn add_zipfile(builder: &mut GlobalsBuilder) {
    builder.set("ZipFile", ZIPFILE_FUNCTION.function());
}

static ZIPFILE_FUNCTION: starlark::environment::GlobalsStatic =
    starlark::environment::GlobalsStatic::new("krm-zipfile", zipfile_function);

fn error(function: &str, message: impl fmt::Display) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("{function}: {message}"))
}

#[starlark_module]
fn zipfile_function(builder: &mut GlobalsBuilder) {
    /// Reads the archive's index; its entries are read by `open(name).read()`. Named as
    /// starlib names it.
    #[allow(non_snake_case)]
    fn ZipFile<'v>(
        #[starlark(require = pos)] file: Value<'v>,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let function = "ZipFile";
        let data = bytes_of(file).ok_or_else(|| {
            error(
                function,
                format!("file must be a string or bytes, not {}", file.get_type()),
            )
        })?;
        let size = data.len() as u64;
        // The copy of the data, and the largest index the crate could build for it.
        let most = size.saturating_add(size / MIN_DIRECTORY_ENTRY_BYTES * INDEX_BYTES_PER_ENTRY);
        let left = heap_left(heap);
        if most > left {
            return Err(over_budget(
                &format!(
                    "`ZipFile` of a {size}-byte archive (which could index {} entries)",
                    size / MIN_DIRECTORY_ENTRY_BYTES
                ),
                Some(most),
                left,
            ));
        }
        let archive = ZipArchive::new(Cursor::new(Arc::<[u8]>::from(data)))
            .map_err(|e| error(function, format!("not a zip archive: {e}")))?;
        let names: u64 = archive.file_names().map(|n| n.len() as u64).sum();
        hold_outside_heap(
            size.saturating_add(
                (archive.len() as u64).saturating_mul(INDEX_BYTES_PER_ENTRY) + names,
            ),
        );
        Ok(heap.alloc_simple(ZipFile(Mutex::new(archive))))
    }
}

#[derive(ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct ZipFile(#[allocative(skip)] Mutex<Archive>);

starlark_simple_value!(ZipFile);

impl fmt::Debug for ZipFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ZipFile")
    }
}

impl fmt::Display for ZipFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<ZipFile: {} entries>", self.archive().len())
    }
}

impl ZipFile {
    fn archive(&self) -> std::sync::MutexGuard<'_, Archive> {
        // The lock is never held across a call that could panic halfway.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

static ZIPFILE_METHODS: MethodsStatic = MethodsStatic::new("krm-zipfile-methods", zipfile_methods);

#[starlark_value(type = "ZipFile")]
impl<'v> StarlarkValue<'v> for ZipFile {
    fn get_methods() -> Option<&'static Methods> {
        Some(ZIPFILE_METHODS.methods())
    }
}

#[starlark_module]
fn zipfile_methods(builder: &mut MethodsBuilder) {
    /// The entries' names, in the order of the archive's directory.
    fn namelist<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let zip = this
            .downcast_ref::<ZipFile>()
            .ok_or_else(|| error("namelist", "not a ZipFile"))?;
        let archive = zip.archive();
        let bytes: u64 = archive
            .file_names()
            .map(|n| n.len() as u64 + STRING_OVERHEAD + 8)
            .sum();
        let left = heap_left(heap);
        if bytes > left {
            return Err(over_budget("`namelist`", Some(bytes), left));
        }
        Ok(heap.alloc(AllocList(archive.file_names().map(|n| heap.alloc(n)))))
    }

    /// The entry named `name`, to `read()`.
    fn open<'v>(
        this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        heap: Heap<'v>,
    ) -> starlark::Result<Value<'v>> {
        let zip = this
            .downcast_ref::<ZipFile>()
            .ok_or_else(|| error("open", "not a ZipFile"))?;
        let archive = zip.archive();
        match archive.index_for_name(name) {
            Some(index) => Ok(heap.alloc_simple(ZipEntry {
                archive: Mutex::new(archive.clone()),
                index,
                name: name.to_owned(),
            })),
            None => Err(error("open", format!("{name:?} not found in the archive"))),
        }
    }
}

/// An entry of a [`ZipFile`] (starlib's `ZipInfo`), sharing its archive.
#[derive(ProvidesStaticType, NoSerialize, Allocative, StarlarkPagablePanic)]
pub struct ZipEntry {
    #[allocative(skip)]
    archive: Mutex<Archive>,
    index: usize,
    name: String,
}

starlark_simple_value!(ZipEntry);

impl fmt::Debug for ZipEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZipEntry({:?})", self.name)
    }
}

impl fmt::Display for ZipEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<ZipFile entry {:?}>", self.name)
    }
}

static ZIPENTRY_METHODS: MethodsStatic =
    MethodsStatic::new("krm-zipentry-methods", zipentry_methods);

#[starlark_value(type = "ZipInfo")]
impl<'v> StarlarkValue<'v> for ZipEntry {
    fn get_methods() -> Option<&'static Methods> {
        Some(ZIPENTRY_METHODS.methods())
    }
}

#[starlark_module]
fn zipentry_methods(builder: &mut MethodsBuilder) {
    /// The entry's contents: a string, or `bytes` when they are not UTF-8.
    fn read<'v>(this: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let entry = this
            .downcast_ref::<ZipEntry>()
            .ok_or_else(|| error("read", "not a ZipFile entry"))?;
        let data = entry.read(heap_left(heap))?;
        Ok(alloc_data(heap, data))
    }
}

impl ZipEntry {
    /// Reads the entry, refusing it when its declared size passes `left`, and stopping at
    /// that size: the crate checks the CRC once it has read exactly that much.
    fn read(&self, left: u64) -> starlark::Result<Vec<u8>> {
        let what = format!("read of {:?}", self.name);
        let mut archive = self
            .archive
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut file = archive.by_index(self.index).map_err(|e| error(&what, e))?;
        let declared = file.size();
        let compressed = file.compressed_size();
        if declared.saturating_add(STRING_OVERHEAD) > left {
            return Err(over_budget(
                &format!("`read` of {:?} ({compressed} bytes compressed)", self.name),
                Some(declared),
                left,
            ));
        }
        let mut data = Vec::with_capacity(declared as usize);
        (&mut file)
            .take(declared.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| error(&what, e))?;
        if data.len() as u64 != declared {
            return Err(error(
                &what,
                format!(
                    "the entry declares {declared} bytes but holds {}",
                    if data.len() as u64 > declared {
                        "more".to_owned()
                    } else {
                        data.len().to_string()
                    }
                ),
            ));
        }
        Ok(data)
    }
}
