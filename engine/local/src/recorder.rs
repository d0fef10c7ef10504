//! The run as a stream `trainwarden replay` reads (compact lines, see `trainwarden_core::stream`).
//!
//! The driver feeds the evaluator exactly the records it writes, each parsed back from its own line with
//! the stream parser, so replaying the file repeats the run's evaluation record for record: same samples,
//! same times, same timer ticks (those follow from the first record's time and `--eval-interval`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use trainwarden_core::StreamRecord;
use trainwarden_core::{JobKey, JobPhase, Timestamp};

/// The first line: the job starts running, with its labels and size.
pub fn start_line(
    time: Timestamp,
    job: &JobKey,
    labels: &BTreeMap<String, String>,
    gpus: Option<f64>,
) -> String {
    let mut line = base(time, job);
    line.insert("phase".into(), "Running".into());
    line.insert("labels".into(), json!(labels));
    if let Some(g) = gpus {
        line.insert("gpus".into(), json!(g));
    }
    Value::Object(line).to_string()
}

/// A progress report, as the endpoint stored it.
pub fn update_line(time: Timestamp, job: &JobKey, trainer_status: &Value) -> String {
    let mut line = base(time, job);
    line.insert("trainerStatus".into(), trainer_status.clone());
    Value::Object(line).to_string()
}

/// The last line: how the job ended (`None`: time passed, the job did not finish — an interruption).
pub fn end_line(time: Timestamp, job: &JobKey, phase: Option<JobPhase>) -> String {
    let mut line = base(time, job);
    if let Some(phase) = phase {
        let name = match phase {
            JobPhase::Running => "Running",
            JobPhase::Suspended => "Suspended",
            JobPhase::Complete => "Complete",
            JobPhase::Failed => "Failed",
        };
        line.insert("phase".into(), name.into());
    }
    Value::Object(line).to_string()
}

fn base(time: Timestamp, job: &JobKey) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("time".into(), time.to_string().into());
    m.insert("job".into(), job.to_string().into());
    m
}

/// Writes lines (flushed one by one, so a killed run keeps what it saw) and turns each into the record the
/// evaluator gets.
pub struct Recorder {
    file: Option<(PathBuf, BufWriter<File>)>,
    lines: usize,
    previous: Option<Timestamp>,
}

impl Recorder {
    /// `path`: where to write, or `None` to only parse. `header` lines are written as `#` comments.
    pub fn create(path: Option<&Path>, header: &[String]) -> Result<Recorder, String> {
        let mut recorder = Recorder { file: None, lines: 0, previous: None };
        if let Some(path) = path {
            let file = File::create(path).map_err(|e| format!("--record {}: {e}", path.display()))?;
            recorder.file = Some((path.to_path_buf(), BufWriter::new(file)));
            for h in header {
                recorder.write(&format!("# {h}"))?;
            }
        }
        Ok(recorder)
    }

    /// The file being written, if the run is recorded (`--record`).
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|(p, _)| p.as_path())
    }

    fn write(&mut self, line: &str) -> Result<(), String> {
        self.lines += 1;
        if let Some((path, out)) = &mut self.file {
            writeln!(out, "{line}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Records `line` and returns it parsed, exactly as `trainwarden replay` will parse it.
    pub fn record(&mut self, line: &str) -> Result<StreamRecord, String> {
        self.write(line)?;
        let source = self.path().map_or_else(|| "watch".to_string(), |p| p.display().to_string());
        let record = trainwarden_core::parse_line(line, &source, self.lines, self.previous)
            .map_err(|e| e.to_string())?;
        self.previous = Some(record.time());
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_as_stream_records() {
        let job = JobKey::new("team", "train");
        let t: Timestamp = "2026-11-30T10:00:00.123Z".parse().unwrap();
        let mut r = Recorder::create(None, &[]).unwrap();
        let labels = BTreeMap::from([("team".to_string(), "fraud".to_string())]);
        let StreamRecord::Update(u) = r.record(&start_line(t, &job, &labels, Some(2.0))).unwrap() else {
            panic!()
        };
        assert_eq!(
            (u.time, u.phase, u.gpus, u.labels),
            (t, Some(JobPhase::Running), Some(2.0), Some(labels))
        );
        let status = json!({"progressPercentage": 5, "metrics": [{"name": "loss", "value": "nan"}], "lastUpdatedTime": "2026-11-30T10:00:00Z"});
        let StreamRecord::Update(u) = r.record(&update_line(t, &job, &status)).unwrap() else { panic!() };
        assert!(u.sample.unwrap().metric("loss").unwrap().is_nan());
        let StreamRecord::Update(u) = r.record(&end_line(t, &job, None)).unwrap() else { panic!() };
        assert_eq!((u.sample, u.phase), (None, None));
    }
}
