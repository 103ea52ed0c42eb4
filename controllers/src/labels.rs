//! Label selectors (`metav1.LabelSelector`) matched against labels, as upstream.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector is invalid, in upstream's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("for 'in', 'notin' operators, values set can't be empty (key {key})")]
    NoValues { key: String },
    #[error("values set must be empty for exists and does not exist (key {key})")]
    UnexpectedValues { key: String },
    #[error("{operator:?} is not a valid label selector operator")]
    Operator { operator: String },
}

/// Whether `selector` selects an object with `labels`. An empty selector selects everything;
/// an unknown operator (or values where none are allowed) makes the selector invalid: Err.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, SelectorError> {
    for (k, v) in selector.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" if !values.is_empty() => have.is_some_and(|v| values.contains(v)),
            "NotIn" if !values.is_empty() => have.is_none_or(|v| !values.contains(v)),
            "Exists" if values.is_empty() => have.is_some(),
            "DoesNotExist" if values.is_empty() => have.is_none(),
            "In" | "NotIn" => return Err(SelectorError::NoValues { key: e.key.clone() }),
            "Exists" | "DoesNotExist" => return Err(SelectorError::UnexpectedValues { key: e.key.clone() }),
            other => return Err(SelectorError::Operator { operator: other.to_string() }),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn selector_table() {
        let labels: BTreeMap<String, String> =
            [("a", "1"), ("b", "2")].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let ml = |pairs: &[(&str, &str)]| LabelSelector {
            match_labels: Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        };
        let me =
            |reqs: Vec<LabelSelectorRequirement>| LabelSelector { match_expressions: Some(reqs), ..Default::default() };
        let cases: Vec<(&str, LabelSelector, Result<bool, ()>)> = vec![
            ("empty selects all", LabelSelector::default(), Ok(true)),
            ("matchLabels hit", ml(&[("a", "1")]), Ok(true)),
            ("matchLabels all must hold", ml(&[("a", "1"), ("b", "3")]), Ok(false)),
            ("matchLabels missing key", ml(&[("c", "1")]), Ok(false)),
            ("In", me(vec![req("a", "In", &["0", "1"])]), Ok(true)),
            ("In miss", me(vec![req("a", "In", &["0"])]), Ok(false)),
            ("NotIn absent key", me(vec![req("c", "NotIn", &["0"])]), Ok(true)),
            ("NotIn hit", me(vec![req("a", "NotIn", &["1"])]), Ok(false)),
            ("Exists", me(vec![req("b", "Exists", &[])]), Ok(true)),
            ("DoesNotExist", me(vec![req("b", "DoesNotExist", &[])]), Ok(false)),
            (
                "both kinds",
                LabelSelector { match_expressions: Some(vec![req("b", "Exists", &[])]), ..ml(&[("a", "1")]) },
                Ok(true),
            ),
            ("bad operator", me(vec![req("a", "Near", &["1"])]), Err(())),
            ("In without values", me(vec![req("a", "In", &[])]), Err(())),
            ("Exists with values", me(vec![req("a", "Exists", &["1"])]), Err(())),
        ];
        for (name, sel, want) in cases {
            assert_eq!(matches(&sel, &labels).map_err(|_| ()), want, "{name}");
        }
    }
}
