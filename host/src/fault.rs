//! Test builds only: `WASMCNI_FAULT=<kind>:<step>` kills the process at a
//! named step (as a runtime's `kill -9` would), to prove what a kill at
//! that instant leaves: `ipam:<step>` inside a reservation
//! (`tests/ipam.rs`), `step:link-made` right after the kernel made a link
//! (before the host reads its index back) and `step:link-unmarked` between
//! writing that index to the intent log and marking the link
//! (`tests/records.rs`). The per-call faults (`call:K`,
//! `kill:K`) are counted by the capability layer
//! (`caps::injected_fault`). `pause:<step>` stops the process (SIGSTOP)
//! at a named step, or before the first host call of that name
//! (`pause:route.add-rule`), for a test to run a concurrent invocation
//! into the window and then continue it (SIGCONT): races become
//! deterministic. Release builds compile all of it out.

/// Kills the process at once (SIGKILL).
pub(crate) fn kill() {
    #[cfg(debug_assertions)]
    // SAFETY: kill(2) on our own pid; no memory is touched.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Kills the process if `WASMCNI_FAULT` is `<kind>:<step>`.
pub(crate) fn at(kind: &str, step: &str) {
    #[cfg(debug_assertions)]
    if crate::config::get().fault.as_deref().is_some_and(|f| {
        f.strip_prefix(kind)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| r == step)
    }) {
        kill();
    }
    #[cfg(not(debug_assertions))]
    let _ = (kind, step);
}

/// Stops the process (SIGSTOP) the first time it reaches `step`, if
/// `WASMCNI_FAULT` is `pause:<step>`; it goes on when a test sends
/// SIGCONT.
pub(crate) fn pause(step: &str) {
    #[cfg(debug_assertions)]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        static DONE: AtomicBool = AtomicBool::new(false);
        if crate::config::get()
            .fault
            .as_deref()
            .is_some_and(|f| f.strip_prefix("pause:").is_some_and(|r| r == step))
            && !DONE.swap(true, Ordering::SeqCst)
        {
            // SAFETY: kill(2) on our own pid; no memory is touched.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGSTOP);
            }
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = step;
}
