//! The YAML text of a JSON value as gnostic stores it in `Any.yaml` (the values of vendor
//! extensions, `default`, `example` and `enum` in the protobuf form of `/openapi/v2`).
//!
//! gnostic parses the JSON document into YAML nodes, clears their styles and marshals each
//! node with `gopkg.in/yaml.v3`; kubectl reads the text back with a YAML parser
//! (`k8s.io/kube-openapi/pkg/util/proto`: the `x-kubernetes-group-version-kind` of each
//! definition, the patch strategies). This writes what that marshaling writes: block style with
//! an indentation of 4 (2 past a sequence item's `- `), `{}`/`[]` for empty collections,
//! plain scalars where YAML reads them back as the same string, double quotes for strings
//! that would read back as another type (`""`, `"true"`, `"1"`, `"2024-01-02"`) and for ones
//! with characters plain and single-quoted scalars cannot hold, single quotes for the rest,
//! and literal blocks (`|-`) for multi-line strings.
//!
//! Departures, each for a reader's sake: strings YAML 1.1 reads as booleans (`yes`, `on`,
//! ...) are quoted (kubectl's reader is YAML 1.1); a multi-line string that starts with a
//! line break (which yaml.v3's literal block loses) or a space (whose indentation indicator
//! yaml.v3 gets wrong in a sequence item), would need a `+` chomping indicator or holds
//! U+2028/U+2029 is double-quoted; mapping keys are always written as simple keys.

use serde_json::{Map, Value};

/// The YAML document (ending in a newline) for `value`.
pub fn to_yaml(value: &Value) -> String {
    let mut e = Emitter { out: String::new(), column: 0, whitespace: true, indention: true };
    e.node(value, -1, false);
    if e.column > 0 {
        e.out.push('\n');
    }
    e.out
}

/// The writer's position, as yaml.v3's emitter keeps it: the column, whether the last thing
/// written was whitespace, and whether only indentation was written on this line so far.
struct Emitter {
    out: String,
    column: usize,
    whitespace: bool,
    indention: bool,
}

/// The indentation of a collection or scalar nested in a node at `indent`: past the `- ` of a
/// sequence item, else the next multiple of 4 (a block collection at the root starts at 0, a
/// block scalar's lines at 4).
fn nested_indent(indent: i32, in_sequence_item: bool, scalar: bool) -> i32 {
    if indent < 0 {
        if scalar {
            4
        } else {
            0
        }
    } else if in_sequence_item {
        indent + 2
    } else {
        4 * ((indent + 4) / 4)
    }
}

impl Emitter {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_str(&mut self, s: &str) {
        for c in s.chars() {
            self.put(c);
        }
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
        self.indention = true;
    }

    fn write_indent(&mut self, indent: i32) {
        let indent = indent.max(0) as usize;
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
    }

    fn indicator(&mut self, s: &str, need_whitespace: bool, is_whitespace: bool, is_indention: bool) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        self.put_str(s);
        self.whitespace = is_whitespace;
        self.indention = self.indention && is_indention;
    }

    /// `value`, nested in a node at `indent` (`-1`: the document root).
    fn node(&mut self, value: &Value, indent: i32, in_sequence_item: bool) {
        match value {
            Value::Object(m) if m.is_empty() => self.indicator("{}", true, false, false),
            Value::Array(a) if a.is_empty() => self.indicator("[]", true, false, false),
            Value::Object(m) => self.mapping(m, nested_indent(indent, in_sequence_item, false)),
            Value::Array(a) => {
                let indent = nested_indent(indent, in_sequence_item, false);
                for item in a {
                    self.write_indent(indent);
                    self.indicator("-", true, false, true);
                    self.node(item, indent, true);
                }
            }
            Value::String(s) => self.string(s, nested_indent(indent, in_sequence_item, true), false),
            Value::Null => self.plain("null"),
            Value::Bool(b) => self.plain(if *b { "true" } else { "false" }),
            Value::Number(n) => self.plain(&n.to_string()),
        }
    }

    fn mapping(&mut self, m: &Map<String, Value>, indent: i32) {
        for (key, value) in m {
            self.write_indent(indent);
            self.string(key, indent, true);
            self.indicator(":", false, false, false);
            self.node(value, indent, false);
        }
    }

    fn plain(&mut self, s: &str) {
        if !s.is_empty() && !self.whitespace {
            self.put(' ');
        }
        self.put_str(s);
        self.whitespace = false;
        self.indention = false;
    }

    /// A string scalar; `indent` is where a literal block's lines go.
    fn string(&mut self, s: &str, indent: i32, simple_key: bool) {
        match scalar_style(s, simple_key) {
            Style::Plain => self.plain(s),
            Style::Single => {
                self.indicator("'", true, false, false);
                self.put_str(&s.replace('\'', "''"));
                self.indicator("'", false, false, false);
            }
            Style::Double => {
                self.indicator("\"", true, false, false);
                self.put_str(&double_quoted(s));
                self.indicator("\"", false, false, false);
            }
            Style::Literal => {
                self.indicator("|", true, false, false);
                if !s.ends_with('\n') {
                    self.indicator("-", false, false, false);
                }
                self.whitespace = true;
                let mut line_start = true;
                for c in s.chars() {
                    if c == '\n' {
                        self.put_break();
                        line_start = true;
                    } else {
                        if line_start {
                            self.write_indent(indent);
                        }
                        self.put(c);
                        self.indention = false;
                        line_start = false;
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// YAML's printable characters (yaml.v3's `is_printable`).
fn printable(c: char) -> bool {
    matches!(c, '\n' | '\u{20}'..='\u{7E}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}') && c != '\u{FEFF}'
}

fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// The style yaml.v3 picks for a string scalar (block context).
fn scalar_style(s: &str, simple_key: bool) -> Style {
    let mut style = if s.contains('\n') {
        Style::Literal
    } else if reads_as_other_type(s) || reads_as_yaml11_bool(s) {
        Style::Double
    } else {
        Style::Plain
    };
    let a = analyze(s);
    if simple_key && a.line_breaks {
        style = Style::Double;
    }
    if style == Style::Plain && !a.plain_allowed {
        style = Style::Single;
    }
    if style == Style::Single && !a.single_allowed {
        style = Style::Double;
    }
    if style == Style::Literal {
        let keep_chomping = s.ends_with("\n\n") || s == "\n";
        let odd = s.starts_with(['\n', ' ']) || s.contains(['\u{2028}', '\u{2029}']);
        if !a.block_allowed || simple_key || keep_chomping || odd {
            style = Style::Double;
        }
    }
    style
}

struct Analysis {
    line_breaks: bool,
    plain_allowed: bool,
    single_allowed: bool,
    block_allowed: bool,
}

/// yaml.v3's `yaml_emitter_analyze_scalar`, for block context.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis { line_breaks: false, plain_allowed: true, single_allowed: true, block_allowed: false };
    }
    let chars: Vec<char> = s.chars().collect();
    let blank =
        |c: Option<&char>| matches!(c, None | Some(' ' | '\t' | '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'));
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let (mut line_breaks, mut special, mut tabs) = (false, false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) = (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = blank(chars.get(i + 1));
        let last = i + 1 == chars.len();
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"' | '%' | '@' | '`' => {
                    block_indicators = true
                }
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if c == '\t' {
            tabs = true;
        } else if !printable(c) {
            special = true;
        }
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = blank(Some(&c));
    }
    let mut a = Analysis { line_breaks, plain_allowed: true, single_allowed: true, block_allowed: true };
    if leading_space || leading_break || trailing_space || trailing_break || line_breaks || block_indicators {
        a.plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space || space_break || tabs || special {
        a.plain_allowed = false;
        a.single_allowed = false;
    }
    if space_break || special {
        a.block_allowed = false;
    }
    a
}

/// Whether YAML reads the plain scalar `s` as something other than a string (yaml.v3's
/// `resolve`): null, a boolean, a number, a timestamp, the merge key.
fn reads_as_other_type(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", ".nan", ".NaN", ".NAN",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", "<<",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let Some(first) = s.chars().next() else { return true };
    match first {
        '.' => s.parse::<f64>().is_ok(),
        '0'..='9' | '+' | '-' => is_timestamp(s) || is_number(&s.replace('_', "")),
        _ => false,
    }
}

/// The strings YAML 1.1 reads as booleans (yaml.v3 quotes them when it marshals a Go string).
fn reads_as_yaml11_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF"
    )
}

/// An integer (decimal, `0x`, `0o`, `0b`, legacy octal) or a float as yaml.v3 reads them.
fn is_number(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    if unsigned.is_empty() {
        return false;
    }
    let radix = |prefix: &str, ok: fn(char) -> bool| {
        unsigned.strip_prefix(prefix).is_some_and(|d| !d.is_empty() && d.chars().all(ok))
    };
    if radix("0x", |c| c.is_ascii_hexdigit())
        || radix("0X", |c| c.is_ascii_hexdigit())
        || radix("0o", |c| ('0'..='7').contains(&c))
        || radix("0b", |c| c == '0' || c == '1')
    {
        return true;
    }
    // `[0-9]+(\.[0-9]*)?` or `\.[0-9]+`, then an optional exponent.
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (!int.is_empty() && digits(int) && digits(frac)) || (int.is_empty() && !frac.is_empty() && digits(frac))
        }
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

/// The timestamp forms yaml.v3 reads: `YYYY-M-D`, optionally followed by `T`/`t`/space and a
/// time `h:m:s[.frac]` with an optional zone (`Z` or `±hh:mm`, not after a space).
fn is_timestamp(s: &str) -> bool {
    let number =
        |t: &str, min: usize, max: usize| (min..=max).contains(&t.len()) && t.chars().all(|c| c.is_ascii_digit());
    let (date, time) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some((&s[i..i + 1], &s[i + 1..]))),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let date_ok = matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some(y), Some(m), Some(d), None) if number(y, 4, 4) && number(m, 1, 2) && number(d, 1, 2)
    );
    let Some((separator, time)) = time else { return date_ok };
    let (clock, zone) = match time.find(['Z', '+', '-']) {
        Some(i) => (&time[..i], Some(&time[i..])),
        None => (time, None),
    };
    let (hms, frac) = match clock.split_once('.') {
        Some((hms, frac)) => (hms, Some(frac)),
        None => (clock, None),
    };
    let mut hms = hms.split(':');
    let clock_ok = matches!(
        (hms.next(), hms.next(), hms.next(), hms.next()),
        (Some(h), Some(m), Some(sec), None) if number(h, 1, 2) && number(m, 1, 2) && number(sec, 1, 2)
    ) && frac.is_none_or(|f| number(f, 1, 9));
    let zone_ok = match zone {
        None => true,
        Some(_) if separator == " " => false,
        Some("Z") => true,
        Some(z) => {
            let mut hm = z[1..].split(':');
            matches!((hm.next(), hm.next(), hm.next()), (Some(h), Some(m), None) if number(h, 2, 2) && number(m, 2, 2))
        }
    };
    date_ok && clock_ok && zone_ok
}

/// The inside of a double-quoted scalar: yaml.v3's escapes for breaks, quotes, backslashes and
/// characters YAML cannot print.
fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if printable(c) && !is_break(c) && c != '"' && c != '\\' {
            out.push(c);
            continue;
        }
        out.push('\\');
        match c {
            '\0' => out.push('0'),
            '\u{07}' => out.push('a'),
            '\u{08}' => out.push('b'),
            '\t' => out.push('t'),
            '\n' => out.push('n'),
            '\u{0B}' => out.push('v'),
            '\u{0C}' => out.push('f'),
            '\r' => out.push('r'),
            '\u{1B}' => out.push('e'),
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '\u{85}' => out.push('N'),
            '\u{A0}' => out.push('_'),
            '\u{2028}' => out.push('L'),
            '\u{2029}' => out.push('P'),
            c if (c as u32) <= 0xFF => out.push_str(&format!("x{:02X}", c as u32)),
            c if (c as u32) <= 0xFFFF => out.push_str(&format!("u{:04X}", c as u32)),
            c => out.push_str(&format!("U{:08X}", c as u32)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_as_yaml_v3_marshals_them() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("string", json!("atomic"), "atomic\n"),
            ("empty string", json!(""), "\"\"\n"),
            ("integer", json!(5), "5\n"),
            ("float", json!(1.5), "1.5\n"),
            ("bool", json!(true), "true\n"),
            ("null", Value::Null, "null\n"),
            ("list of strings", json!(["name", "port"]), "- name\n- port\n"),
            (
                "group version kind",
                json!([{"group": "", "kind": "ConfigMap", "version": "v1"}]),
                "- group: \"\"\n  kind: ConfigMap\n  version: v1\n",
            ),
            (
                "an operation's group version kind",
                json!({"group": "apps", "kind": "Deployment", "version": "v1"}),
                "group: apps\nkind: Deployment\nversion: v1\n",
            ),
            ("nested mapping", json!({"a": {"b": "c"}}), "a:\n    b: c\n"),
            ("sequence in a mapping", json!({"a": [1, 2]}), "a:\n    - 1\n    - 2\n"),
            (
                "mapping in a nested sequence",
                json!({"a": {"b": [{"c": 1, "d": 2}]}}),
                "a:\n    b:\n        - c: 1\n          d: 2\n",
            ),
            (
                "sequence under a sequence item's key",
                json!({"v": ["A", 1, {"B": [2, 3]}]}),
                "v:\n    - A\n    - 1\n    - B:\n        - 2\n        - 3\n",
            ),
            ("sequence in a sequence", json!([["a", "b"], "c"]), "- - a\n  - b\n- c\n"),
            ("empty collections", json!({"a": {}, "b": [], "c": [{}]}), "a: {}\nb: []\nc:\n    - {}\n"),
            ("root empty mapping", json!({}), "{}\n"),
            ("multi-line string", json!({"v": ["A", "B\nC"]}), "v:\n    - A\n    - |-\n      B\n      C\n"),
            ("multi-line string in a mapping", json!({"a": "x\n\ny\n"}), "a: |\n    x\n\n    y\n"),
            (
                "literal then a key",
                json!({"a": "x\n", "b": "x\ny", "c": 1}),
                "a: |\n    x\nb: |-\n    x\n    y\nc: 1\n",
            ),
            ("leading break", json!("\nx"), "\"\\nx\"\n"),
            ("multi-line string at the root", json!("x\ny"), "|-\n    x\n    y\n"),
        ];
        for (name, value, want) in cases {
            assert_eq!(to_yaml(&value), want, "case {name}");
        }
    }

    #[test]
    fn string_styles() {
        let cases: &[(&str, &str, &str)] = &[
            ("plain word", "merge", "merge\n"),
            ("plain with spaces", "a b c", "a b c\n"),
            ("plain with inner colon", "a:b", "a:b\n"),
            ("patch strategy list", "merge,retainKeys", "merge,retainKeys\n"),
            ("reads as a bool", "true", "\"true\"\n"),
            ("reads as null", "null", "\"null\"\n"),
            ("reads as an integer", "80", "\"80\"\n"),
            ("reads as hex", "0x1F", "\"0x1F\"\n"),
            ("reads as a float", "1e3", "\"1e3\"\n"),
            ("reads as a float 2", ".5", "\".5\"\n"),
            ("reads as a timestamp", "2024-01-02", "\"2024-01-02\"\n"),
            ("reads as a timestamp with time", "2024-01-02T03:04:05Z", "\"2024-01-02T03:04:05Z\"\n"),
            ("version is plain", "1.2.3", "1.2.3\n"),
            ("YAML 1.1 bool", "on", "\"on\"\n"),
            ("indicator first", "*", "'*'\n"),
            ("colon space", "a: b", "'a: b'\n"),
            ("comment", "a #b", "'a #b'\n"),
            ("single quote inside", "'x'", "'''x'''\n"),
            ("leading space", " x", "' x'\n"),
            ("dash space", "- x", "'- x'\n"),
            ("dash word", "-x", "-x\n"),
            ("document marker", "---", "'---'\n"),
            ("tab", "a\tb", "\"a\\tb\"\n"),
            ("quote and backslash with tab", "\"\\\t", "\"\\\"\\\\\\t\"\n"),
            ("control", "a\u{1}", "\"a\\x01\"\n"),
            ("unicode printable", "héllo", "héllo\n"),
            ("astral", "a😀", "\"a\\U0001F600\"\n"),
            ("multi-line with trailing space", "a \nb", "\"a \\nb\"\n"),
            ("keep chomping", "a\n\n", "\"a\\n\\n\"\n"),
            ("leading space multi-line", " a\nb", "\" a\\nb\"\n"),
        ];
        for (name, s, want) in cases {
            assert_eq!(to_yaml(&json!(s)), *want, "case {name}");
        }
    }

    #[test]
    fn keys_are_quoted_like_values() {
        assert_eq!(
            to_yaml(&json!({"": 1, "true": 2, "a b": 3, "x\ny": 4})),
            "\"\": 1\na b: 3\n\"true\": 2\n\"x\\ny\": 4\n"
        );
    }

    /// Whatever the style, a YAML reader gets the same value back.
    #[test]
    fn values_read_back_unchanged() {
        let strings = [
            "",
            " ",
            "a",
            "true",
            "~",
            "0",
            "-1",
            "0o17",
            "1_000",
            "1:20",
            "2024-1-2",
            "2024-01-02 03:04:05",
            "- a",
            "a: b",
            "a #b",
            "#a",
            "'",
            "\"",
            "\\",
            "a\tb",
            "\u{7}",
            "é",
            "😀",
            "\u{FEFF}x",
            "a\nb",
            "a\n",
            "a\n\n",
            "\n",
            "\na",
            " a\nb",
            "a \nb",
            "a\n b",
            "x\u{2028}y",
            "---",
            "...",
            "? a",
            ": a",
            "a:",
            "[a]",
            "{a}",
            "*a",
            "&a",
            "!a",
            "|a",
            ">a",
            "%a",
            "@a",
            "`a",
            "a,b",
            "<<",
            ".5",
            ".inf",
            "-.INF",
            ".nan",
            "0x1F",
        ];
        for text in strings {
            for value in [json!(text), json!([text]), json!({text: text}), json!({"k": [{text: [text]}]})] {
                let yaml = to_yaml(&value);
                let back: Value = serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("{value}: {yaml:?}: {e}"));
                assert_eq!(back, value, "{yaml:?}");
            }
        }
        let others =
            json!({"n": null, "b": false, "i": -3, "f": 0.25, "big": 18446744073709551615u64, "e": [], "m": {}});
        let back: Value = serde_yaml::from_str(&to_yaml(&others)).expect("YAML");
        assert_eq!(back, others);
    }
}
