//! The `wasmcni` executable. See the library for everything it does.

/// The static musl build (the installer image) allocates with mimalloc:
/// musl's own malloc is slow for wasmtime's allocation pattern.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let invoked_as = wasmcni::cli::invoked_as();
    populate_hot_text(&invoked_as);
    let code = wasmcni::cli::main(&invoked_as);
    // A plugin that changed the firewall would otherwise wait out an RCU
    // grace period in its exit (the kernel's release of its netfilter
    // socket), and the runtime with it.
    wasmcni_runtime::netlink::nfsock::close_kept_in_background();
    std::process::exit(code);
}

/// The first function of the hot text: `host/hot-symbols.txt` lists it
/// first, then what every warm run executes, then [`wasmcni_hot_text_end`],
/// then what only bridge's run adds, then
/// [`wasmcni_hot_text_bridge_end`].
#[no_mangle]
#[inline(never)]
pub extern "C" fn wasmcni_hot_text_start() -> u32 {
    std::hint::black_box(0x5741_534d)
}

/// The last function of what every run executes (see
/// [`wasmcni_hot_text_start`]).
#[no_mangle]
#[inline(never)]
pub extern "C" fn wasmcni_hot_text_end() -> u32 {
    std::hint::black_box(0x434e_4921)
}

/// The last function of the hot text (see [`wasmcni_hot_text_start`]).
#[no_mangle]
#[inline(never)]
pub extern "C" fn wasmcni_hot_text_bridge_end() -> u32 {
    std::hint::black_box(0x6272_6467)
}

/// Maps the hot text in one system call (`MADV_POPULATE_READ`) instead
/// of a page fault per 64 KiB window as the run reaches it: in this VM a
/// fault costs microseconds, and a warm bridge ADD took about 70 of them
/// in the executable. What every run executes is mapped for every run;
/// what bridge's adds too, unless this is loopback (the smallest run, whose
/// peak RSS it would only add to). Only when the markers enclose a
/// plausible hot range (a build without the ordering file places them
/// anywhere); a kernel without the advice (before 5.14) refuses it, and
/// the run faults the pages in as before.
fn populate_hot_text(invoked_as: &str) {
    const MAX: usize = 8 << 20;
    const PAGE: usize = 4096;
    let start = wasmcni_hot_text_start as *const () as usize;
    let common = wasmcni_hot_text_end as *const () as usize;
    let all = wasmcni_hot_text_bridge_end as *const () as usize;
    let end = if invoked_as == "loopback" || all <= common || all - start > MAX {
        common
    } else {
        all
    };
    if end <= start || end - start > MAX {
        return;
    }
    let first = start & !(PAGE - 1);
    let len = ((end + PAGE - 1) & !(PAGE - 1)) - first;
    if let Some(addr) = std::ptr::NonNull::new(first as *mut std::ffi::c_void) {
        // SAFETY: the range is this executable's own text, mapped for the
        // life of the process; the advice only populates page tables
        // (read access), it changes no contents or protections.
        let _ = unsafe {
            nix::sys::mman::madvise(addr, len, nix::sys::mman::MmapAdvise::MADV_POPULATE_READ)
        };
    }
}
