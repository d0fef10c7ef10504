//! The `annotate` action: one annotation on the TrainJob (the rule's summary unless a value is given).

use kube::ResourceExt;
use trainwarden_core::AnnotateAction;
use trainwarden_core::describe::Notice;

use super::super::{ActionError, Ended, Executor, Record, Target};
use crate::messages::ActionResult;

impl Executor {
    pub(in crate::executor) async fn annotate(
        &self,
        target: &Target<'_>,
        a: &AnnotateAction,
        record: &Record,
    ) -> Result<Ended, ActionError> {
        let summary = target.summary;
        let value = a.value.clone().unwrap_or_else(|| summary.to_string());
        if target.job.annotations().get(&a.key) == Some(&value) {
            return Ok(Ended::new(ActionResult::Unchanged, format!("annotation {} already set", a.key)));
        }
        let [last, intents] = record.annotations();
        self.apply_to_job(target.api, target.job, &[(&a.key, &value), last, intents], None).await?;
        self.publish(&target.reference, &Notice::annotated(&target.by, &a.key, summary)).await;
        Ok(Ended::new(ActionResult::Done, format!("annotation {} set", a.key)))
    }
}
