//! The evaluator harness: an [`Evaluator`] with policies loaded at [`at_sec(0)`](super::at_sec), a clock the
//! test moves (every timer due runs at its own instant on the way), and the events it produced.

use crate::evaluate::{ActionIntent, EngineConfig, Evaluator, Event};
use crate::input::sample::JobSnapshot;
use crate::policy::compile::compile;
use crate::policy::compile::parse_documents;
use crate::time::Timestamp;

use super::at_sec;

/// An evaluator under test and everything it reported.
pub struct Harness {
    /// The evaluator.
    pub ev: Evaluator,
    /// Every event so far, in order.
    pub events: Vec<Event>,
}

impl Harness {
    /// An evaluator with the default engine settings and `policies` (YAML documents) loaded at `at_sec(0)`.
    pub fn new(policies: &[impl AsRef<str>]) -> Harness {
        Harness::with_config(EngineConfig::default(), policies)
    }

    /// [`Harness::new`] with these engine settings.
    pub fn with_config(config: EngineConfig, policies: &[impl AsRef<str>]) -> Harness {
        Harness { ev: evaluator(config, policies), events: Vec::new() }
    }

    /// Runs every timer due up to and including `at`, each at its instant.
    pub fn advance(&mut self, at: Timestamp) {
        while let Some(next) = self.ev.next_tick().filter(|n| *n <= at) {
            self.ev.tick(next, &mut self.events);
        }
    }

    /// Runs the timers due by `at`, then observes `snapshot` at `at` (a watch event, a report).
    pub fn observe(&mut self, snapshot: JobSnapshot, at: Timestamp) {
        self.advance(at);
        self.ev.observe(snapshot, at, &mut self.events);
    }

    /// The intents issued so far.
    pub fn intents(&self) -> Vec<&ActionIntent> {
        self.events.iter().filter_map(|e| if let Event::Intent(i) = e { Some(i) } else { None }).collect()
    }
}

/// An evaluator with `config` and `policies` (YAML documents, each may hold several) loaded at `at_sec(0)`.
pub fn evaluator(config: EngineConfig, policies: &[impl AsRef<str>]) -> Evaluator {
    let mut ev = Evaluator::new(config);
    let mut events = Vec::new();
    for yaml in policies {
        for d in parse_documents(yaml.as_ref(), "test").unwrap_or_else(|e| panic!("{e}")) {
            let p = compile(&d, ev.scripts()).unwrap_or_else(|e| panic!("{e}"));
            ev.upsert_policy(p, at_sec(0), &mut events);
        }
    }
    ev
}
