//! RFC 3339 timestamps as Go's `time.RFC3339` layout reads and writes them, for values that
//! Go programs (kubeadm, kube-apiserver, kube-controller-manager) also read, such as a
//! bootstrap token's `expiration`.

use chrono::{DateTime, FixedOffset, SecondsFormat, Utc};

/// Parse as Go's `time.Parse(time.RFC3339, ..)` does: an upper-case `T` and `Z`, seconds up
/// to 59, optional fractional seconds; chrono alone would also take `t`, a space, `z` and a
/// leap second.
pub fn parse(s: &str) -> Option<DateTime<FixedOffset>> {
    let b = s.as_bytes();
    let strict = b.len() >= 20 && b[10] == b'T' && !s.ends_with('z') && b.get(17..19) != Some(b"60".as_slice());
    if !strict {
        return None;
    }
    DateTime::parse_from_rfc3339(s).ok()
}

/// Format as Go's `t.Format(time.RFC3339)`: whole seconds (a fraction is dropped, not
/// rounded), `Z` for a zero offset, `±hh:mm` otherwise.
pub fn format(t: &DateTime<FixedOffset>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// [`format`] of a UTC instant: `2006-01-02T15:04:05Z`.
pub fn format_utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_parses() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("UTC", "2026-01-01T00:00:00Z", Some("2026-01-01T00:00:00Z")),
            ("offset", "2026-01-01T02:00:00+01:00", Some("2026-01-01T02:00:00+01:00")),
            ("zero offset", "2026-01-01T00:00:00+00:00", Some("2026-01-01T00:00:00Z")),
            ("fraction dropped on output", "2026-01-01T00:00:00.9Z", Some("2026-01-01T00:00:00Z")),
            ("lower-case t", "2026-01-01t00:00:00Z", None),
            ("space separator", "2026-01-01 00:00:00Z", None),
            ("lower-case z", "2026-01-01T00:00:00z", None),
            ("leap second", "2030-12-31T23:59:60Z", None),
            ("date only", "2030-01-01", None),
            ("no zone", "2030-01-01T00:00:00", None),
            ("garbage", "tomorrow", None),
            ("empty", "", None),
        ];
        for (name, input, want) in cases {
            assert_eq!(parse(input).map(|t| format(&t)).as_deref(), *want, "{name}");
        }
    }

    #[test]
    fn formats_utc_in_whole_seconds() {
        let t = parse("2026-03-04T05:06:07.999Z").map(|t| t.with_timezone(&Utc));
        assert_eq!(t.map(format_utc).as_deref(), Some("2026-03-04T05:06:07Z"));
    }
}
