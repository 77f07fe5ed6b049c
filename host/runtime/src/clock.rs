//! The plugin's deadline: the timer that stops a plugin running wasm code
//! (`arm_deadline`), and `wasi:clocks/monotonic-clock` with the deadline
//! built in.
//!
//! The deadline is an epoch interruption: it stops a plugin that runs wasm
//! code, not one blocked in the host. A plugin could subscribe to a clock
//! far in the future and block on it, outliving its deadline with its
//! changes in place. So every clock subscription ends no later than just
//! after the deadline; the plugin then resumes, hits the epoch check, and
//! traps — and a failed ADD is undone as for any other trap.
//!
//! The subscriptions are plain sleeps on the calling thread, not Tokio
//! timers: the plugin runs on a current-thread runtime that is entered but
//! not driven (a driven or multi-threaded one costs every call start-up
//! time), and a Tokio timer on it would never fire. A plugin has nothing
//! else to wait for (its stdin and stdout are in memory), so polling a
//! clock together with streams simply waits for the clock.

use std::time::{Duration, Instant};

use wasmtime::component::{HasData, Resource};
use wasmtime::Engine;
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::{
    self, Duration as WasiDuration, Instant as WasiInstant,
};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi_io::poll::{subscribe, Pollable};

/// How long after the deadline a clamped subscription fires, so the epoch
/// has certainly advanced when the plugin resumes.
const GRACE: Duration = Duration::from_millis(10);

/// wasmtime-wasi's monotonic clock, with subscriptions clamped to the
/// deadline.
pub struct DeadlineClock<'a> {
    /// The clock itself.
    pub inner: WasiClocksCtxView<'a>,
    /// When the plugin's deadline passes.
    pub deadline: Instant,
}

/// [`HasData`] marker for [`DeadlineClock`].
pub struct HasDeadlineClock;

impl HasData for HasDeadlineClock {
    type Data<'a> = DeadlineClock<'a>;
}

/// A clock subscription: ready once `until` has passed.
struct Sleep {
    until: Instant,
    /// The plugin's deadline.
    deadline: Instant,
}

#[async_trait::async_trait]
impl Pollable for Sleep {
    async fn ready(&mut self) {
        let now = Instant::now();
        if self.until > now {
            std::thread::sleep(self.until - now);
        }
        // Past the deadline, the epoch has advanced before the plugin
        // resumes, however late the timer's signal is on a loaded machine:
        // it traps at its next check instead of running on (a plugin that
        // exits right after its sleep would otherwise end with success).
        if Instant::now() >= self.deadline {
            expire_deadline();
        }
    }
}

impl DeadlineClock<'_> {
    /// `nanos`, or less: no later than [`GRACE`] after the deadline.
    fn clamp(&self, nanos: u64) -> u64 {
        let left = self
            .deadline
            .saturating_duration_since(Instant::now())
            .saturating_add(GRACE);
        nanos.min(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
    }

    fn sleep(&mut self, nanos: u64) -> wasmtime::Result<Resource<DynPollable>> {
        let until = Instant::now() + Duration::from_nanos(self.clamp(nanos));
        let r = self.inner.table.push(Sleep {
            until,
            deadline: self.deadline,
        })?;
        subscribe(self.inner.table, r)
    }
}

impl monotonic_clock::Host for DeadlineClock<'_> {
    fn now(&mut self) -> wasmtime::Result<WasiInstant> {
        self.inner.now()
    }

    fn resolution(&mut self) -> wasmtime::Result<WasiInstant> {
        self.inner.resolution()
    }

    fn subscribe_instant(&mut self, when: WasiInstant) -> wasmtime::Result<Resource<DynPollable>> {
        let now = self.inner.now()?;
        self.sleep(when.saturating_sub(now))
    }

    fn subscribe_duration(
        &mut self,
        duration: WasiDuration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.sleep(duration)
    }
}

/// The engine whose epoch the deadline timer advances.
static DEADLINE_ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();

/// Whether the deadline armed for [`DEADLINE_ENGINE`] has passed (its
/// timer fired, or a clock wait reached it): a store of that engine made
/// after that must trap at once, since its epoch deadline counts from the
/// epoch the timer already advanced.
static PASSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the deadline armed for `engine` ([`arm_deadline`]) has passed.
pub(crate) fn deadline_passed(engine: &Engine) -> bool {
    PASSED.load(std::sync::atomic::Ordering::SeqCst)
        && DEADLINE_ENGINE
            .get()
            .is_some_and(|e| Engine::same(e, engine))
}

/// The deadline has passed: advance the epoch now (what the timer's
/// signal does), so the plugin traps at its next epoch check.
pub(crate) fn expire_deadline() {
    PASSED.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(engine) = DEADLINE_ENGINE.get() {
        engine.increment_epoch();
    }
}

extern "C" fn on_deadline(_: libc::c_int) {
    // Signal-safe: an atomic store, an atomic load, then an atomic
    // increment (wasmtime documents `increment_epoch` as signal-safe).
    PASSED.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some(engine) = DEADLINE_ENGINE.get() {
        engine.increment_epoch();
    }
}

/// Makes the plugin trap once `deadline` has passed: a one-shot SIGALRM
/// timer advances the engine's epoch. (A timer thread would do the same,
/// but creating a thread costs every call ~0.1 ms; the handler restarts
/// interrupted system calls, so host calls are not disturbed.) Falls back
/// to a thread if the process already armed the timer for another engine.
pub(crate) fn arm_deadline(engine: &Engine, deadline: Duration) {
    let ours = DEADLINE_ENGINE.get_or_init(|| engine.clone());
    if Engine::same(ours, engine) {
        PASSED.store(false, std::sync::atomic::Ordering::SeqCst);
    }
    let armed = Engine::same(ours, engine) && {
        // SAFETY: installs a handler that only touches atomics, and arms a
        // one-shot timer; both calls take pointers to initialised locals.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_deadline as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            let timer = libc::itimerval {
                it_interval: libc::timeval {
                    tv_sec: 0,
                    tv_usec: 0,
                },
                it_value: libc::timeval {
                    tv_sec: deadline.as_secs() as _,
                    tv_usec: deadline.subsec_micros() as _,
                },
            };
            libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()) == 0
                && libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) == 0
        }
    };
    if !armed {
        let ticker = engine.weak();
        std::thread::spawn(move || {
            std::thread::sleep(deadline);
            if let Some(e) = ticker.upgrade() {
                e.increment_epoch();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::component::ResourceTable;
    use wasmtime_wasi::clocks::WasiClocksCtx;

    #[test]
    fn subscriptions_end_by_the_deadline() {
        let mut ctx = WasiClocksCtx::default();
        let mut table = ResourceTable::new();
        let clock = DeadlineClock {
            inner: WasiClocksCtxView {
                ctx: &mut ctx,
                table: &mut table,
            },
            deadline: Instant::now() + Duration::from_millis(100),
        };
        let day = 86_400_000_000_000;
        assert!(clock.clamp(day) <= 110_000_000);
        assert_eq!(clock.clamp(5), 5);
        let past = DeadlineClock {
            deadline: Instant::now() - Duration::from_secs(1),
            ..clock
        };
        assert!(past.clamp(day) <= GRACE.as_nanos() as u64);
    }
}
