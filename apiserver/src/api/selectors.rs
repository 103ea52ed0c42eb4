//! Label and field selectors as `k8s.io/apimachinery/pkg/labels` and `pkg/fields` (v0.33)
//! parse and match them: the `labelSelector`/`fieldSelector` query parameters, and
//! `metav1.LabelSelector` objects (`LabelSelectorAsSelector`). Parse errors carry upstream's
//! texts, ready to be returned as a 400 message as they are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::BuildHasher;

use serde_json::Value;

use crate::validation::{is_qualified_name, is_valid_label_value};

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
fn aggregate(errs: Vec<String>) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    let unique: Vec<String> = errs.into_iter().filter(|e| seen.insert(e.clone())).collect();
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", unique.join(", "))),
    }
}

/// `validateLabelKey`: `<path>: Invalid value: "<key>": <problems joined by "; ">`.
fn validate_label_key(key: &str, path: &str) -> Result<(), String> {
    let errs = is_qualified_name(key);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(path, &go_quote(key), &errs.join("; ")))
    }
}

// ---------------------------------------------------------------------------------------
// Label requirements and selectors
// ---------------------------------------------------------------------------------------

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
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, String> {
        let mut errs = Vec::new();
        if let Err(e) = validate_label_key(key, "key") {
            errs.push(e);
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
    pub fn parse(selector: &str) -> Result<Self, String> {
        let mut parser = Parser { items: Lexer::new(selector).scan(), pos: 0 };
        let requirements = parser.parse()?;
        Ok(Self::from_requirements(requirements))
    }

    /// Upstream `metav1.LabelSelectorAsSelector` over a wire-form `metav1.LabelSelector`:
    /// null matches nothing, `{}` everything; `matchLabels` and `matchExpressions`
    /// (`In`/`NotIn`/`Exists`/`DoesNotExist`) are ANDed.
    pub fn from_meta(selector: &Value) -> Result<Self, String> {
        let m = match selector {
            Value::Null => return Ok(Self::nothing()),
            Value::Object(m) => m,
            other => return Err(format!("invalid label selector: {other}")),
        };
        let match_labels = match m.get("matchLabels") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(labels)) => {
                let mut out = Vec::new();
                for (k, v) in labels {
                    let Some(v) = v.as_str() else {
                        return Err(format!("invalid label selector: matchLabels[{k}] must be a string"));
                    };
                    out.push((k.as_str(), v));
                }
                out
            }
            Some(_) => return Err("invalid label selector: matchLabels must be an object".to_string()),
        };
        let match_expressions = match m.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(list)) => list.as_slice(),
            Some(_) => return Err("invalid label selector: matchExpressions must be a list".to_string()),
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
                other => return Err(format!("{} is not a valid label selector operator", go_quote(other))),
            };
            let values = match expr.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(vs)) => {
                    let mut out = Vec::new();
                    for v in vs {
                        match v.as_str() {
                            Some(s) => out.push(s.to_string()),
                            None => return Err("invalid label selector: values must be strings".to_string()),
                        }
                    }
                    out
                }
                Some(_) => return Err("invalid label selector: values must be a list".to_string()),
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

// ---------------------------------------------------------------------------------------
// Label selector lexer and parser (a port of upstream's recursive descent)
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn new(s: &'a str) -> Self {
        Lexer { s, pos: 0 }
    }

    /// The next byte, or 0 at the end (a NUL byte also ends the input, as upstream).
    fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn lex(&mut self) -> (Token, String) {
        let mut c = self.read();
        while is_whitespace(c) {
            c = self.read();
        }
        if c == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special(c) {
            self.scan_special()
        } else {
            self.scan_identifier()
        }
    }

    /// The longest run of special symbols that is still a token (all single ones are).
    fn scan_special(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut last: Option<(Token, usize)> = None;
        loop {
            let c = self.read();
            if c == 0 {
                break;
            }
            if !is_special(c) {
                self.unread();
                break;
            }
            match keyword(self.s.get(start..self.pos).unwrap_or_default()) {
                Some(t) => last = Some((t, self.pos)),
                None if last.is_some() => {
                    self.unread();
                    break;
                }
                None => {}
            }
        }
        match last {
            Some((t, end)) => (t, self.s.get(start..end).unwrap_or_default().to_string()),
            // Unreachable: every special symbol alone is a token.
            None => (Token::EndOfString, String::new()),
        }
    }

    fn scan_identifier(&mut self) -> (Token, String) {
        let start = self.pos;
        loop {
            let c = self.read();
            if c == 0 {
                break;
            }
            if is_special(c) || is_whitespace(c) {
                self.unread();
                break;
            }
        }
        // A NUL byte ended the input: it is not part of the identifier.
        let mut end = self.pos;
        if self.s.as_bytes().get(end.wrapping_sub(1)) == Some(&0) {
            end -= 1;
        }
        let lit = self.s.get(start..end).unwrap_or_default().to_string();
        (keyword(&lit).unwrap_or(Token::Identifier), lit)
    }

    fn scan(mut self) -> Vec<(Token, String)> {
        let mut items = Vec::new();
        loop {
            let item = self.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                return items;
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    pos: usize,
}

impl Parser {
    fn item(&self, at: usize, ctx: Context) -> (Token, String) {
        let (tok, lit) = self.items.get(at).cloned().unwrap_or((Token::EndOfString, String::new()));
        let tok = match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            _ => tok,
        };
        (tok, lit)
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        self.pos += 1;
        self.item(self.pos - 1, ctx)
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!("found '{l2}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => return Err(format!("found '{lit}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = op {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values.into_iter().collect())
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        validate_label_key(&lit, "<nil>")?;
        let (t, _) = self.lookahead(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: in, notin, =, ==, !=, gt, lt")),
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let set = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut set = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    set.insert(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    // "(," ",)" and ",," stand for empty values.
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        set.insert(String::new());
                        return Ok(set);
                    }
                    if tok2 == Token::Comma {
                        set.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

// ---------------------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------------------

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
    pub fn parse(selector: &str) -> Result<Self, String> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(format!("invalid selector: '{selector}'; can't understand '{part}'"));
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
pub fn unescape_value(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(format!("invalid field selector: invalid escape sequence: \\{c}")),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream prints the rune with %v, i.e. as a number.
            ',' | '=' => return Err(format!("invalid field selector: unescaped character in value: {}", c as u32)),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
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
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

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
            let got = LabelSelector::parse(input).err().unwrap_or_else(|| panic!("{input:?} parsed"));
            assert_eq!(got, want, "input {input:?}");
        }
        let long = format!("x={}", "a".repeat(64));
        let got = LabelSelector::parse(&long).unwrap_err();
        assert!(got.ends_with("Invalid value: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": must be no more than 63 characters"), "{got}");
        let long_key = format!("{}=a", "k".repeat(64));
        assert!(LabelSelector::parse(&long_key).unwrap_err().contains("name part must be no more than 63 characters"));
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
                (Err(e), Err(w)) => assert!(e.starts_with(w), "selector {sel}: {e}"),
                (got, want) => panic!("selector {sel}: got {got:?}, want {want:?}"),
            }
        }
        assert!(LabelSelector::from_meta(&json!(null)).unwrap().is_nothing());
        assert!(!LabelSelector::nothing().matches(&BTreeMap::new()));
        assert!(LabelSelector::everything().matches(&BTreeMap::new()));
    }

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
            let got = FieldSelector::parse(input).map(|s| {
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
