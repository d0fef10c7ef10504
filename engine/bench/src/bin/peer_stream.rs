//! Writes the peer-comparison stream: `peer-stream OUT.jsonl [JOBS] [SAMPLES]` (default 2000 × 500).

use std::io::{BufWriter, Write};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(out) = args.get(1) else {
        eprintln!("usage: peer-stream OUT.jsonl [JOBS] [SAMPLES]");
        std::process::exit(2);
    };
    let number = |i: usize, default: usize| args.get(i).map_or(default, |s| s.parse().expect("a number"));
    let (jobs, samples) = (number(2, 2000), number(3, 500));
    let mut file = BufWriter::new(std::fs::File::create(out).expect("create the stream file"));
    trainwarden_bench::peer_stream(jobs, samples, |line| {
        file.write_all(line.as_bytes()).and_then(|_| file.write_all(b"\n")).expect("write the stream");
    });
    file.flush().expect("write the stream");
    eprintln!("{out}: {} lines ({jobs} jobs × {samples} samples)", jobs * samples);
}
