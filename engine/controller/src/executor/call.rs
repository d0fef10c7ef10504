//! One API call as the executor makes it: only while this replica leads (checked before every attempt,
//! so a Lease lost in the middle of an action stops its next write), under a deadline, retried with
//! backoff while the failure is transient, counted by operation.

use std::future::Future;
use std::time::Duration;

use tracing::debug;

use super::Executor;
use crate::metrics::ApiOperation;

/// A failure of one API call.
#[derive(Debug)]
pub(crate) enum CallError {
    /// This replica stopped leading before the call was made.
    NotLeader,
    Timeout,
    Api(kube::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NotLeader => write!(f, "this replica is no longer the leader"),
            CallError::Timeout => write!(f, "the API server did not answer in time"),
            CallError::Api(kube::Error::Api(s)) => write!(f, "{} ({})", s.message, s.code),
            CallError::Api(e) => write!(f, "{e}"),
        }
    }
}

impl CallError {
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            CallError::NotLeader => false,
            CallError::Timeout => true,
            CallError::Api(kube::Error::Api(s)) => s.code == 409 || s.code == 429 || s.code >= 500,
            CallError::Api(_) => true,
        }
    }

    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, CallError::Api(kube::Error::Api(s)) if s.code == 404)
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::NotLeader | CallError::Timeout => None,
            CallError::Api(e) => Some(e),
        }
    }
}

impl Executor {
    pub(super) async fn call<T, F>(&self, operation: ApiOperation, f: impl Fn() -> F) -> Result<T, CallError>
    where
        F: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            if !self.leader.is_leader() {
                return Err(CallError::NotLeader);
            }
            attempt += 1;
            self.metrics.api_request(operation);
            let started = std::time::Instant::now();
            let answer = tokio::time::timeout(self.timeout, f()).await;
            self.metrics.api_request_took(operation, started.elapsed());
            let result = match answer {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => CallError::Api(e),
                Err(_) => CallError::Timeout,
            };
            if !result.is_not_found() {
                self.metrics.api_error(operation);
            }
            if !result.is_transient() || attempt >= 4 {
                return Err(result);
            }
            debug!(operation = operation.as_str(), attempt, error = %result, "retrying");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }
}
