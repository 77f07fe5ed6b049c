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

/// What `WASMCNI_FAULT` asks for, parsed once: one parser for every kind.
#[cfg(debug_assertions)]
#[derive(Clone, Debug, PartialEq)]
enum Spec {
    /// `<kind>:<step>` (`ipam:…`, `step:…`): kill at that step.
    Step(String),
    /// `pause:<step>`: stop at that step, or before that host call.
    Pause(String),
    /// `call:K`: the K-th host call traps before it acts.
    Trap(u64),
    /// `call:K:error`: the K-th host call fails (EIO) before it acts.
    Error(u64),
    /// `kill:K`: killed right after the K-th host call acted.
    Kill(u64),
}

#[cfg(debug_assertions)]
fn parse(v: &str) -> Option<Spec> {
    if let Some(step) = v.strip_prefix("pause:") {
        return Some(Spec::Pause(step.to_owned()));
    }
    if let Some(k) = v.strip_prefix("kill:") {
        return k.parse().ok().map(Spec::Kill);
    }
    if let Some(rest) = v.strip_prefix("call:") {
        return match rest.strip_suffix(":error") {
            Some(k) => k.parse().ok().map(Spec::Error),
            None => rest.parse().ok().map(Spec::Trap),
        };
    }
    v.contains(':').then(|| Spec::Step(v.to_owned()))
}

#[cfg(debug_assertions)]
fn spec() -> Option<&'static Spec> {
    static SPEC: std::sync::OnceLock<Option<Spec>> = std::sync::OnceLock::new();
    SPEC.get_or_init(|| crate::config::get().fault.as_deref().and_then(parse))
        .as_ref()
}

/// Kills the process if `WASMCNI_FAULT` is `<kind>:<step>`.
pub(crate) fn at(kind: &str, step: &str) {
    #[cfg(debug_assertions)]
    if let Some(Spec::Step(s)) = spec() {
        if s.strip_prefix(kind)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| r == step)
        {
            kill();
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = (kind, step);
}

/// What a test asked of the host call being made ([`at_call`]).
#[cfg_attr(not(debug_assertions), allow(dead_code))]
pub(crate) enum CallFault {
    /// Trap, before it acts (the call's number).
    Trap(u64),
    /// Fail with EIO, before it acts.
    Error,
    /// Kill the process right after it acted.
    KillAfter,
}

/// Counts a host call of the process (a delegate's count too) and says
/// what `WASMCNI_FAULT` (`call:K`, `call:K:error`, `kill:K`) asks of it.
pub(crate) fn at_call() -> Option<CallFault> {
    #[cfg(debug_assertions)]
    {
        use std::sync::atomic::{AtomicU64, Ordering};
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let spec = spec()?;
        let n = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        match *spec {
            Spec::Kill(k) if k == n => Some(CallFault::KillAfter),
            Spec::Error(k) if k == n => Some(CallFault::Error),
            Spec::Trap(k) if k == n => Some(CallFault::Trap(k)),
            _ => None,
        }
    }
    #[cfg(not(debug_assertions))]
    None
}

/// Stops the process (SIGSTOP) the first time it reaches `step`, if
/// `WASMCNI_FAULT` is `pause:<step>`; it goes on when a test sends
/// SIGCONT.
pub(crate) fn pause(step: &str) {
    #[cfg(debug_assertions)]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        static DONE: AtomicBool = AtomicBool::new(false);
        if matches!(spec(), Some(Spec::Pause(s)) if s == step) && !DONE.swap(true, Ordering::SeqCst)
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

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn one_parser_for_every_kind_of_fault() {
        assert_eq!(
            parse("ipam:written"),
            Some(Spec::Step("ipam:written".into()))
        );
        assert_eq!(
            parse("pause:route.add-rule"),
            Some(Spec::Pause("route.add-rule".into()))
        );
        assert_eq!(parse("call:3"), Some(Spec::Trap(3)));
        assert_eq!(parse("call:3:error"), Some(Spec::Error(3)));
        assert_eq!(parse("kill:7"), Some(Spec::Kill(7)));
        assert_eq!(parse("call:x"), None);
        assert_eq!(parse("nonsense"), None);
    }
}
