//! The throwaway sandbox `wasmcni demo` and `wasmcni try` run plugins in:
//! the process's own network and mount namespaces, so nothing it does
//! reaches the machine (its network namespace plays the node, and what it
//! mounts stays in it), and the containers' network namespaces, made
//! inside it. When the process ends, they are gone.

use std::fs;
use std::path::Path;

use anyhow::Context;
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};

/// Enters the sandbox: moves the process into new network and mount
/// namespaces, and makes its mounts private to it.
pub(crate) fn enter() -> anyhow::Result<()> {
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS).context(
        "entering a sandbox (new network and mount namespaces) needs root or CAP_SYS_ADMIN",
    )?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making mounts private in the sandbox")?;
    Ok(())
}

/// Creates a network namespace pinned at `path` (a bind mount, as
/// `ip netns add` does): a container of `wasmcni demo` or `wasmcni try`.
pub(crate) fn make_netns(path: &Path) -> anyhow::Result<()> {
    fs::File::create(path)?;
    let p = path.to_owned();
    std::thread::spawn(move || -> anyhow::Result<()> {
        unshare(CloneFlags::CLONE_NEWNET)?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &p,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )?;
        Ok(())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("netns thread panicked"))??;
    Ok(())
}
