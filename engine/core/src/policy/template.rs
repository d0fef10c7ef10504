//! Message templates for notifications: `{{field}}` placeholders over a small, fixed set of fields.
//!
//! Templates are parsed when a policy is validated ([`crate::policy::compile`]), so an unknown field or an unclosed
//! `{{` is a policy validation error with its field path, never a runtime surprise. Rendering is pure and
//! cannot fail: the caller supplies every field's text through [`FieldValues`].
//!
//! Syntax: literal text with `{{ name }}` placeholders (spaces inside the braces are optional). `{{` always
//! opens a placeholder; there is no escaping, no logic and no loops. A notification groups alerts, so there
//! are two scopes:
//!
//! * the **group** scope (Slack `title`, email `subject`) sees only fields that describe the whole group;
//! * the **alert** scope (Slack and email `text`) is rendered once per alert and sees every field.
//!
//! Where a group field has several values (a group of several jobs), they are joined with `, `.
//!
//! This module knows nothing of channels, I/O or time; it only parses and substitutes.

use std::fmt;

/// Where a template is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Once per notification (titles, subjects).
    Group,
    /// Once per alert in the notification (message bodies).
    Alert,
}

/// A template field. `FIELDS` documents each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `firing` or `resolved` (group).
    Status,
    /// The receiver's name (group).
    Receiver,
    /// The policy, `namespace/name` or `name` (group).
    Policy,
    /// The TrainJob, `namespace/name` (group).
    Job,
    /// The TrainJob's namespace (group).
    Namespace,
    /// The TrainJob's name (group).
    JobName,
    /// The rules in the notification, `, `-joined (group).
    Rules,
    /// How many alerts the notification carries (group).
    Count,
    /// The rule's name.
    Rule,
    /// `Audit` or `Enforce`.
    Mode,
    /// Why the rule fired, one sentence.
    Summary,
    /// The values behind it, `name=value, …`.
    Values,
    /// The rule's other actions: `suspended the TrainJob` (Enforce, once performed; `suspending …` before the
    /// result is known) or `would …` (Audit).
    Actions,
    /// How to resume a job the firing stopped and how to exempt it (`kubectl` commands); empty otherwise.
    Undo,
    /// The notify action's `message`.
    Message,
    /// When the rule fired (or resolved), in the policy's time zone with its offset.
    At,
    /// The job's progress, `62%`.
    Progress,
    /// The job's reported time to completion.
    Eta,
    /// GPU-hours a suspension frees.
    GpuHours,
    /// Dollars a suspension frees.
    Dollars,
    /// Whichever is known of progress and ETA, actions and GPU time at stake, `; `-joined (empty once
    /// resolved).
    Details,
}

/// One documented field: its name in templates, the scopes it may appear in, and what it renders to.
pub(crate) struct FieldDoc {
    pub name: &'static str,
    pub field: Field,
    /// `true`: usable in group templates (titles, subjects) as well as in alert templates.
    pub group: bool,
    #[expect(dead_code, reason = "the table is the fields' documentation; no command prints it")]
    pub doc: &'static str,
}

/// Every template field, in documentation order.
pub(crate) const FIELDS: &[FieldDoc] = &[
    FieldDoc { name: "status", field: Field::Status, group: true, doc: "`firing` or `resolved`" },
    FieldDoc { name: "receiver", field: Field::Receiver, group: true, doc: "the receiver's name" },
    FieldDoc {
        name: "policy",
        field: Field::Policy,
        group: true,
        doc: "the policy, `namespace/name` or `name`",
    },
    FieldDoc { name: "job", field: Field::Job, group: true, doc: "the TrainJob, `namespace/name`" },
    FieldDoc { name: "namespace", field: Field::Namespace, group: true, doc: "the TrainJob's namespace" },
    FieldDoc { name: "jobName", field: Field::JobName, group: true, doc: "the TrainJob's name" },
    FieldDoc {
        name: "rules",
        field: Field::Rules,
        group: true,
        doc: "the rules in the notification, `, `-joined",
    },
    FieldDoc {
        name: "count",
        field: Field::Count,
        group: true,
        doc: "how many alerts the notification carries",
    },
    FieldDoc { name: "rule", field: Field::Rule, group: false, doc: "the rule's name" },
    FieldDoc { name: "mode", field: Field::Mode, group: false, doc: "`Audit` or `Enforce`" },
    FieldDoc {
        name: "summary",
        field: Field::Summary,
        group: false,
        doc: "why the rule fired, one sentence",
    },
    FieldDoc {
        name: "values",
        field: Field::Values,
        group: false,
        doc: "the values behind it, `name=value, …`",
    },
    FieldDoc {
        name: "actions",
        field: Field::Actions,
        group: false,
        doc: "the rule's other actions: `suspended the TrainJob` (Enforce; `suspending …` until the result is known) or `would …` (Audit)",
    },
    FieldDoc {
        name: "undo",
        field: Field::Undo,
        group: false,
        doc: "how to resume a job the firing stopped, and how to exempt it (`kubectl` commands)",
    },
    FieldDoc { name: "message", field: Field::Message, group: false, doc: "the notify action's `message`" },
    FieldDoc {
        name: "at",
        field: Field::At,
        group: false,
        doc: "when the rule fired (or resolved), in the policy's time zone: `Sat 2026-11-28 00:11:26 +01:00`",
    },
    FieldDoc { name: "progress", field: Field::Progress, group: false, doc: "the job's progress, `62%`" },
    FieldDoc { name: "eta", field: Field::Eta, group: false, doc: "the job's reported time to completion" },
    FieldDoc { name: "gpuHours", field: Field::GpuHours, group: false, doc: "GPU-hours a suspension frees" },
    FieldDoc { name: "dollars", field: Field::Dollars, group: false, doc: "dollars a suspension frees" },
    FieldDoc {
        name: "details",
        field: Field::Details,
        group: false,
        doc: "whichever is known of progress and ETA, actions, and GPU time at stake, `; `-joined (empty once resolved)",
    },
];

impl Field {
    /// The field's name in templates, for example `jobName`.
    pub fn name(self) -> &'static str {
        FIELDS.iter().find(|d| d.field == self).map_or("?", |d| d.name)
    }

    fn lookup(name: &str) -> Option<&'static FieldDoc> {
        FIELDS.iter().find(|d| d.name == name)
    }
}

/// The text of every field, supplied by the renderer's caller. Fields with no value (`None`) render as `-`.
pub trait FieldValues {
    /// The text of `field`, or `None` when it has no value (rendered as `-`).
    fn value(&self, field: Field) -> Option<String>;
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Field(Field),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// Why a template did not parse; `column` counts characters from 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    pub column: usize,
    pub message: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.column, self.message)
    }
}

impl Template {
    /// Parses a template for `scope`.
    pub fn parse(text: &str, scope: Scope) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        let mut offset = 0usize; // byte offset of `rest` in `text`
        let column = |byte: usize| text[..byte].chars().count() + 1;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let Some(close) = after.find("}}") else {
                return Err(TemplateError {
                    column: column(offset + open),
                    message: "`{{` is not closed by `}}`".into(),
                });
            };
            let name = after[..close].trim();
            let at = column(offset + open);
            let doc = Field::lookup(name).ok_or_else(|| TemplateError {
                column: at,
                message: format!(
                    "unknown field {name:?}; fields: {}",
                    FIELDS
                        .iter()
                        .filter(|d| scope == Scope::Alert || d.group)
                        .map(|d| d.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
            if scope == Scope::Group && !doc.group {
                return Err(TemplateError {
                    column: at,
                    message: format!(
                        "{name:?} describes one alert and is not available in a title or subject (it is in text)"
                    ),
                });
            }
            parts.push(Part::Field(doc.field));
            let consumed = open + 2 + close + 2;
            offset += consumed;
            rest = &rest[consumed..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// A template that renders nothing (stands in for one that failed to parse, in a policy that is rejected).
    pub fn empty() -> Template {
        Template { parts: Vec::new() }
    }

    /// Substitutes every field.
    pub fn render(&self, values: &dyn FieldValues) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Field(f) => out.push_str(values.value(*f).as_deref().unwrap_or("-")),
            }
        }
        out
    }

    /// The fields the template uses.
    pub fn fields(&self) -> impl Iterator<Item = Field> + '_ {
        self.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(*f),
            Part::Literal(_) => None,
        })
    }
}

/// Default title (Slack header, email subject, webhook `title`).
pub const DEFAULT_TITLE: &str = "[{{status}}] {{rules}} on {{job}}";
/// Default text, one block per alert.
pub const DEFAULT_TEXT: &str =
    "{{rule}} [{{mode}}] {{status}} on {{job}} at {{at}}: {{summary}}\n{{details}}\n{{message}}";

#[cfg(test)]
mod tests {
    use super::*;

    struct Values;
    impl FieldValues for Values {
        fn value(&self, field: Field) -> Option<String> {
            match field {
                Field::Job => Some("fraud/ft".into()),
                Field::Rule => Some("loss-plateau".into()),
                _ => None,
            }
        }
    }

    #[test]
    fn fields_are_substituted_and_missing_ones_are_a_dash() {
        let t = Template::parse("{{rule}} on {{ job }}: {{summary}}.", Scope::Alert).unwrap();
        assert_eq!(t.render(&Values), "loss-plateau on fraud/ft: -.");
        assert_eq!(t.fields().collect::<Vec<_>>(), vec![Field::Rule, Field::Job, Field::Summary]);
        assert_eq!(Template::parse("", Scope::Alert).unwrap().render(&Values), "");
        assert_eq!(Template::parse("plain ünïcode", Scope::Group).unwrap().render(&Values), "plain ünïcode");
    }

    #[test]
    fn errors_name_the_column_and_the_problem() {
        let e = Template::parse("héllo {{jobb}}", Scope::Alert).unwrap_err();
        assert_eq!(e.column, 7);
        assert!(e.message.starts_with("unknown field \"jobb\"; fields: status,"), "{e}");
        let e = Template::parse("ok {{job}} {{rule", Scope::Alert).unwrap_err();
        assert_eq!(e.to_string(), "column 12: `{{` is not closed by `}}`");
        let e = Template::parse("{{summary}}", Scope::Group).unwrap_err();
        assert!(e.message.contains("not available in a title"), "{e}");
        assert!(Template::parse("{{}}", Scope::Alert).is_err());
    }

    #[test]
    fn the_defaults_parse_in_their_scopes() {
        Template::parse(DEFAULT_TITLE, Scope::Group).unwrap();
        Template::parse(DEFAULT_TEXT, Scope::Alert).unwrap();
        for d in FIELDS {
            assert_eq!(d.field.name(), d.name);
        }
    }
}
