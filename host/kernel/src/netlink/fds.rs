//! Closing a forked child's descriptors, all but those it keeps.

/// Closes every descriptor of the process but `keep` (sorted, no
/// repeats), with `close_range` calls only: for a forked child of a
/// process with other threads, which may not allocate or lock.
pub(super) fn close_all_but(keep: &[u32]) {
    let mut from = 0u32;
    for &fd in keep {
        if fd > from {
            // SAFETY: closes descriptors; no memory is touched.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd.saturating_add(1);
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32) };
}
