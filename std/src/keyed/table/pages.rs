//! [`Buckets`]: the memory of a table's buckets, one allocation that starts on a huge page
//! boundary when the table takes at least one, so that the kernel can back it with them
//! (one TLB entry per 2 MiB instead of 512): a check of a key the table holds then finds its
//! bucket without a page walk, which from a cold cache (a busy server's) is one or two
//! misses more on every check.

use core::alloc::Layout;
use core::fmt;
use core::ops::Deref;
use core::ptr::NonNull;

use super::layout::Bucket;

/// A huge page: the x86-64 and AArch64 (4 KiB granule) size of a page-middle-directory
/// entry's page, which Linux's transparent huge pages use.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Buckets of at least this many bytes are aligned to it: a huge page; under miri a small
/// page, so that its checks of the aligned allocation and its release run on a small table.
const ALIGNED_FROM: usize = if cfg!(miri) { 4096 } else { HUGE_PAGE };

// `Buckets` hands out `&[Bucket]` to every thread and drops its buckets on any: sound while
// a bucket is `Send + Sync` (atomics only), which this checks at compile time.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Bucket>();
};

/// Buckets, fixed in number, in one allocation aligned to [`ALIGNED_FROM`] if they take at
/// least that many bytes (else to a bucket): what a `Box<[Bucket]>` is, with an alignment a
/// `Box` of buckets cannot carry to its deallocation. Two words, as a `Box<[Bucket]>` is:
/// the alignment follows from the length.
pub(crate) struct Buckets {
    /// `len` initialised buckets, allocated with `layout(len)`.
    start: NonNull<Bucket>,
    len: usize,
}

// SAFETY: `Buckets` owns its buckets as a `Box<[Bucket]>` would (nothing else points into
// the allocation), and `Bucket` is `Send + Sync` (checked above).
unsafe impl Send for Buckets {}
// SAFETY: as above: shared access hands out `&[Bucket]` only.
unsafe impl Sync for Buckets {}

/// The allocation of `len` buckets (`None` beyond `isize::MAX` bytes, which the geometry's
/// capacity bound rules out).
fn layout(len: usize) -> Option<Layout> {
    let array = Layout::array::<Bucket>(len).ok()?;
    if array.size() >= ALIGNED_FROM {
        array.align_to(ALIGNED_FROM).ok()
    } else {
        Some(array)
    }
}

impl Buckets {
    /// No buckets (no allocation).
    pub(crate) fn empty() -> Buckets {
        Buckets {
            start: NonNull::dangling(),
            len: 0,
        }
    }

    /// `len` buckets, bucket `g` being `init(g)`. Aborts, as `Box` does, if the memory
    /// cannot be had.
    pub(crate) fn new(len: usize, mut init: impl FnMut(usize) -> Bucket) -> Buckets {
        let Some(layout) = layout(len) else {
            // The geometry's capacity bound keeps `len · 64` far below `isize::MAX`.
            unreachable!("{len} buckets: the geometry bounds their size");
        };
        if layout.size() == 0 {
            return Buckets::empty();
        }
        // SAFETY: `layout` has a non-zero size (checked above).
        let raw = unsafe { std::alloc::alloc(layout) }.cast::<Bucket>();
        let Some(start) = NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        // Before the first touch: the hint decides the pages the first writes fault in.
        advise_huge_pages(start.as_ptr(), layout.size());
        for g in 0..len {
            // SAFETY: `g < len`, inside the allocation, which is aligned for `Bucket`; each
            // slot is written once, before any read. A panicking `init` leaks the
            // allocation (the buckets written so far need no drop: atomics only).
            unsafe { start.as_ptr().add(g).write(init(g)) };
        }
        Buckets { start, len }
    }

    /// The bytes allocated: the buckets', exactly.
    pub(crate) fn bytes(&self) -> usize {
        self.len * core::mem::size_of::<Bucket>()
    }
}

impl Deref for Buckets {
    type Target = [Bucket];

    #[inline(always)]
    fn deref(&self) -> &[Bucket] {
        // SAFETY: `start` points at `len` initialised buckets (or dangles, aligned, for
        // none), owned by `self`, which the slice borrows.
        unsafe { core::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl Drop for Buckets {
    fn drop(&mut self) {
        let Some(layout) = layout(self.len).filter(|l| l.size() > 0) else {
            return;
        };
        // SAFETY: the `len` buckets are initialised and dropped once, here; the memory was
        // allocated by the global allocator with `layout(len)`, this `layout`.
        unsafe {
            core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(
                self.start.as_ptr(),
                self.len,
            ));
            std::alloc::dealloc(self.start.as_ptr().cast(), layout);
        }
    }
}

impl fmt::Debug for Buckets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buckets").field("len", &self.len).finish()
    }
}

/// Below this many bytes a range holds no whole huge page worth a system call.
const MIN_BYTES: usize = HUGE_PAGE;

/// Hints that `[start, start + len)`, a fresh allocation not yet touched, will be accessed
/// at random and should use huge pages. Call before initialising the memory.
fn advise_huge_pages<T>(start: *const T, len: usize) {
    if len < MIN_BYTES {
        return;
    }
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        const PAGE: usize = 4096;
        // madvise wants page-aligned bounds: shrink the range to the whole pages in it, so
        // the hint never reaches memory outside the allocation (a no-op for the tables'
        // allocations of a huge page and more, which start on one).
        let begin = (start as usize).next_multiple_of(PAGE);
        let end = (start as usize).saturating_add(len) & !(PAGE - 1);
        if end > begin {
            // SAFETY: MADV_HUGEPAGE changes neither the contents nor the protection of any
            // page, and the range lies inside the caller's allocation. The result is
            // ignored: a refused hint (THP disabled, old kernel) leaves small pages.
            unsafe { libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = start;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Ordering;

    /// Bucket `g`, marked with its index.
    fn bucket(g: usize) -> Bucket {
        Bucket::new(g as u64)
    }

    /// The mark of every fourth bucket, as `init` wrote it.
    fn marks(buckets: &Buckets) -> Vec<u64> {
        buckets
            .iter()
            .step_by(4)
            .map(|b| b.slots[3].ident.load(Ordering::Relaxed))
            .collect()
    }

    #[test]
    fn buckets_of_a_huge_page_and_more_start_on_one() {
        let one = ALIGNED_FROM / 64;
        for len in [one, 3 * one, one + 1] {
            let buckets = Buckets::new(len, bucket);
            assert_eq!(buckets.as_ptr() as usize % ALIGNED_FROM, 0, "{len}");
            assert_eq!((buckets.len(), buckets.bytes()), (len, len * 64));
            let every_fourth: Vec<u64> = (0..len as u64).step_by(4).collect();
            assert_eq!(marks(&buckets), every_fourth);
        }
    }

    #[test]
    fn smaller_tables_take_their_buckets_bytes() {
        let buckets = Buckets::new(100, bucket);
        assert_eq!((buckets.len(), buckets.bytes()), (100, 6_400));
        assert_eq!(marks(&buckets), (0..100).step_by(4).collect::<Vec<u64>>());
        assert_eq!(Buckets::new(0, bucket).len(), 0);
        assert_eq!(Buckets::empty().bytes(), 0);
    }
}
