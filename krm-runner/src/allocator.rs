//! How the runner tunes glibc's allocator: a process that runs one call keeps the heap it
//! frees and fills it ahead of a large input; a server gives freed memory back after large
//! calls. (Plugins share the process's allocator.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// For a process that runs one call and exits: glibc's allocator keeps the heap it frees (no
/// trimming) and serves large buffers from it (no mmap per buffer), so that each parse tree
/// and output of a sequence reuses the pages the last one touched instead of faulting in fresh
/// ones (5% of the CPU of `doseq` and of `fn` at 1,000 objects). A server keeps the defaults,
/// which give memory back.
pub fn keep_freed_heap() {
    const KEPT_FREE: libc::c_int = 256 << 20;
    // SAFETY: mallopt only sets glibc's allocator thresholds; it takes the allocator's lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGEST_FROM_THE_HEAP as libc::c_int);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE);
    }
}

/// The largest allocation [`keep_freed_heap`] has glibc serve from the heap.
const LARGEST_FROM_THE_HEAP: usize = 32 << 20;

/// For a process that runs one call on `input_bytes` of input, after [`keep_freed_heap`]: the
/// heap the call will touch (parse tree, output and their copies: about ten times the input) is
/// filled by one `madvise` instead of a page fault per page, which costs this VM 1.1 µs a page
/// instead of about 2. The block is freed at once and, below [`LARGEST_FROM_THE_HEAP`], stays
/// in the heap for the call's own allocations. A small input touches too little to matter.
pub fn populate_heap_for(input_bytes: usize) {
    const WORTH_IT: usize = 64 << 10;
    const HEAP_PER_INPUT_BYTE: usize = 10;
    const PAGE: usize = 4096;
    if input_bytes < WORTH_IT {
        return;
    }
    let bytes = input_bytes
        .saturating_mul(HEAP_PER_INPUT_BYTE)
        .min(LARGEST_FROM_THE_HEAP - PAGE);
    // SAFETY: a plain allocation, freed below; only whole pages inside it are advised, and
    // MADV_POPULATE_WRITE only faults them in (on kernels before 5.14 it fails, harmlessly).
    unsafe {
        let block = libc::malloc(bytes);
        if block.is_null() {
            return;
        }
        let start = (block as usize).next_multiple_of(PAGE);
        let end = (block as usize + bytes) / PAGE * PAGE;
        if end > start {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            );
        }
        libc::free(block);
    }
}

/// Calls at least this large leave big freed blocks behind in the allocator.
pub const LARGE_CALL_BYTES: usize = 1 << 20;

/// Hands freed memory back to the system, now and once more a moment later. glibc keeps freed
/// blocks in per-thread arenas, so after a few multi-megabyte ResourceLists on different
/// blocking threads an idle runner would hold hundreds of MiB it no longer uses; the second
/// trim takes the answers, which are freed only once they have been sent, after the call.
pub fn release_free_memory() {
    trim();
    static SCHEDULED: AtomicBool = AtomicBool::new(false);
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    let later = std::thread::Builder::new().name("trim".into()).spawn(|| {
        std::thread::sleep(TRIM_AGAIN_AFTER);
        SCHEDULED.store(false, Ordering::Release);
        trim();
    });
    if later.is_err() {
        SCHEDULED.store(false, Ordering::Release);
    }
}

/// How long after a large call its answer has most likely been sent and freed.
const TRIM_AGAIN_AFTER: Duration = Duration::from_secs(1);

fn trim() {
    // SAFETY: malloc_trim only walks glibc's own heap structures.
    unsafe {
        libc::malloc_trim(0);
    }
}
