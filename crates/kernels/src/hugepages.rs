//! Asking Linux for 2 MiB pages under the big buffers a decode step
//! streams (the KV pool, repacked weights). With transparent huge pages in
//! `madvise` mode (the default of many distributions) anonymous memory
//! gets 4 KiB pages unless asked: a step that streams hundreds of MiB then
//! walks a page table every 4 KiB, and the hardware prefetcher stops at
//! every page. Advice only: where the kernel refuses, nothing changes.

/// 2 MiB: the huge page size of x86-64 and of 4 KiB-granule arm64.
const HUGE: usize = 2 << 20;

/// Advises huge pages for the whole 2 MiB-aligned pages inside `buf`.
/// Call before the buffer is first written, so that its pages fault in
/// huge (a zeroed allocation is mapped lazily). Returns the bytes
/// advised (0 where nothing was: small buffers, other systems, refusal).
pub fn advise<T>(buf: &mut [T]) -> usize {
    let (start, len) = (buf.as_mut_ptr() as usize, std::mem::size_of_val(buf));
    let first = start.next_multiple_of(HUGE);
    let end = (start + len) / HUGE * HUGE;
    if end <= first {
        return 0;
    }
    if madvise_huge(first, end - first) {
        end - first
    } else {
        0
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn madvise_huge(addr: usize, len: usize) -> bool {
    // SAFETY: `addr..addr + len` lies inside a live allocation the caller
    // borrows mutably; MADV_HUGEPAGE changes how its pages are backed, not
    // their contents or its mapping.
    unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_HUGEPAGE) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn madvise_huge(_addr: usize, _len: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_whole_huge_pages_inside_the_buffer_are_advised() {
        let mut small = vec![0u8; 4096];
        assert_eq!(super::advise(&mut small), 0);
        let mut big = vec![0u8; 9 << 20];
        let n = super::advise(&mut big);
        // 9 MiB hold at least 3 whole aligned 2 MiB pages, at most 4; a
        // kernel without THP refuses them all.
        assert!(
            n == 0 || (3 * super::HUGE..=4 * super::HUGE).contains(&n),
            "{n}"
        );
        assert_eq!(n % super::HUGE, 0);
    }
}
