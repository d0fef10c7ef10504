//! Shared pieces of the benchmarks: a deterministic noise source, the progress streams they replay, and the
//! process's resident memory as the OS reports it.

use std::fmt::Write as _;

/// xorshift64: deterministic, so every run of every engine sees the same stream.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly standard normal (Irwin–Hall with 12 terms: mean 0, variance 1).
    pub fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.uniform()).sum::<f64>() - 6.0
    }
}

/// The shape of one job's loss curve in the peer stream. The job's name starts with it, so a report can say
/// which kind of job two engines disagree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Curve {
    /// Converges within the run, then flat with noise.
    Plateau,
    /// Still improving at the end of the run.
    Learning,
    /// Improves, then the loss grows exponentially.
    Diverging,
    /// Learning, then NaN from some step on (a diverged fp16 run).
    Nan,
    /// A plateau with isolated NaN steps (overflow steps a loss scaler skips).
    NanSpikes,
}

impl Curve {
    pub fn of_job(j: usize) -> Curve {
        match j % 20 {
            0..8 => Curve::Plateau,
            8..13 => Curve::Learning,
            13..16 => Curve::Diverging,
            16..18 => Curve::Nan,
            _ => Curve::NanSpikes,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Curve::Plateau => "plateau",
            Curve::Learning => "learning",
            Curve::Diverging => "diverging",
            Curve::Nan => "nan",
            Curve::NanSpikes => "nanspikes",
        }
    }
}

/// One job's curve parameters, drawn once.
struct Job {
    name: String,
    curve: Curve,
    start: f64,
    floor: f64,
    tau: f64,
    noise: f64,
    /// Divergence or NaN onset.
    onset: usize,
    rng: Rng,
}

impl Job {
    fn new(j: usize) -> Job {
        let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15 ^ (j as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
        let curve = Curve::of_job(j);
        let tau = match curve {
            Curve::Learning | Curve::Nan => 400.0 + 400.0 * rng.uniform(),
            _ => 25.0 + 60.0 * rng.uniform(),
        };
        Job {
            name: format!("peers/{}-{j:04}", curve.name()),
            curve,
            start: 1.5 + 1.5 * rng.uniform(),
            floor: 0.3 + 0.6 * rng.uniform(),
            tau,
            noise: 0.0003 + 0.0027 * rng.uniform(),
            onset: 150 + (rng.uniform() * 200.0) as usize,
            rng,
        }
    }

    fn loss(&mut self, i: usize) -> f64 {
        let clean = self.start * (-(i as f64) / self.tau).exp() + self.floor;
        let noisy = clean + self.noise * self.rng.normal();
        match self.curve {
            Curve::Diverging if i >= self.onset => {
                noisy + 0.05 * (((i - self.onset) as f64 / 15.0).exp() - 1.0)
            }
            Curve::Nan if i >= self.onset => f64::NAN,
            Curve::NanSpikes if self.rng.uniform() < 0.02 => f64::NAN,
            _ => noisy,
        }
    }
}

/// The order of the lines within each 30 s round of the peer stream. Job `j` reports at second `j % 30` of
/// each round either way, and each job's values come from its own generator, so both orders hold the same
/// lines; a time-ordered merge of either (ties in line order) is the same sequence of records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineOrder {
    /// In time order, as a recorder that writes what it sees gives (jobs of one second in job order).
    Sorted,
    /// In job order within each round, times going back up to 29 s: as a fleet export, per-job logs
    /// concatenated round by round, or several recorders merged by line give.
    JobsInRound,
}

impl std::str::FromStr for LineOrder {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sorted" => Ok(LineOrder::Sorted),
            "jobs-in-round" => Ok(LineOrder::JobsInRound),
            _ => Err(format!("line order {s:?}: expected sorted or jobs-in-round")),
        }
    }
}

/// The stream of the peer comparison: `jobs` jobs × `samples` compact `trainerStatus` lines, 30 s apart, in
/// the shape the HF callback reports (loss, learning rate, gradient norm, step counters), each round's lines
/// in `order`. Metric values are written in shortest round-trip form, so every reader sees the same
/// doubles. `line` gets the job's number with each line (to split the stream into files by job).
pub fn peer_stream(jobs: usize, samples: usize, order: LineOrder, mut line: impl FnMut(usize, &str)) {
    let start = 1_795_798_800i64; // 2026-11-27T17:00:00Z
    let mut all: Vec<Job> = (0..jobs).map(Job::new).collect();
    let total_steps = samples * 10;
    let mut buf = String::with_capacity(512);
    // Job j reports at second j % 30 of each 30 s round.
    let order: Vec<usize> = match order {
        LineOrder::Sorted => (0..30).flat_map(|second| (second..jobs).step_by(30)).collect(),
        LineOrder::JobsInRound => (0..jobs).collect(),
    };
    for i in 0..samples {
        for &j in &order {
            let job = &mut all[j];
            let time =
                jiff::Timestamp::from_second(start + i as i64 * 30 + (j % 30) as i64).expect("in range");
            let loss = job.loss(i);
            let loss = if loss.is_nan() { "nan".to_string() } else { format!("{loss}") };
            let step = i * 10;
            let lr = 3e-5 * (1.0 - i as f64 / samples as f64);
            let grad_norm = 0.5 + job.rng.uniform();
            buf.clear();
            write!(
                buf,
                r#"{{"time":"{time}","job":"{}","trainerStatus":{{"progressPercentage":{},"estimatedRemainingSeconds":{},"metrics":[{{"name":"loss","value":"{loss}"}},{{"name":"learning_rate","value":"{lr}"}},{{"name":"grad_norm","value":"{grad_norm}"}},{{"name":"current_step","value":"{step}"}},{{"name":"total_steps","value":"{total_steps}"}}],"lastUpdatedTime":"{time}"}}}}"#,
                job.name,
                100 * step / total_steps,
                (total_steps - step) * 3,
            )
            .expect("writing to a String");
            line(j, &buf);
        }
    }
}

/// One compact line in the HF `KubeflowCallback` shape with 8 metrics besides the step and epoch counters (the
/// shape of the core replay bench): job `j`'s `i`-th report of `samples`, 30 s apart.
pub fn hf_line(buf: &mut String, rng: &mut Rng, j: usize, i: usize, samples: usize) {
    let start = 1_795_798_800i64; // 2026-11-27T17:00:00Z
    let time = jiff::Timestamp::from_second(start + i as i64 * 30 + (j % 30) as i64).expect("in range");
    let (step, total) = (i * 10, samples * 10);
    let loss = 2.5 * (-(i as f64) / 800.0).exp() + 0.8 + 0.0002 * rng.normal();
    buf.clear();
    write!(
        buf,
        r#"{{"time":"{time}","job":"scale/job-{j:05}","trainerStatus":{{"progressPercentage":{},"estimatedRemainingSeconds":{},"metrics":[{{"name":"loss","value":"{loss:.6}"}},{{"name":"grad_norm","value":"{:.4}"}},{{"name":"learning_rate","value":"{:.4e}"}},{{"name":"eval_loss","value":"{:.6}"}},{{"name":"eval_accuracy","value":"{:.4}"}},{{"name":"train_samples_per_second","value":"{:.2}"}},{{"name":"train_loss","value":"{:.6}"}},{{"name":"total_flos","value":"{:.4e}"}},{{"name":"epoch","value":"{:.3}"}},{{"name":"current_step","value":"{step}"}},{{"name":"total_steps","value":"{total}"}}],"lastUpdatedTime":"{time}"}}}}"#,
        (100 * step / total).min(99),
        (total - step) * 3,
        1.5 + 0.2 * rng.normal(),
        3e-5 * (1.0 - i as f64 / samples as f64) + 1e-9,
        loss + 0.05,
        0.6 + 0.01 * rng.normal(),
        28.0 + rng.normal(),
        loss + 0.1,
        1.0e15 * (i as f64 + 1.0),
        i as f64 / 600.0,
    )
    .expect("writing to a String");
}

/// `VmHWM` (peak resident set) and `VmRSS` of this process in bytes, from `/proc/self/status`.
pub fn rss_bytes() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|rest| {
            rest.trim().strip_suffix("kB").and_then(|n| n.trim().parse::<u64>().ok()).map(|kb| kb * 1024)
        })
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_stream_is_deterministic_and_parses() {
        let mut first = Vec::new();
        peer_stream(40, 30, LineOrder::Sorted, |_, l| first.push(l.to_string()));
        let mut second = Vec::new();
        peer_stream(40, 30, LineOrder::Sorted, |_, l| second.push(l.to_string()));
        assert_eq!(first, second);
        // In job order within each round: the same lines, each round's in another order.
        let mut by_job = Vec::new();
        peer_stream(40, 30, LineOrder::JobsInRound, |_, l| by_job.push(l.to_string()));
        assert_ne!(by_job, first);
        for (a, b) in first.chunks(40).zip(by_job.chunks(40)) {
            let (mut a, mut b) = (a.to_vec(), b.to_vec());
            a.sort();
            b.sort();
            assert_eq!(a, b);
        }
        assert_eq!(first.len(), 1200);
        for (i, l) in first.iter().enumerate() {
            trainwarden_core::parse_line(l, "peers", i + 1, None).expect("a valid compact line");
        }
        assert!(first.iter().any(|l| l.contains(r#""value":"nan""#)));
    }
}
