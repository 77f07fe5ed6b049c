//! `--then-sleep`: after installing, wait for SIGTERM (the container of a
//! DaemonSet must keep running, and its image has no shell to sleep with).

use anyhow::Context;

/// The signals that end `--then-sleep`.
fn termination_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set
}

/// For `--then-sleep`: blocks SIGTERM and SIGINT before any thread is
/// started (wasmtime compiles on a thread pool), so every thread inherits
/// the mask and the signal waits, pending, for [`wait_for_termination`].
/// As pid 1 of a container, a process-wide signal delivered to a thread
/// with the default action would be discarded, and the pod would only end
/// with SIGKILL after its grace period.
pub(super) fn block_termination() -> anyhow::Result<()> {
    termination_signals()
        .thread_block()
        .context("blocking SIGTERM")
}

/// After installing: waits for SIGTERM or SIGINT (a DaemonSet's container
/// must keep running; the image has no shell to `sleep` with), blocked
/// since [`block_termination`].
pub(super) fn wait_for_termination() -> anyhow::Result<()> {
    println!("installed; waiting for SIGTERM");
    let sig = termination_signals()
        .wait()
        .context("waiting for SIGTERM")?;
    println!("{sig}: exiting");
    Ok(())
}
