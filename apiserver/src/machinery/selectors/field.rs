//! Field selectors (`k8s.io/apimachinery/pkg/fields`): `field=value`, `field!=value`, with
//! upstream's escaping of values.

use std::fmt;

use super::{Operator, SelectorError};

/// One field requirement: `field=value` or `field!=value` (`==` parses as `=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    /// `Operator::Equals` or `Operator::NotEquals`.
    pub operator: Operator,
    /// The unescaped value.
    pub value: String,
}

impl FieldRequirement {
    /// A missing field counts as the empty string, as upstream's `fields.Set`.
    pub fn matches(&self, actual: Option<&str>) -> bool {
        let equal = actual.unwrap_or("") == self.value;
        if self.operator == Operator::NotEquals {
            !equal
        } else {
            equal
        }
    }
}

/// A field selector: the AND of `field=value` / `field!=value` terms. Empty matches all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    pub fn everything() -> Self {
        Self::default()
    }

    /// Upstream `fields.ParseSelector`: terms split on unescaped `,`, each `f=v`, `f==v` or
    /// `f!=v`; values unescape `\,` `\=` `\\` and may not contain a bare `,` or `=`.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError::Field(format!("invalid selector: '{selector}'; can't understand '{part}'")));
            };
            let value = unescape_value(rhs)?;
            let operator = if op == "!=" { Operator::NotEquals } else { Operator::Equals };
            requirements.push(FieldRequirement { field: lhs.to_string(), operator, value });
        }
        Ok(FieldSelector { requirements })
    }

    /// The terms, sorted as upstream sorts them.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The field names used, for checking against the kind's supported fields.
    pub fn fields(&self) -> Vec<String> {
        self.requirements.iter().map(|r| r.field.clone()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether every term holds; `get` returns an object's value for a field name.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| r.matches(get(&r.field).as_deref()))
    }

    /// Upstream `RequiresExactMatch`: the value of a `field=value` term, if there is one.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find(|r| r.field == field && r.operator == Operator::Equals).map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| {
                let op = if r.operator == Operator::NotEquals { "!=" } else { "=" };
                format!("{}{op}{}", r.field, escape_value(&r.value))
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Upstream `fields.EscapeValue`.
pub fn escape_value(s: &str) -> String {
    s.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=")
}

/// Upstream `fields.UnescapeValue`.
pub fn unescape_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError::Field(format!("invalid field selector: invalid escape sequence: \\{c}")))
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream prints the rune with %v, i.e. as a number.
            ',' | '=' => {
                return Err(SelectorError::Field(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )))
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::Field("invalid field selector: invalid escape sequence: \\".to_string()));
    }
    Ok(out)
}

/// Splits on `,` not preceded by a backslash escape.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(selector.get(start..i).unwrap_or_default());
            start = i + 1;
        }
    }
    terms.push(selector.get(start..).unwrap_or_default());
    terms
}

/// The first `!=`, `==` or `=` from the left splits the term.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = term.get(i..).unwrap_or_default();
        for op in ["!=", "==", "="] {
            if rest.starts_with(op) {
                return Some((term.get(..i).unwrap_or_default(), op, rest.get(op.len()..).unwrap_or_default()));
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    type Terms = Vec<(&'static str, Operator, &'static str)>;

    #[test]
    fn field_parse_table() {
        let cases: Vec<(&str, Result<Terms, &str>)> = vec![
            ("", Ok(vec![])),
            ("metadata.name=foo", Ok(vec![("metadata.name", Operator::Equals, "foo")])),
            ("metadata.name==foo", Ok(vec![("metadata.name", Operator::Equals, "foo")])),
            ("metadata.name!=foo", Ok(vec![("metadata.name", Operator::NotEquals, "foo")])),
            ("metadata.name=", Ok(vec![("metadata.name", Operator::Equals, "")])),
            (
                "spec.signerName=a,metadata.namespace!=b",
                Ok(vec![("metadata.namespace", Operator::NotEquals, "b"), ("spec.signerName", Operator::Equals, "a")]),
            ),
            ("a=b,,c=d", Ok(vec![("a", Operator::Equals, "b"), ("c", Operator::Equals, "d")])),
            ("a=x\\,y\\=z\\\\", Ok(vec![("a", Operator::Equals, "x,y=z\\")])),
            ("a!==b", Err("invalid field selector: unescaped character in value: 61")),
            ("a=b=c", Err("invalid field selector: unescaped character in value: 61")),
            ("a=b\\x", Err("invalid field selector: invalid escape sequence: \\x")),
            ("a=b\\", Err("invalid field selector: invalid escape sequence: \\")),
            ("foo", Err("invalid selector: 'foo'; can't understand 'foo'")),
            ("a=b,foo", Err("invalid selector: 'a=b,foo'; can't understand 'foo'")),
            ("=b", Ok(vec![("", Operator::Equals, "b")])),
            ("ä=ö", Ok(vec![("ä", Operator::Equals, "ö")])),
        ];
        for (input, want) in cases {
            let got = FieldSelector::parse(input).map_err(|e| e.to_string()).map(|s| {
                s.requirements().iter().map(|r| (r.field.clone(), r.operator, r.value.clone())).collect::<Vec<_>>()
            });
            let want = want
                .map(|v| v.into_iter().map(|(f, o, v)| (f.to_string(), o, v.to_string())).collect::<Vec<_>>())
                .map_err(str::to_string);
            assert_eq!(got, want, "input {input:?}");
        }
    }

    #[test]
    fn field_matching_and_display() {
        let get = |f: &str| match f {
            "metadata.name" => Some("web".to_string()),
            "metadata.namespace" => Some("default".to_string()),
            _ => None,
        };
        let cases = [
            ("", true),
            ("metadata.name=web", true),
            ("metadata.name=db", false),
            ("metadata.name!=db", true),
            ("metadata.name=web,metadata.namespace=default", true),
            ("metadata.name=web,metadata.namespace!=default", false),
            ("spec.x=", true),
            ("spec.x!=", false),
        ];
        for (sel, want) in cases {
            assert_eq!(FieldSelector::parse(sel).unwrap().matches(get), want, "selector {sel:?}");
        }
        let s = FieldSelector::parse("b!=x\\,y,a==1").unwrap();
        assert_eq!(s.to_string(), "a=1,b!=x\\,y");
        assert_eq!(s.fields(), vec!["a", "b"]);
        assert_eq!(s.requires_exact_match("a"), Some("1"));
        assert_eq!(s.requires_exact_match("b"), None);
        assert_eq!(escape_value("a,b=c\\"), "a\\,b\\=c\\\\");
    }
}
