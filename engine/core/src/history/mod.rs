//! What the engine remembers between samples: each metric's bounded history ([`metric_series`]), a job's
//! history over all its metrics ([`job_series`]), its GPUs' readings ([`gpu_series`]), and the per-job view ([`job`]) that detectors, scripts
//! and the evaluator read.

pub(crate) mod checkpoint;
pub(crate) mod gpu_series;
pub(crate) mod job;
pub(crate) mod job_series;
pub(crate) mod metric_series;

/// FNV-1a, 64-bit: a hash that is the same in every process and build (checkpoints compare hashes written
/// by another replica).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests;
