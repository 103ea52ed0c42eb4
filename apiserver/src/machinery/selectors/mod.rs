//! Label and field selectors as `k8s.io/apimachinery/pkg/labels` and `pkg/fields` (v0.33)
//! parse and match them: the `labelSelector`/`fieldSelector` query parameters, and
//! `metav1.LabelSelector` objects (`LabelSelectorAsSelector`). Parse errors carry upstream's
//! texts, ready to be returned as a 400 message as they are.
//!
//! [`label`] has label requirements and selectors (their string syntax parsed in
//! `label::parser`, upstream's recursive descent), [`field`] field selectors; this file holds what both use: the
//! operators and the rendering of upstream's field errors.

mod field;
mod label;

pub use field::{escape_value, unescape_value, FieldRequirement, FieldSelector};
pub use label::{LabelSelector, Requirement};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasher;

use serde_json::Value;

use crate::validation::is_qualified_name;

/// Why a selector was refused. The texts are upstream's, ready to be a 400's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A requirement breaks upstream's validation: its `field.Error`s, aggregated as
    /// `utilerrors.Aggregate` renders them.
    #[error("{0}")]
    Invalid(String),
    /// A label selector string that does not parse (`found '…', expected: …`), or one of
    /// whose requirements is invalid (`unable to parse requirement: …`).
    #[error("{0}")]
    Syntax(String),
    /// A `metav1.LabelSelector` object of the wrong shape or with an unknown operator.
    #[error("{0}")]
    Object(String),
    /// A field selector that does not parse (`invalid selector: …`,
    /// `invalid field selector: …`).
    #[error("{0}")]
    Field(String),
}

/// A label set a selector can be matched against.
pub trait Labels {
    /// The value of label `key`, if the set has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: BuildHasher> Labels for HashMap<String, String, S> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A wire-form `metadata.labels` map; non-string values count as absent.
impl Labels for serde_json::Map<String, Value> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

/// Selector operators (upstream `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

impl Operator {
    /// Upstream's string form (`in`, `notin`, `=`, `==`, `!=`, `exists`, `!`, `gt`, `lt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

// ---------------------------------------------------------------------------------------
// Error rendering (upstream field.Error / utilerrors.Aggregate)
// ---------------------------------------------------------------------------------------

/// Go's `%q` for a string.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `<field>: Invalid value: <value>: <detail>` (the value already rendered).
fn invalid(field: &str, value: &str, detail: &str) -> String {
    format!("{field}: Invalid value: {value}: {detail}")
}

/// A `[]string` bad value as upstream renders it (JSON; an empty list is a nil slice).
fn render_list(values: &[String]) -> String {
    if values.is_empty() {
        "null".to_string()
    } else {
        serde_json::to_string(values).unwrap_or_default()
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message as is, several deduplicated in `[..]`.
fn aggregate(errs: Vec<String>) -> Result<(), SelectorError> {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errs.into_iter().filter(|e| seen.insert(e.clone())).collect();
    match unique.len() {
        0 => Ok(()),
        1 => Err(SelectorError::Invalid(unique.into_iter().next().unwrap_or_default())),
        _ => Err(SelectorError::Invalid(format!("[{}]", unique.join(", ")))),
    }
}

/// `validateLabelKey`: `<path>: Invalid value: "<key>": <problems joined by "; ">`.
fn validate_label_key(key: &str, path: &str) -> Result<(), SelectorError> {
    let errs = is_qualified_name(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(SelectorError::Invalid(invalid(path, &go_quote(key), &errs.join("; "))))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn random_input_never_panics() {
        use rand::{Rng, SeedableRng};
        let alphabet: Vec<char> = "ab=!(),<>in notin\t\0\\é/.-_1 ".chars().collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let l = labels(&[("a", "1"), ("b", "")]);
        for _ in 0..20_000 {
            let len = rng.random_range(0..16);
            let s: String = (0..len).map(|_| alphabet[rng.random_range(0..alphabet.len())]).collect();
            if let Ok(sel) = LabelSelector::parse(&s) {
                let _ = sel.matches(&l);
                // The canonical form parses back to the same selector.
                assert_eq!(LabelSelector::parse(&sel.to_string()).as_ref(), Ok(&sel), "input {s:?}");
            }
            if let Ok(sel) = FieldSelector::parse(&s) {
                let _ = sel.matches(|_| None);
                assert_eq!(FieldSelector::parse(&sel.to_string()).as_ref(), Ok(&sel), "input {s:?}");
            }
        }
    }

    #[test]
    fn errors_say_what_was_refused() {
        assert!(matches!(LabelSelector::parse("x in"), Err(SelectorError::Syntax(_))));
        assert!(matches!(Requirement::new("-x", Operator::Exists, Vec::new()), Err(SelectorError::Invalid(_))));
        assert!(matches!(LabelSelector::from_meta(&serde_json::json!("nope")), Err(SelectorError::Object(_))));
        assert!(matches!(FieldSelector::parse("foo"), Err(SelectorError::Field(_))));
        assert!(matches!(unescape_value("a\\"), Err(SelectorError::Field(_))));
    }
}
