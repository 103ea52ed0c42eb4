//! `metav1.Duration`'s JSON form: Go's `time.Duration` text (`1h0m0s`, `1.5s`, `300ms`),
//! parsed as `time.ParseDuration` does and written as `Duration.String` writes it.

/// Nanoseconds of a Go duration text; `None` when it is not one or does not fit an int64.
pub fn parse(s: &str) -> Option<i64> {
    kustos_ca::duration::parse(s).ok()
}

/// Go's `Duration.String` of `nanos`.
pub fn format(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let u = nanos.unsigned_abs();
    let frac = |v: u64, unit: u64| -> String {
        let (whole, rest) = (v / unit, v % unit);
        if rest == 0 {
            return whole.to_string();
        }
        let width = unit.ilog10() as usize;
        let digits = format!("{rest:0width$}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    };
    if u < 1_000_000_000 {
        let (unit, name) = if u < 1_000 {
            (1, "ns")
        } else if u < 1_000_000 {
            (1_000, "µs")
        } else {
            (1_000_000, "ms")
        };
        return format!("{sign}{}{name}", frac(u, unit));
    }
    let h = u / 3_600_000_000_000;
    let m = u / 60_000_000_000 % 60;
    let s = frac(u % 60_000_000_000, 1_000_000_000);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_texts_both_ways() {
        // (text as Go writes it, nanoseconds)
        let cases: &[(&str, i64)] = &[
            ("0s", 0),
            ("1ns", 1),
            ("1.5µs", 1_500),
            ("300ms", 300_000_000),
            ("1.5s", 1_500_000_000),
            ("1m30s", 90_000_000_000),
            ("1h0m0s", 3_600_000_000_000),
            ("2h45m0.5s", 9_900_500_000_000),
            ("-1m0s", -60_000_000_000),
        ];
        for (text, nanos) in cases {
            assert_eq!(format(*nanos), *text, "format {nanos}");
            assert_eq!(parse(text), Some(*nanos), "parse {text}");
        }
        let parsed: &[(&str, Option<i64>)] = &[
            ("3600s", Some(3_600_000_000_000)),
            ("1h30m", Some(5_400_000_000_000)),
            ("0", Some(0)),
            ("2us", Some(2_000)),
            (".5s", Some(500_000_000)),
            ("", None),
            ("5", None),
            ("1x", None),
            ("s", None),
            ("99999999999h", None),
        ];
        for (text, want) in parsed {
            assert_eq!(parse(text), *want, "parse {text:?}");
        }
    }
}
