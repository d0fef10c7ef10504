//! The floor for any reader of a JSONL stream: `decode-floor FILE` reads the file and decodes every line into a
//! `serde_json::Value`, nothing else. Timed from the outside as a whole process, like `trainwarden replay`.

use std::hint::black_box;

fn main() {
    let path = std::env::args().nth(1).expect("usage: decode-floor FILE");
    let text = std::fs::read_to_string(&path).expect("read the stream");
    let mut lines = 0usize;
    let mut fields = 0usize;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line).expect("valid JSON");
        fields += value.as_object().map_or(0, serde_json::Map::len);
        lines += 1;
    }
    black_box(fields);
    println!("{lines}");
}
