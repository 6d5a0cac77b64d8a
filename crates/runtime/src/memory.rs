//! Memory known before it is used: every buffer whose size follows from a request (KV
//! caches, drafter context) is sized here, checked against what the machine can give, and
//! allocated fallibly, so an impossible request is an error naming the byte count, never
//! an abort.

use crate::error::{Result, RuntimeError};

/// Bytes this process can still get: the machine's `MemAvailable` (`/proc/meminfo`), and
/// under an address-space limit (`ulimit -v`) what is left of it (`/proc/self/limits`
/// less `VmSize` of `/proc/self/status`), whichever is smaller; `None` when neither is
/// known.
pub fn available_memory() -> Option<u64> {
    let machine = kib("/proc/meminfo", "MemAvailable:");
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("Max address space"))?;
            line.split_whitespace().nth(3)?.parse::<u64>().ok()
        });
    let left = match (limit, kib("/proc/self/status", "VmSize:")) {
        (Some(l), Some(used)) => Some(l.saturating_sub(used)),
        _ => None,
    };
    match (machine, left) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), or `None` when unknown.
pub fn physical_memory() -> Option<u64> {
    kib("/proc/meminfo", "MemTotal:")
}

/// The byte count of the `kB` figure on the line of `path` that starts with `prefix`
/// (`/proc/meminfo`, `/proc/self/status`), or `None`.
fn kib(path: &str, prefix: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(prefix))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?
        .checked_mul(1024)
}

/// Refuses `bytes` for `what` when it exceeds the memory available.
pub fn check_fits(bytes: u64, what: &str) -> Result<()> {
    let available = available_memory();
    if available.is_some_and(|a| bytes > a) {
        return Err(RuntimeError::Memory {
            what: what.to_string(),
            bytes,
            available,
        });
    }
    Ok(())
}

/// `n` zeroed values (f32, or the F16 of an F16 cache) for `what`, or an error with the
/// byte count when their bytes overflow, exceed the memory available, or the allocation
/// fails.
pub fn zeroed<T: Copy + Default>(n: usize, what: &str) -> Result<Vec<T>> {
    let bytes = (n as u64)
        .checked_mul(std::mem::size_of::<T>() as u64)
        .ok_or_else(|| RuntimeError::Memory {
            what: what.to_string(),
            bytes: u64::MAX,
            available: available_memory(),
        })?;
    check_fits(bytes, what)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| RuntimeError::Memory {
        what: what.to_string(),
        bytes,
        available: available_memory(),
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// What a step allocates besides the buffers its estimate names (task lists, per-thread
/// state), allowed for once per estimate.
pub const STEP_BOOKKEEPING: u64 = 64 << 10;

/// `n` zeroed f32 values for `what`, allocated fallibly but without consulting the
/// system (the hot path's variant of [`zeroed`]: its size was checked before the run).
pub fn try_zeroed(n: usize, what: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| RuntimeError::Memory {
        what: what.to_string(),
        bytes: (n as u64).saturating_mul(4),
        available: None,
    })?;
    v.resize(n, 0.0);
    Ok(v)
}

/// `a × b × …` in u64, `None` on overflow.
pub fn product(factors: &[u64]) -> Option<u64> {
    factors.iter().try_fold(1u64, |acc, &f| acc.checked_mul(f))
}
