//! What the unit tests of rtnetlink (and of the other families) share:
//! a network namespace of the test's own, and `ip` run in it.

use std::process::Command;

/// Runs `f` on a thread of its own in a new network namespace (never
/// the machine's); outside CI, not at all without root.
pub(in crate::netlink) fn in_new_netns(f: Box<dyn FnOnce() + Send>) {
    std::thread::spawn(move || {
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            #[allow(clippy::disallowed_methods)] // CI decides: fail, not skip
            let ci = std::env::var_os("CI").is_some_and(|v| v == "true");
            assert!(!ci, "this test needs root (a network namespace): {e}");
            return;
        }
        f();
    })
    .join()
    .expect("the test thread");
}

/// `ip ARGS`, in the calling thread's namespace (a child forked by a
/// thread is born in the thread's namespace), as another process
/// would: wasmcni does not learn of it.
pub(in crate::netlink) fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {args:?}");
}
