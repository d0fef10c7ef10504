//! The floor for any reader of a JSONL stream, timed from the outside as a whole process like
//! `trainwarden replay`:
//!
//! - `decode_floor FILE` reads the file and decodes every line into a `serde_json::Value`, nothing else;
//! - `decode_floor --typed FILE` reads it line by line into one reused buffer and decodes every line into a
//!   typed struct that borrows its strings from the line (the compact `trainerStatus` line the peer stream
//!   holds; metric values stay text). One allocation per line, the metrics list: the least a decoder that
//!   keeps every field can do with serde_json.

use std::hint::black_box;
use std::io::BufRead;

use serde::Deserialize;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    time: &'a str,
    #[serde(borrow)]
    job: &'a str,
    #[serde(rename = "trainerStatus", borrow)]
    trainer_status: TrainerStatus<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TrainerStatus<'a> {
    progress_percentage: Option<f64>,
    estimated_remaining_seconds: Option<f64>,
    #[serde(borrow)]
    metrics: Vec<Metric<'a>>,
    #[serde(borrow)]
    last_updated_time: Option<&'a str>,
}

#[derive(Deserialize)]
struct Metric<'a> {
    #[serde(borrow)]
    name: &'a str,
    #[serde(borrow)]
    value: &'a str,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (typed, path) = match args.as_slice() {
        [flag, path] if flag == "--typed" => (true, path),
        [path] => (false, path),
        _ => panic!("usage: decode_floor [--typed] FILE"),
    };
    let (lines, fields) = if typed { typed_floor(path) } else { value_floor(path) };
    black_box(fields);
    println!("{lines}");
}

fn value_floor(path: &str) -> (usize, usize) {
    let text = std::fs::read_to_string(path).expect("read the stream");
    let (mut lines, mut fields) = (0, 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line).expect("valid JSON");
        fields += value.as_object().map_or(0, serde_json::Map::len);
        lines += 1;
    }
    (lines, fields)
}

fn typed_floor(path: &str) -> (usize, usize) {
    let file = std::fs::File::open(path).expect("open the stream");
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut buffer = String::new();
    let (mut lines, mut fields) = (0, 0);
    loop {
        buffer.clear();
        if reader.read_line(&mut buffer).expect("read the stream") == 0 {
            break;
        }
        let line = buffer.trim_end();
        if line.is_empty() {
            continue;
        }
        let l: Line<'_> = serde_json::from_str(line).expect("a compact trainerStatus line");
        let status = &l.trainer_status;
        fields += l.time.len()
            + l.job.len()
            + status.metrics.iter().map(|m| m.name.len() + m.value.len()).sum::<usize>()
            + status.last_updated_time.map_or(0, str::len)
            + status.progress_percentage.is_some() as usize
            + status.estimated_remaining_seconds.is_some() as usize;
        lines += 1;
    }
    (lines, fields)
}
