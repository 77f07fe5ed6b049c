//! Resource limits on a plugin's store.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// Caps linear memory and remembers whether the cap was hit, so the error
/// can say so instead of reporting a bare trap.
pub struct Limiter {
    inner: StoreLimits,
    cap: usize,
    /// Bytes of linear memory of all the plugin's memories together.
    total: usize,
    hit: bool,
}

/// The most elements any one table may have (a Rust plugin's function
/// table has a few thousand; each element costs the host memory).
pub const MAX_TABLE_ELEMENTS: usize = 100_000;

impl Limiter {
    /// A limiter with a cap of `cap` bytes on all the plugin's linear
    /// memories together, and [`MAX_TABLE_ELEMENTS`] per table.
    pub fn new(cap: usize) -> Limiter {
        Limiter {
            inner: StoreLimitsBuilder::new()
                .instances(64)
                .tables(64)
                .memories(8)
                .table_elements(MAX_TABLE_ELEMENTS)
                .build(),
            cap,
            total: 0,
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
        let total = self.total.saturating_sub(current).saturating_add(desired);
        if total > self.cap {
            self.hit = true;
            // An error (not `Ok(false)`) traps the guest at once, so a
            // memory bomb cannot retry.
            return Err(wasmtime::Error::msg("memory cap reached"));
        }
        let ok = self.inner.memory_growing(current, desired, maximum)?;
        if ok {
            self.total = total;
        }
        Ok(ok)
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
