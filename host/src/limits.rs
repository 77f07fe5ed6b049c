//! Resource limits on a plugin's store.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// Caps linear memory and remembers whether the cap was hit, so the error
/// can say so instead of reporting a bare trap.
pub struct Limiter {
    inner: StoreLimits,
    cap: usize,
    hit: bool,
}

impl Limiter {
    /// A limiter with a linear-memory cap of `cap` bytes (all memories of
    /// the component together count one by one against it).
    pub fn new(cap: usize) -> Limiter {
        Limiter {
            inner: StoreLimitsBuilder::new()
                .instances(64)
                .tables(64)
                .memories(8)
                .build(),
            cap,
            hit: false,
        }
    }

    /// Whether the plugin tried to grow a memory past the cap.
    pub fn cap_hit(&self) -> bool {
        self.hit
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.hit = true;
            // An error (not `Ok(false)`) traps the guest at once, so a
            // memory bomb cannot retry.
            return Err(wasmtime::Error::msg("memory cap reached"));
        }
        self.inner.memory_growing(current, desired, maximum)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
