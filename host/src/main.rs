//! The `wasmcni` executable. See the library for everything it does.

fn main() {
    std::process::exit(wasmcni::cli::main());
}
