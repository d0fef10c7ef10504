//! Writes the peer-comparison stream:
//! `peer_stream OUT.jsonl [JOBS] [SAMPLES] [--order sorted|jobs-in-round] [--files N]`
//! (default 2000 × 500, sorted, one file).
//!
//! `--order jobs-in-round` writes each 30 s round's lines in job order instead of time order (up to 29 s back
//! within the round, inside `replay`'s default 5-minute reorder window); `--files N` splits the jobs over N
//! files (job `j` in file `j % N`, named `OUT.<k>.jsonl`), each in the given order, for a replay that merges
//! several inputs. The content is deterministic (each job's generator is seeded from its number; see
//! `trainwarden_bench::Job`): there is no other seed.

use std::io::{BufWriter, Write};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut flag = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        let value = args.get(at + 1).cloned().unwrap_or_else(|| panic!("{name} needs a value"));
        args.drain(at..=at + 1);
        Some(value)
    };
    let order: trainwarden_bench::LineOrder =
        flag("--order").map_or(Ok(trainwarden_bench::LineOrder::Sorted), |o| o.parse()).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2);
        });
    let files: usize = flag("--files").map_or(1, |n| n.parse().expect("--files: a number"));
    let Some(out) = args.first() else {
        eprintln!("usage: peer_stream OUT.jsonl [JOBS] [SAMPLES] [--order sorted|jobs-in-round] [--files N]");
        std::process::exit(2);
    };
    let number = |i: usize, default: usize| args.get(i).map_or(default, |s| s.parse().expect("a number"));
    let (jobs, samples) = (number(1, 2000), number(2, 500));
    let names: Vec<String> = if files <= 1 {
        vec![out.clone()]
    } else {
        let stem = out.strip_suffix(".jsonl").unwrap_or(out);
        (0..files).map(|k| format!("{stem}.{k}.jsonl")).collect()
    };
    let mut writers: Vec<BufWriter<std::fs::File>> = names
        .iter()
        .map(|n| BufWriter::new(std::fs::File::create(n).expect("create the stream file")))
        .collect();
    let count = writers.len();
    trainwarden_bench::peer_stream(jobs, samples, order, |j, line| {
        let file = &mut writers[j % count];
        file.write_all(line.as_bytes()).and_then(|_| file.write_all(b"\n")).expect("write the stream");
    });
    for w in &mut writers {
        w.flush().expect("write the stream");
    }
    eprintln!("{}: {} lines ({jobs} jobs × {samples} samples, {order:?})", names.join(" "), jobs * samples);
}
