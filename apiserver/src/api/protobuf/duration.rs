//! `metav1.Duration`'s JSON form: Go's `time.Duration` text (`1h0m0s`, `1.5s`, `300ms`),
//! parsed as `time.ParseDuration` does and written as `Duration.String` writes it.

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Nanoseconds of a Go duration text; `None` when it is not one or does not fit an int64.
pub fn parse(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_end);
        let (frac, after) = match after.strip_prefix('.') {
            Some(a) => {
                let end = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(end)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let unit_end = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale = UNITS.iter().find(|(u, _)| *u == unit)?.1;
        let whole: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut part = whole.checked_mul(scale)?;
        // The fraction, digit by digit, truncated as Go does.
        let mut f = scale;
        for d in frac.bytes().take(30) {
            f /= 10;
            part += u128::from(d - b'0') * f;
        }
        total = total.checked_add(part)?;
        rest = next;
    }
    let v = i64::try_from(total).ok().or_else(|| (neg && total == 1u128 << 63).then_some(i64::MIN))?;
    Some(if neg { v.wrapping_neg() } else { v })
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
