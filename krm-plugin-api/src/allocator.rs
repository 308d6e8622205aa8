//! An allocator for plugins whose calls run at a worker's memory limit.

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, except that an allocation it cannot serve ends the process, as the
/// standard collections' own failures do, instead of returning null to the caller.
///
/// A plugin configured `isolated` runs its calls in worker processes under an address-space
/// limit, so there a failed allocation is an ordinary event, and not every dependency checks
/// for it (starlark-rust's maps write through the pointer they are given). Installed as the
/// plugin's allocator, the failure ends the worker with the standard "memory allocation of N
/// bytes failed", which the runner answers as RESOURCE_EXHAUSTED and replaces the worker:
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: krm_plugin_api::AbortOnFailedAllocation =
///     krm_plugin_api::AbortOnFailedAllocation;
///
/// let grown: Vec<u8> = Vec::with_capacity(1 << 20);
/// assert!(grown.capacity() >= 1 << 20);
/// ```
///
/// A `cdylib` has an allocator of its own, so the runner's cannot do this for a plugin.
pub struct AbortOnFailedAllocation;

/// Returns `pointer`, or ends the process reporting `layout` when it is null.
fn served(pointer: *mut u8, layout: Layout) -> *mut u8 {
    if pointer.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    pointer
}

// SAFETY: every method hands its arguments, under the caller's guarantees for them, to the
// system allocator and returns what it returned, or does not return at all.
unsafe impl GlobalAlloc for AbortOnFailedAllocation {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller guarantees `layout` as `GlobalAlloc::alloc` requires.
        served(unsafe { System.alloc(layout) }, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        served(unsafe { System.alloc_zeroed(layout) }, layout)
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `pointer` came from `System` with `layout`; the caller guarantees `new_size`
        // as `GlobalAlloc::realloc` requires.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        // The caller guarantees that `new_size` rounded up to the alignment does not overflow,
        // so this layout exists.
        let wanted = Layout::from_size_align(new_size, layout.align()).unwrap_or(layout);
        served(moved, wanted)
    }
}
