//! Byte searches, with SSE2 on x86_64.
//!
//! memchr's own functions choose between SSE2 and AVX2 by asking the CPU at their first call:
//! a dozen `CPUID` instructions, each an exit to the hypervisor on a VM (1.8 µs on the
//! project's), which come to 1% of a 10-object `krm-runner fn` call. Every x86_64 CPU has SSE2,
//! so its searchers need no question; other architectures use memchr's own functions.

/// The first `needle` in `haystack`.
pub(crate) fn find(needle: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(searcher) = memchr::arch::x86_64::sse2::memchr::One::new(needle) {
        return searcher.find(haystack);
    }
    memchr::memchr(needle, haystack)
}

/// The first `a` or `b` in `haystack`.
pub(crate) fn find2(a: u8, b: u8, haystack: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if let Some(searcher) = memchr::arch::x86_64::sse2::memchr::Two::new(a, b) {
        return searcher.find(haystack);
    }
    memchr::memchr2(a, b, haystack)
}

/// Every position of `needle` in `haystack`, in order.
pub(crate) fn positions(needle: u8, haystack: &[u8]) -> impl Iterator<Item = usize> + '_ {
    each_after(haystack, move |rest| find(needle, rest))
}

/// Every position of `a` or `b` in `haystack`, in order.
pub(crate) fn positions2(a: u8, b: u8, haystack: &[u8]) -> impl Iterator<Item = usize> + '_ {
    each_after(haystack, move |rest| find2(a, b, rest))
}

fn each_after<'h>(
    haystack: &'h [u8],
    find: impl Fn(&[u8]) -> Option<usize> + 'h,
) -> impl Iterator<Item = usize> + 'h {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = from + find(&haystack[from..])?;
        from = at + 1;
        Some(at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_memchrs() {
        // Longer than a vector, with needles at its edges and inside.
        let text = b"a:b #c\n:: ##\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx:#\n";
        assert_eq!(
            positions(b'\n', text).collect::<Vec<_>>(),
            memchr::memchr_iter(b'\n', text).collect::<Vec<_>>()
        );
        assert_eq!(
            positions2(b':', b'#', text).collect::<Vec<_>>(),
            memchr::memchr2_iter(b':', b'#', text).collect::<Vec<_>>()
        );
        assert_eq!(find(b'\r', text), None);
        assert_eq!(positions(b'\r', b"").count(), 0);
    }
}
