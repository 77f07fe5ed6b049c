//! Resource limits of a plugin run: its deadline and memory cap
//! ([`Limits`], from its policy entry and the settings), and the limiter
//! that enforces the cap on its store.

use std::time::Duration;

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use crate::cni_error::{CniError, Code};
use crate::policy;

/// Default wall-clock deadline for one plugin run.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// Default cap on a plugin's linear memory.
pub const DEFAULT_MEMORY_CAP: usize = 64 << 20;

/// Limits for one run.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall-clock deadline.
    pub deadline: Duration,
    /// Linear-memory cap in bytes.
    pub memory_cap: usize,
}

impl Limits {
    /// Defaults, overridden by the plugin's policy entry, overridden by
    /// `WASMCNI_DEADLINE_MS` and `WASMCNI_MEMORY_MB`.
    pub fn resolve(entry: &policy::Entry) -> Result<Limits, CniError> {
        let config = crate::config::get();
        let num = |var: &str| -> Result<Option<u64>, CniError> {
            let value = match var {
                "WASMCNI_DEADLINE_MS" => &config.deadline_ms,
                _ => &config.memory_mb,
            };
            match value {
                None => Ok(None),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(Some)
                    .ok_or_else(|| {
                        CniError::new(
                            Code::InvalidEnv,
                            format!("{var} must be a positive integer, got {v:?}"),
                        )
                    }),
            }
        };
        Ok(Limits {
            deadline: num("WASMCNI_DEADLINE_MS")?
                .or(entry.deadline_ms)
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_DEADLINE),
            memory_cap: num("WASMCNI_MEMORY_MB")?
                .or(entry.memory_mb)
                .map(|m| usize::try_from(m.saturating_mul(1 << 20)).unwrap_or(usize::MAX))
                .unwrap_or(DEFAULT_MEMORY_CAP),
        })
    }
}

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
