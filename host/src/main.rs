//! The `wasmcni` executable. See the library for everything it does.

/// The static musl build (the installer image) allocates with mimalloc:
/// musl's own malloc is slow for wasmtime's allocation pattern.
#[cfg(target_env = "musl")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(wasmcni::cli::main());
}
