//! A ProgressPolicyException appeared, changed or was deleted. An exception that reads is honoured (the
//! evaluator holds the rules it names); one that does not withdraws the version before and is listed as
//! invalid in the status of the policies it names. Every job's verdict may change.

use tracing::{info, warn};
use trainwarden_core::{ExceptionRef, Timestamp};

use super::Brain;
use crate::messages::ExceptionInput;
use crate::metrics::InvalidInput;

impl Brain {
    /// An exception appeared or changed (compiled by the source, or why it cannot be).
    pub(super) fn on_exception(&mut self, input: ExceptionInput, now: Timestamp) {
        match input.compiled {
            Ok(exception) => {
                self.invalid_exceptions.remove(&input.key);
                info!(exception = %input.key, expires = %exception.expires, "exception applied");
                self.evaluator.upsert_exception(exception, now, &mut self.events);
                self.verdicts.touch_all();
            }
            Err(message) => {
                // An edit that broke it withdraws the version before: what cannot be read is not honoured.
                warn!(exception = %input.key, error = %message, "invalid exception: not honoured");
                self.metrics.invalid(InvalidInput::Exception);
                self.evaluator.remove_exception(&input.key, now, &mut self.events);
                self.invalid_exceptions.insert(input.key, (message, input.policy_names));
                self.verdicts.touch_all();
            }
        }
    }

    /// An exception was deleted: what it held is released.
    pub(super) fn on_exception_gone(&mut self, key: ExceptionRef, now: Timestamp) {
        info!(exception = %key, "exception deleted");
        self.invalid_exceptions.remove(&key);
        self.evaluator.remove_exception(&key, now, &mut self.events);
        self.verdicts.touch_all();
    }
}
