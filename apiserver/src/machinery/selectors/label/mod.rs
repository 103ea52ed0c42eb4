//! Label requirements and selectors (`k8s.io/apimachinery/pkg/labels`): validation,
//! matching, their canonical string form, and `metav1.LabelSelector` objects. The
//! selector string syntax is parsed in [`parser`].

mod parser;

use std::fmt;

use serde_json::Value;

use super::{aggregate, go_quote, invalid, render_list, validate_label_key, Labels, Operator, SelectorError};
use crate::validation::is_valid_label_value;
use parser::{Lexer, Parser};

/// One label requirement: `key op values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Upstream `labels.NewRequirement` (without a field path): checks the key, the number of
    /// values for the operator, integer values for `gt`/`lt`, and every value.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        let mut errs = Vec::new();
        if let Err(e) = validate_label_key(key, "key") {
            errs.push(e.to_string());
        }
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(invalid(
                        "values",
                        &render_list(&values),
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(invalid(
                        "values",
                        &render_list(&values),
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(invalid(
                        "values",
                        &render_list(&values),
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid(
                        "values",
                        &render_list(&values),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(invalid(
                            &format!("values[{i}]"),
                            &go_quote(v),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let problems = is_valid_label_value(v);
            if !problems.is_empty() {
                errs.push(invalid(&format!("values[{i}][{key}]"), &go_quote(v), &problems.join("; ")));
            }
        }
        aggregate(errs)?;
        Ok(Requirement { key: key.to_string(), operator, values })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Upstream `Requirement.Matches`: `!=`/`notin`/`!` match objects lacking the key;
    /// `gt`/`lt` need both sides to be integers.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => labels.label(&self.key).is_some_and(has),
            Operator::NotIn | Operator::NotEquals => labels.label(&self.key).is_none_or(|v| !has(v)),
            Operator::Exists => labels.label(&self.key).is_some(),
            Operator::DoesNotExist => labels.label(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(actual)) = labels.label(&self.key).map(str::parse::<i64>) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (op, parens) = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", false),
            Operator::DoubleEquals => ("==", false),
            Operator::NotEquals => ("!=", false),
            Operator::In => (" in ", true),
            Operator::NotIn => (" notin ", true),
            Operator::GreaterThan => (">", false),
            Operator::LessThan => ("<", false),
        };
        f.write_str(op)?;
        if parens {
            f.write_str("(")?;
        }
        let mut values = self.values.clone();
        values.sort();
        f.write_str(&values.join(","))?;
        if parens {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its requirements. The empty selector matches everything;
/// [`LabelSelector::nothing`] (a null `metav1.LabelSelector`) matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// Matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Matches no object.
    pub fn nothing() -> Self {
        LabelSelector { requirements: Vec::new(), nothing: true }
    }

    /// A selector from requirements (sorted by key, as upstream's `Add`).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements, nothing: false }
    }

    /// Upstream `labels.Parse`: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
    /// `!k`, `k>1`, `k<1`, joined by `,` (AND). An empty string matches everything.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser { items: Lexer::new(selector).scan(), pos: 0 };
        let requirements = parser.parse()?;
        Ok(Self::from_requirements(requirements))
    }

    /// Upstream `metav1.LabelSelectorAsSelector` over a wire-form `metav1.LabelSelector`:
    /// null matches nothing, `{}` everything; `matchLabels` and `matchExpressions`
    /// (`In`/`NotIn`/`Exists`/`DoesNotExist`) are ANDed.
    pub fn from_meta(selector: &Value) -> Result<Self, SelectorError> {
        let m = match selector {
            Value::Null => return Ok(Self::nothing()),
            Value::Object(m) => m,
            other => return Err(SelectorError::Object(format!("invalid label selector: {other}"))),
        };
        let match_labels = match m.get("matchLabels") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(labels)) => {
                let mut out = Vec::new();
                for (k, v) in labels {
                    let Some(v) = v.as_str() else {
                        return Err(SelectorError::Object(format!(
                            "invalid label selector: matchLabels[{k}] must be a string"
                        )));
                    };
                    out.push((k.as_str(), v));
                }
                out
            }
            Some(_) => {
                return Err(SelectorError::Object("invalid label selector: matchLabels must be an object".to_string()))
            }
        };
        let match_expressions = match m.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(list)) => list.as_slice(),
            Some(_) => {
                return Err(SelectorError::Object(
                    "invalid label selector: matchExpressions must be a list".to_string(),
                ))
            }
        };
        if match_labels.is_empty() && match_expressions.is_empty() {
            return Ok(Self::everything());
        }
        let mut requirements = Vec::new();
        for (k, v) in match_labels {
            requirements.push(Requirement::new(k, Operator::Equals, vec![v.to_string()])?);
        }
        for expr in match_expressions {
            let key = expr.get("key").and_then(Value::as_str).unwrap_or("");
            let operator = expr.get("operator").and_then(Value::as_str).unwrap_or("");
            let op = match operator {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::Object(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    )))
                }
            };
            let values = match expr.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(vs)) => {
                    let mut out = Vec::new();
                    for v in vs {
                        match v.as_str() {
                            Some(s) => out.push(s.to_string()),
                            None => {
                                return Err(SelectorError::Object(
                                    "invalid label selector: values must be strings".to_string(),
                                ))
                            }
                        }
                    }
                    out
                }
                Some(_) => {
                    return Err(SelectorError::Object("invalid label selector: values must be a list".to_string()))
                }
            };
            requirements.push(Requirement::new(key, op, values)?);
        }
        Ok(Self::from_requirements(requirements))
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True for the match-everything selector.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for the match-nothing selector.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// Whether a label set satisfies every requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matches an object's wire-form `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        let empty = serde_json::Map::new();
        let labels = obj.get("metadata").and_then(|m| m.get("labels")).and_then(Value::as_object).unwrap_or(&empty);
        self.matches(labels)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::machinery::selectors::tests::labels;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn label_parse_good() {
        // (input, canonical string form)
        let cases = [
            ("", ""),
            ("   ", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("x", "x"),
            ("!x", "!x"),
            (" !  x ", "!x"),
            ("x in (a,b)", "x in (a,b)"),
            ("x in (b,a,a)", "x in (a,b)"),
            ("x notin (a)", "x notin (a)"),
            ("x in ()", "x in ()"),
            ("x in (,a)", "x in (,a)"),
            ("x in (a,,b)", "x in (,a,b)"),
            ("x in (a,)", "x in (,a)"),
            ("x>1", "x>1"),
            ("x<10", "x<10"),
            ("x=", "x="),
            ("x=,y", "x=,y"),
            ("z=a,y!=b,x", "x,y!=b,z=a"),
            ("  x = a , y in ( b , c )  ", "x=a,y in (b,c)"),
            ("x in (in),in=notin", "in=notin,x in (in)"),
            ("example.com/app=web", "example.com/app=web"),
            ("x==", "x=="),
            ("\tx\r\n=\ta", "x=a"),
            ("\0x=a", ""),
            ("x\0", "x"),
        ];
        for (input, want) in cases {
            let s = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(s.to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn label_parse_bad() {
        let key_err = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let value_err = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
        let cases: Vec<(&str, String)> = vec![
            ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
            ("x=a,", "found '', expected: identifier after ','".into()),
            (",x", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("=a", "found '=', expected: !, identifier, or 'end of string'".into()),
            ("x in a", "unable to parse requirement: found 'a' expected: '('".into()),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'".into()),
            ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".into()),
            ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier".into()),
            ("x in", "unable to parse requirement: found '' expected: '('".into()),
            ("x=(", "unable to parse requirement: found '(', expected: identifier".into()),
            ("!", "unable to parse requirement: found '', expected: identifier".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            ("x>a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".into()),
            ("x>", "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".into()),
            ("x<-1", format!("unable to parse requirement: values[0][x]: Invalid value: \"-1\": {value_err}")),
            ("x>-a", format!("unable to parse requirement: [values[0]: Invalid value: \"-a\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"-a\": {value_err}]")),
            ("x=-a", format!("unable to parse requirement: values[0][x]: Invalid value: \"-a\": {value_err}")),
            ("x in (a,-b)", format!("unable to parse requirement: values[0][x]: Invalid value: \"-b\": {value_err}")),
            ("-x", format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {key_err}")),
            ("a/b/c=d", "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into()),
            ("x=a\tb", "found 'b', expected: ',' or 'end of string'".into()),
            // A NUL byte inside a token only ends that token.
            ("x=a\0garbage", "found 'garbage', expected: ',' or 'end of string'".into()),
        ];
        for (input, want) in cases {
            let got = LabelSelector::parse(input).err().unwrap_or_else(|| panic!("{input:?} parsed")).to_string();
            assert_eq!(got, want, "input {input:?}");
        }
        let long = format!("x={}", "a".repeat(64));
        let got = LabelSelector::parse(&long).unwrap_err().to_string();
        assert!(got.ends_with("Invalid value: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": must be no more than 63 characters"), "{got}");
        let long_key = format!("{}=a", "k".repeat(64));
        assert!(LabelSelector::parse(&long_key)
            .unwrap_err()
            .to_string()
            .contains("name part must be no more than 63 characters"));
    }

    #[test]
    fn label_parse_edge_cases() {
        // `!==` lexes as `!=` then `=`.
        assert!(LabelSelector::parse("x!==a").is_err());
        // Non-ASCII never panics.
        assert!(LabelSelector::parse("ä=ö").is_err());
        assert!(LabelSelector::parse("x=ä,(é)").is_err());
        assert!(LabelSelector::parse("x in (é").is_err());
    }

    #[test]
    fn label_matching() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("n", "5"), ("empty", "")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (x)", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("app>1", false),
            ("missing<1", false),
            ("empty=", true),
            ("empty", true),
            ("missing=", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("x in (,a)", false),
            ("empty in (,a)", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&l), want, "selector {sel:?}");
        }
        // Matching over a wire-form labels map.
        let obj = json!({"metadata": {"labels": {"app": "web", "bad": 1}}});
        assert!(LabelSelector::parse("app=web,!bad").unwrap().matches_object(&obj));
        assert!(LabelSelector::parse("!app").unwrap().matches_object(&json!({})));
    }

    #[test]
    fn label_selector_from_meta() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases: Vec<(Value, Result<bool, &str>)> = vec![
            (json!(null), Ok(false)),
            (json!({}), Ok(true)),
            (json!({"matchLabels": {}, "matchExpressions": []}), Ok(true)),
            (json!({"matchLabels": {"app": "web"}}), Ok(true)),
            (json!({"matchLabels": {"app": "db"}}), Ok(false)),
            (json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]}), Ok(true)),
            (json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}), Ok(false)),
            (json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}), Ok(true)),
            (json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}), Ok(false)),
            (
                json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}),
                Ok(true),
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Foo"}]}),
                Err("\"Foo\" is not a valid label selector operator"),
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}),
                Err("values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"),
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]}),
                Err("values: Invalid value: [\"a\"]: values set must be empty for exists and does not exist"),
            ),
            (json!({"matchLabels": {"-bad": "x"}}), Err("key: Invalid value: \"-bad\"")),
            (json!("nope"), Err("invalid label selector")),
        ];
        for (sel, want) in cases {
            match (LabelSelector::from_meta(&sel), want) {
                (Ok(s), Ok(m)) => assert_eq!(s.matches(&l), m, "selector {sel}"),
                (Err(e), Err(w)) => assert!(e.to_string().starts_with(w), "selector {sel}: {e}"),
                (got, want) => panic!("selector {sel}: got {got:?}, want {want:?}"),
            }
        }
        assert!(LabelSelector::from_meta(&json!(null)).unwrap().is_nothing());
        assert!(!LabelSelector::nothing().matches(&BTreeMap::new()));
        assert!(LabelSelector::everything().matches(&BTreeMap::new()));
    }
}
