//! The plugin an author or operator names on the command line of `wasmcni
//! try` and `wasmcni policy suggest`.

use std::path::Path;

use anyhow::anyhow;
use wasmcni_runtime::plugins::{self, Plugin};

/// Finds `spec`: a path ending in `.wasm`, or a plugin name (standard, or
/// in the plugin directory).
pub fn resolve(spec: &str) -> anyhow::Result<Plugin> {
    if spec.ends_with(".wasm") {
        Plugin::from_path(Path::new(spec)).map_err(|e| anyhow!("{e}"))
    } else {
        plugins::find(spec).map_err(|e| anyhow!("{e} (give a path ending in .wasm to try a file)"))
    }
}
