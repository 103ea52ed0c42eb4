//! The log output of every long-running command: tracing records on stderr, as text or as
//! one JSON object a line (`--log-format`).
//!
//! Log fields carry what clients sent — user agents, paths, user names from certificates
//! and tokens, object names, CSR subjects, error messages quoting input — so every value and
//! every message is escaped on its way out ([`escape`]): C0 controls and DEL, C1 controls,
//! bidirectional-text controls and the Unicode line and paragraph separators become visible
//! escapes (`\x1b`, `\r\n`, `\u{9b}`, `\u{202e}`). A client can then neither forge a log line,
//! nor send a terminal escape sequence to whoever reads the log, nor reorder what a reader
//! sees. In JSON the escapes are part of the decoded string values, so a collector that
//! decodes the record shows the same escaped text.
//!
//! In: the `--log-format` value and tracing events. Out: lines on stderr.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use tracing::{Event, Subscriber};
use tracing_subscriber::field::MakeExt as _;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// Whether `c` is shown escaped: C0 controls, DEL, C1 controls, the bidirectional-text
/// controls (marks, embeddings, overrides, isolates) and the line and paragraph separators.
pub fn needs_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character of [`needs_escape`] replaced: `\n`, `\r`, `\t`, `\xNN` for the
/// other C0 controls and DEL, `\u{NN}` for the rest. Everything else is left as it is.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c <= '\u{7f}' && needs_escape(c) => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The level filter without `RUST_LOG`: `info`. (Until the controllers ran on a work queue
/// of their own, kube-runtime's controller opened a `reconciling object` span at `info` for
/// every reconcile, ~3 % of the server's CPU in the bootstrap storm, and this filter left
/// kube-runtime at `warn`; nothing of kube-runtime that runs now writes at `info`.)
pub const DEFAULT_FILTER: &str = "info";

/// Installs the process-wide subscriber: `format` is `text` or `json`; the level filter
/// comes from `RUST_LOG` (default [`DEFAULT_FILTER`]).
pub fn init(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| DEFAULT_FILTER.into());
    // Colours only on a terminal: a log file or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Also routes the `log` records of dependencies (rustls) into it.
    let _ = tracing_subscriber::util::SubscriberInitExt::try_init(subscriber(format, filter, ansi, std::io::stderr));
}

/// The subscriber [`init`] installs, writing to `writer`.
fn subscriber<W>(
    format: &str,
    filter: tracing_subscriber::EnvFilter,
    ansi: bool,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    if format == "json" {
        Box::new(builder.json().event_format(EscapedJson(format::format().json())).finish())
    } else {
        // The default text layout (`message name=value ...`, values of `?` fields as Debug),
        // each field escaped.
        let fields = format::debug_fn(|w: &mut Writer<'_>, field: &tracing::field::Field, value: &dyn fmt::Debug| {
            let text = format!("{value:?}");
            match field.name() {
                "message" => w.write_str(&escape(&text)),
                name => write!(w, "{}={}", name.trim_start_matches("r#"), escape(&text)),
            }
        })
        .delimited(" ");
        Box::new(builder.fmt_fields(fields).finish())
    }
}

/// tracing-subscriber's JSON record, with every string in it passed through [`escape`]
/// (its own JSON escaping covers C0 only, and a decoding collector would undo it).
struct EscapedJson(format::Format<Json>);

impl<S, N> FormatEvent<S, N> for EscapedJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut record = String::new();
        self.0.format_event(ctx, Writer::new(&mut record), event)?;
        writer.write_str(&escape_json_record(&record))
    }
}

/// The first keys of a record, in tracing-subscriber's order; others follow sorted.
const JSON_KEY_ORDER: [&str; 6] = ["timestamp", "level", "fields", "target", "span", "spans"];

/// One JSON record (a line) with its strings escaped, keys in [`JSON_KEY_ORDER`]. A line that
/// is not JSON is escaped as text.
fn escape_json_record(line: &str) -> String {
    let Ok(serde_json::Value::Object(mut record)) = serde_json::from_str::<serde_json::Value>(line) else {
        return format!("{}\n", escape(line.trim_end_matches('\n')));
    };
    let mut out = String::with_capacity(line.len() + 16);
    out.push('{');
    let mut keys: Vec<String> =
        JSON_KEY_ORDER.iter().map(|k| k.to_string()).filter(|k| record.contains_key(k)).collect();
    let mut rest: Vec<String> = record.keys().filter(|k| !JSON_KEY_ORDER.contains(&k.as_str())).cloned().collect();
    rest.sort();
    keys.extend(rest);
    for (i, key) in keys.iter().enumerate() {
        let value = escape_json_value(record.remove(key).unwrap_or_default());
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::Value::String(escape(key).into_owned()).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push_str("}\n");
    out
}

fn escape_json_value(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => match escape(&s) {
            Cow::Borrowed(_) => Value::String(s),
            Cow::Owned(e) => Value::String(e),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(escape_json_value).collect()),
        Value::Object(o) => {
            Value::Object(o.into_iter().map(|(k, v)| (escape(&k).into_owned(), escape_json_value(v))).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn escape_table() {
        // input, output
        let cases: &[(&str, &str)] = &[
            ("plain text / with: punctuation", "plain text / with: punctuation"),
            ("ünïcödé 名前 😀", "ünïcödé 名前 😀"),
            ("a\nb\r\nc\td", "a\\nb\\r\\nc\\td"),
            ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
            ("nul\0bell\x07del\x7f", "nul\\x00bell\\x07del\\x7f"),
            ("\u{80}\u{85}\u{9b}31m\u{9f}", "\\u{80}\\u{85}\\u{9b}31m\\u{9f}"),
            ("\u{a0}nbsp stays", "\u{a0}nbsp stays"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            ("\u{202a}\u{202b}\u{202c}\u{202d}", "\\u{202a}\\u{202b}\\u{202c}\\u{202d}"),
            ("\u{2066}\u{2067}\u{2068}\u{2069}", "\\u{2066}\\u{2067}\\u{2068}\\u{2069}"),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            ("line\u{2028}para\u{2029}", "line\\u{2028}para\\u{2029}"),
            ("zero width \u{200b} and joiner \u{200d} stay", "zero width \u{200b} and joiner \u{200d} stay"),
            ("already \\x1b escaped", "already \\x1b escaped"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(escape(input), *want, "{input:?}");
            assert!(!escape(input).chars().any(needs_escape), "{input:?}");
        }
        assert!(matches!(escape("clean"), Cow::Borrowed(_)), "no copy without anything to escape");
    }

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What one warning with hostile fields (Display, Debug, str, in the message) looks like.
    fn logged(format: &str) -> String {
        let buf = Buffer::default();
        let sink = buf.clone();
        let sub = subscriber(format, "info".into(), false, move || sink.clone());
        let evil = "ua\x1b[31m\r\n2026-01-01T00:00:00Z ERROR fake\u{9b}2J\u{202e}txt.exe\u{2028}";
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("reconciling object", object = %evil);
            let _in = span.enter();
            tracing::warn!(user_agent = %evil, path = ?evil, user = evil, "denied {}", evil);
        });
        let bytes = buf.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// The default filter: everyone's records at `info` and above, nothing below.
    #[test]
    fn the_default_filter_is_info() {
        use tracing::{enabled, Level};
        let sub = subscriber("text", DEFAULT_FILTER.into(), false, std::io::sink);
        tracing::subscriber::with_default(sub, || {
            // case, enabled, wanted
            let cases = [
                ("our controllers at info", enabled!(target: "kustos_controllers::csr_approver", Level::INFO), true),
                ("the apiserver at info", enabled!(target: "kustos_apiserver::audit", Level::INFO), true),
                ("our controllers at debug", enabled!(target: "kustos_controllers::csr_signer", Level::DEBUG), false),
                ("kube-runtime's watcher at warn", enabled!(target: "kube_runtime::watcher", Level::WARN), true),
                ("kube-runtime's watcher at debug", enabled!(target: "kube_runtime::watcher", Level::DEBUG), false),
                ("kube's client at info", enabled!(target: "kube_client::client", Level::INFO), true),
            ];
            for (case, got, want) in cases {
                assert_eq!(got, want, "{case}");
            }
        });
    }

    #[test]
    fn text_records_escape_every_field_span_and_message() {
        let out = logged("text");
        assert_eq!(out.lines().count(), 1, "one line: {out}");
        assert!(!out.trim_end_matches('\n').chars().any(needs_escape), "nothing raw: {out:?}");
        for want in [
            "user_agent=ua\\x1b[31m\\r\\n2026",
            "fake\\u{9b}2J\\u{202e}txt.exe\\u{2028}",
            "denied ua\\x1b",
            "object=ua\\x1b",
        ] {
            assert!(out.contains(want), "{want} in {out}");
        }
        assert!(out.contains(" WARN "), "the level: {out}");
    }

    #[test]
    fn json_records_escape_every_string_and_stay_json() {
        let out = logged("json");
        assert_eq!(out.lines().count(), 1, "one line: {out}");
        assert!(!out.trim_end_matches('\n').chars().any(needs_escape), "nothing raw: {out:?}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let escaped = "ua\\x1b[31m\\r\\n2026-01-01T00:00:00Z ERROR fake\\u{9b}2J\\u{202e}txt.exe\\u{2028}";
        assert_eq!(v["fields"]["user_agent"], escaped, "{out}");
        assert_eq!(v["fields"]["user"], escaped, "{out}");
        assert_eq!(v["fields"]["message"], format!("denied {escaped}"), "{out}");
        assert_eq!(v["span"]["object"], escaped, "{out}");
        assert_eq!(v["level"], "WARN", "{out}");
        assert!(out.starts_with("{\"timestamp\":"), "tracing-subscriber's key order: {out}");
    }

    #[test]
    fn a_record_that_is_not_json_is_escaped_as_text() {
        assert_eq!(escape_json_record("not json\x1b\n"), "not json\\x1b\n");
    }
}
