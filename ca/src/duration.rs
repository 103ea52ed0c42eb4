//! Go's `time.ParseDuration`, the one reader of duration texts in the workspace: command-line
//! flags (`--ttl`, `--cluster-signing-duration`, ...), `metav1.Duration` fields on the wire and
//! CRD schemas' `format: duration`. What enters is a text; what leaves is its nanoseconds
//! (an `i64`, as Go's `time.Duration`) or Go's error message.

/// The units Go reads and their nanoseconds.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// The nanoseconds of `s` as Go's `time.ParseDuration` reads it: an optional sign, then one or
/// more decimal numbers (optionally with a fraction, truncated below a nanosecond) each followed
/// by a unit among ns, us (µs), ms, s, m and h; a bare `0` is zero. The result fits an `i64`
/// (`-9223372036854775808ns` included). The error is Go's message.
pub fn parse(s: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let limit = if negative { 1u128 << 63 } else { (1u128 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after) = rest.split_at(int_len);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(f.bytes().take_while(u8::is_ascii_digit).count()),
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let nanos = match UNITS.iter().find(|(u, _)| *u == unit) {
            Some((_, n)) => *n,
            None if unit.is_empty() => return Err(format!("time: missing unit in duration {s:?}")),
            None => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        // Digits past what an i64 holds overflow here, not in the parse of a longer number.
        let whole: u128 = if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| invalid())? };
        let mut value = whole.checked_mul(nanos).ok_or_else(invalid)?;
        // The fraction, digit by digit, as Go scales it (truncating below a nanosecond).
        let mut scale = nanos;
        for d in frac_part.bytes().take(30) {
            scale /= 10;
            value += u128::from(d - b'0') * scale;
        }
        total = total.checked_add(value).filter(|t| *t <= limit).ok_or_else(invalid)?;
        rest = after;
    }
    // `limit` keeps `total` within 2^63, so the cast and the negation below are exact.
    let magnitude = total as i128;
    i64::try_from(if negative { -magnitude } else { magnitude }).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases: &[(&str, Result<i64, &str>)] = &[
            ("0", Ok(0)),
            ("-0", Ok(0)),
            ("+0", Ok(0)),
            ("0s", Ok(0)),
            ("24h", Ok(24 * 3_600_000_000_000)),
            ("1h30m", Ok(5_400_000_000_000)),
            ("8760h0m0s", Ok(8760 * 3_600_000_000_000)),
            ("90s", Ok(90_000_000_000)),
            ("1.5s", Ok(1_500_000_000)),
            (".5m", Ok(30_000_000_000)),
            ("1.s", Ok(1_000_000_000)),
            ("300ms", Ok(300_000_000)),
            ("2us", Ok(2_000)),
            ("2\u{b5}s", Ok(2_000)),
            ("2\u{3bc}s", Ok(2_000)),
            ("7ns", Ok(7)),
            ("1.0000000019s", Ok(1_000_000_001)),
            ("-1h", Ok(-3_600_000_000_000)),
            ("+5s", Ok(5_000_000_000)),
            ("2h45m0.5s", Ok(9_900_500_000_000)),
            ("9223372036854775807ns", Ok(i64::MAX)),
            ("-9223372036854775808ns", Ok(i64::MIN)),
            ("9223372036854775808ns", Err("time: invalid duration \"9223372036854775808ns\"")),
            ("1", Err("time: missing unit in duration \"1\"")),
            ("1d", Err("time: unknown unit \"d\" in duration \"1d\"")),
            ("1 h", Err("time: unknown unit \" h\" in duration \"1 h\"")),
            ("", Err("time: invalid duration \"\"")),
            ("-", Err("time: invalid duration \"-\"")),
            ("h", Err("time: invalid duration \"h\"")),
            ("1h-", Err("time: unknown unit \"h-\" in duration \"1h-\"")),
            (".s", Err("time: invalid duration \".s\"")),
            ("1.2.3s", Err("time: missing unit in duration \"1.2.3s\"")),
            ("9999999999999h", Err("time: invalid duration \"9999999999999h\"")),
            (
                "99999999999999999999999999999999999999999ns",
                Err("time: invalid duration \"99999999999999999999999999999999999999999ns\""),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), want.map_err(str::to_string), "{input:?}");
        }
    }
}
