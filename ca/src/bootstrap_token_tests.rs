#![allow(clippy::type_complexity)]

use super::*;

const ID: &str = "abcdef";
const SECRET: &str = "0123456789abcdef";

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).unwrap_or_default()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn token() -> Token {
    Token { id: ID.into(), secret: SECRET.into() }
}

/// A Secret `kube-system/bootstrap-token-abcdef` of the token type with `pairs` as data.
fn view<'a>(pairs: &[(&'a str, &'a [u8])]) -> SecretView<'a> {
    SecretView {
        namespace: NAMESPACE,
        name: "bootstrap-token-abcdef",
        type_: Some(SECRET_TYPE),
        being_deleted: false,
        data: Some(pairs.iter().copied().collect()),
    }
}

/// [`view`] of text values.
fn text<'a>(pairs: &[(&'a str, &'a str)]) -> SecretView<'a> {
    let bytes: Vec<(&str, &[u8])> = pairs.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    view(&bytes)
}

fn set<'a>(mut s: SecretView<'a>, key: &'a str, value: &'a [u8]) -> SecretView<'a> {
    s.data.get_or_insert_with(Default::default).insert(key, value);
    s
}

fn unset<'a>(mut s: SecretView<'a>, key: &str) -> SecretView<'a> {
    s.data.get_or_insert_with(Default::default).remove(key);
    s
}

#[test]
fn tokens_parse_like_upstreams_pattern() {
    let cases: &[(&str, &str, Option<(&str, &str)>)] = &[
        ("well-formed", "abcdef.0123456789abcdef", Some(("abcdef", "0123456789abcdef"))),
        ("digits first", "07401b.f395accd246ae52d", Some(("07401b", "f395accd246ae52d"))),
        ("upper-case id", "ABCDEF.0123456789abcdef", None),
        ("upper-case secret", "abcdef.0123456789ABCDEF", None),
        ("short id", "abc.0123456789abcdef", None),
        ("long id", "abcdefg.0123456789abcdef", None),
        ("short secret", "abcdef.0123456789abcde", None),
        ("long secret", "abcdef.0123456789abcdef0", None),
        ("no dot", "abcdef0123456789abcdef", None),
        ("two dots", "abcdef.0123456789.abcdef", None),
        ("a trailing part", "abcdef.0123456789abcdef.x", None),
        ("dash for the dot", "abcdef-0123456789abcdef", None),
        ("punctuation", "abc-ef.0123456789abcdef", None),
        ("leading space", " abcdef.0123456789abcdef", None),
        ("trailing newline", "abcdef.0123456789abcdef\n", None),
        ("non-ASCII", "abcdéf.0123456789abcdef", None),
        ("a dot alone", ".", None),
        ("empty", "", None),
    ];
    for (name, input, want) in cases {
        assert_eq!(parse_token(input), *want, "{name}");
        let got = Token::parse(input);
        match want {
            Some((id, secret)) => {
                let t = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!((t.id(), t.secret()), (*id, *secret), "{name}");
                assert_eq!(t.expose(), *input, "{name}");
            }
            None => assert_eq!(got, Err(TokenError::Malformed), "{name}"),
        }
    }
    assert_eq!(
        TokenError::Malformed.to_string(),
        r#"the bootstrap token was not of the form "\\A([a-z0-9]{6})\\.([a-z0-9]{16})\\z""#
    );
}

#[test]
fn debug_never_shows_the_secret() {
    let shown = format!("{:?} {:?}", token(), text(&[(KEY_TOKEN_SECRET, SECRET)]));
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains("abcdef") && shown.contains(KEY_TOKEN_SECRET), "{shown}");
}

#[test]
fn generation_maps_bytes_below_252_and_skips_the_rest() {
    type Case = (&'static str, Vec<u8>, Result<&'static str, TokenError>);
    let seq = |n: usize| (0..n).map(|i| i as u8).collect::<Vec<u8>>();
    let cases: Vec<Case> = vec![
        ("bytes 0..22 map to the alphabet in order", seq(44), Ok("012345.6789abcdefghijkl")),
        (
            "252 and above are skipped, 36 wraps to 0, 251 is the last kept",
            [252u8, 255, 36, 71, 251].into_iter().chain(std::iter::repeat_n(1u8, 39)).collect(),
            Ok("0zz111.1111111111111111"),
        ),
        ("a generator that only yields 255 fails", vec![255; 44], Err(TokenError::Random)),
    ];
    for (name, bytes, want) in cases {
        let mut stream = bytes.iter().copied().cycle();
        let got = Token::generate_with(|buf| {
            buf.iter_mut().for_each(|b| *b = stream.next().unwrap_or(0));
            Ok(())
        });
        assert_eq!(got.map(|t| t.expose()), want.map(str::to_string), "{name}");
    }
    let failing = Token::generate_with(|_| Err(TokenError::Random));
    assert_eq!(failing, Err(TokenError::Random), "a failing generator");
}

#[test]
fn system_generation_is_well_formed_and_varies() {
    let a = Token::generate().unwrap_or_else(|e| panic!("{e}"));
    let b = Token::generate().unwrap_or_else(|e| panic!("{e}"));
    assert!(Token::parse(&a.expose()).is_ok(), "well-formed");
    assert_ne!(a, b, "two fresh tokens differ");
}

#[test]
fn validation_speaks_kubeadms_words() {
    let cases: &[(&str, &[&str], &[&str], Result<(), Vec<&str>>)] = &[
        ("defaults", DEFAULT_USAGES, DEFAULT_GROUPS, Ok(())),
        ("signing only, no groups", &["signing"], &[], Ok(())),
        ("no usages, no groups", &[], &[], Ok(())),
        (
            "unknown usages, sorted and deduplicated",
            &["signing", "zeta", "alpha", "zeta"],
            &[],
            Err(vec!["invalid bootstrap token usage string: alpha,zeta, valid usage options: signing,authentication"]),
        ),
        (
            "groups without authentication",
            &["signing"],
            DEFAULT_GROUPS,
            Err(vec!["token groups cannot be specified unless --usages includes \"authentication\""]),
        ),
        (
            "a group outside system:bootstrappers:",
            &["authentication"],
            &["system:masters"],
            Err(vec![
                r#"bootstrap group "system:masters" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
            ]),
        ),
        (
            "a group ending in a colon",
            &["authentication"],
            &["system:bootstrappers:x:"],
            Err(vec![
                r#"bootstrap group "system:bootstrappers:x:" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
            ]),
        ),
        (
            "every problem at once",
            &["bogus"],
            &["nope"],
            Err(vec![
                "invalid bootstrap token usage string: bogus, valid usage options: signing,authentication",
                "token groups cannot be specified unless --usages includes \"authentication\"",
                r#"bootstrap group "nope" is invalid (must match \Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z)"#,
            ]),
        ),
    ];
    for (name, usages, groups, want) in cases {
        let want = want.clone().map_err(|v| strings(&v));
        assert_eq!(validate(&strings(usages), &strings(groups)), want, "{name}");
    }
}

#[test]
fn groups_follow_the_pattern() {
    let long_ok = format!("system:bootstrappers:{}", "a".repeat(256));
    let too_long = format!("system:bootstrappers:{}", "a".repeat(257));
    let cases: &[(&str, &[u8], bool)] = &[
        ("kubeadm default", b"system:bootstrappers:kubeadm:default-node-token", true),
        ("one letter", b"system:bootstrappers:a", true),
        ("one digit", b"system:bootstrappers:0", true),
        ("a word", b"system:bootstrappers:worker", true),
        ("256 characters", long_ok.as_bytes(), true),
        ("257 characters", too_long.as_bytes(), false),
        ("nothing after the prefix", b"system:bootstrappers:", false),
        ("the base group", b"system:bootstrappers", false),
        ("upper case", b"system:bootstrappers:Worker", false),
        ("ends with a dash", b"system:bootstrappers:worker-", false),
        ("ends with a colon", b"system:bootstrappers:worker:", false),
        ("a space inside", b"system:bootstrappers:wor ker", false),
        ("a leading space", b" system:bootstrappers:worker", false),
        ("not text", b"system:bootstrappers:\xff", false),
        ("masters", b"system:masters", false),
        ("other prefix", b"system:nodes", false),
        ("empty", b"", false),
    ];
    for (name, g, want) in cases {
        assert_eq!(is_valid_group(g), *want, "{name}");
    }
}

#[test]
fn secrets_are_written_as_kubeadm_writes_them() {
    let now = at("2026-01-01T00:00:00.750Z");
    let spec = |ttl: Duration, usages: &[&str], groups: &[&str], description: &str| TokenSpec {
        token: token(),
        ttl,
        usages: strings(usages),
        groups: strings(groups),
        description: description.into(),
    };
    let cases: Vec<(&str, TokenSpec, Vec<(&str, &str)>)> = vec![
        (
            "defaults",
            spec(DEFAULT_TTL, DEFAULT_USAGES, DEFAULT_GROUPS, ""),
            vec![
                ("auth-extra-groups", "system:bootstrappers:kubeadm:default-node-token"),
                ("expiration", "2026-01-02T00:00:00Z"),
                ("token-id", "abcdef"),
                ("token-secret", "0123456789abcdef"),
                ("usage-bootstrap-authentication", "true"),
                ("usage-bootstrap-signing", "true"),
            ],
        ),
        (
            "ttl 0 never expires, description kept",
            spec(Duration::zero(), &["signing"], &[], "joins rack 7"),
            vec![
                ("description", "joins rack 7"),
                ("token-id", "abcdef"),
                ("token-secret", "0123456789abcdef"),
                ("usage-bootstrap-signing", "true"),
            ],
        ),
        (
            "negative ttl writes no expiration, as kubeadm",
            spec(Duration::seconds(-5), &[], &[], ""),
            vec![("token-id", "abcdef"), ("token-secret", "0123456789abcdef")],
        ),
        (
            "several groups joined by commas",
            spec(Duration::seconds(90), &["authentication"], &["system:bootstrappers:a", "system:bootstrappers:b"], ""),
            vec![
                ("auth-extra-groups", "system:bootstrappers:a,system:bootstrappers:b"),
                ("expiration", "2026-01-01T00:01:30Z"),
                ("token-id", "abcdef"),
                ("token-secret", "0123456789abcdef"),
                ("usage-bootstrap-authentication", "true"),
            ],
        ),
    ];
    for (name, spec, want) in cases {
        let data = secret_data(&spec, now);
        let want: BTreeMap<String, Vec<u8>> =
            want.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
        assert_eq!(data, want, "{name}");
        let pairs: Vec<(&str, &[u8])> = data.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
        assert_eq!(read_secret(&view(&pairs)).map(|i| i.token), Ok(token()), "{name}: reads back");
    }
}

#[test]
fn expiration_is_read_as_upstream_reads_it() {
    let now = at("2026-01-01T00:00:00Z");
    let cases: &[(&str, Option<&[u8]>, Expiration)] = &[
        ("no key", None, Expiration::Never),
        ("empty", Some(b""), Expiration::Never),
        (
            "in the future",
            Some(b"2026-01-01T01:00:00Z"),
            Expiration::At { at: at("2026-01-01T01:00:00Z"), remaining: Duration::hours(1) },
        ),
        (
            "offset converted to UTC",
            Some(b"2026-01-01T02:00:00+01:00"),
            Expiration::At { at: at("2026-01-01T01:00:00Z"), remaining: Duration::hours(1) },
        ),
        ("exactly now", Some(b"2026-01-01T00:00:00Z"), Expiration::Expired),
        ("in the past", Some(b"2025-12-31T23:59:59Z"), Expiration::Expired),
        ("unparsable counts as expired", Some(b"tomorrow"), Expiration::Expired),
        ("lower-case t counts as expired", Some(b"2030-01-01t00:00:00Z"), Expiration::Expired),
        ("not text counts as expired, not as absent", Some(b"2030-01-01T00:00:00Z\xff"), Expiration::Expired),
        ("invalid UTF-8 alone counts as expired", Some(b"\xff"), Expiration::Expired),
    ];
    for (name, value, want) in cases {
        let pairs: Vec<(&str, &[u8])> = value.map(|v| vec![(KEY_EXPIRATION, v)]).unwrap_or_default();
        assert_eq!(expiration(&view(&pairs), now), *want, "{name}");
    }
}

#[test]
fn signing_tokens() {
    let now = at("2026-01-01T00:00:00Z");
    let good = || {
        text(&[
            (KEY_TOKEN_ID, ID),
            (KEY_TOKEN_SECRET, SECRET),
            (KEY_USAGE_SIGNING, "true"),
            (KEY_EXPIRATION, "2026-01-02T00:00:00Z"),
        ])
    };
    let with = |edit: &dyn Fn(&mut SecretView<'static>)| {
        let mut s = good();
        edit(&mut s);
        s
    };
    let cases: Vec<(&str, SecretView<'static>, bool)> = vec![
        ("valid", good(), true),
        ("no expiration", unset(good(), KEY_EXPIRATION), true),
        ("expired", set(good(), KEY_EXPIRATION, b"2025-01-01T00:00:00Z"), false),
        ("unparsable expiration", set(good(), KEY_EXPIRATION, b"soon"), false),
        ("expiration not text", set(good(), KEY_EXPIRATION, b"\xff"), false),
        ("signing not true", set(good(), KEY_USAGE_SIGNING, b"yes"), false),
        ("signing missing", unset(good(), KEY_USAGE_SIGNING), false),
        ("id differs from the name", set(good(), KEY_TOKEN_ID, b"zzzzzz"), false),
        ("id missing", unset(good(), KEY_TOKEN_ID), false),
        ("secret missing", unset(good(), KEY_TOKEN_SECRET), false),
        ("secret malformed", set(good(), KEY_TOKEN_SECRET, b"short"), false),
        ("secret not text", set(good(), KEY_TOKEN_SECRET, b"0123456789abcde\xff"), false),
        ("wrong type", with(&|s| s.type_ = Some("Opaque")), false),
        ("other namespace", with(&|s| s.namespace = "default"), false),
        ("name without the prefix", with(&|s| s.name = "abcdef"), false),
        ("malformed id in the name", with(&|s| s.name = "bootstrap-token-ABCDEF"), false),
    ];
    for (name, s, want) in cases {
        assert_eq!(signing_token(&s, now), want.then(token), "{name}");
    }
}

#[test]
fn authentication_applies_every_rule() {
    let now = at("2026-01-01T00:00:00Z");
    let good = || {
        text(&[
            (KEY_TOKEN_ID, ID),
            (KEY_TOKEN_SECRET, SECRET),
            (KEY_USAGE_AUTHENTICATION, "true"),
            (KEY_EXPIRATION, "2030-01-01T00:00:00Z"),
        ])
    };
    let e = |k: &'static str, v: &'static str| set(good(), k, v.as_bytes());
    let g = |v: &'static [u8]| set(good(), KEY_EXTRA_GROUPS, v);
    let group_err = |g: &str| Err(AuthFailure::InvalidGroup { group: g.into() });
    type Case = (&'static str, SecretView<'static>, &'static str, Result<Vec<&'static str>, AuthFailure>);
    let cases: Vec<Case> = vec![
        ("valid", good(), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("no expiration", unset(good(), KEY_EXPIRATION), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("empty expiration", e(KEY_EXPIRATION, ""), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("expiration with offset", e(KEY_EXPIRATION, "2026-01-01T02:00:00+01:00"), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("description is ignored", e(KEY_DESCRIPTION, "for node n1"), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("signing usage is not needed", e(KEY_USAGE_SIGNING, "false"), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("type Opaque", SecretView { type_: Some("Opaque"), ..good() }, SECRET, Err(AuthFailure::InvalidType)),
        ("no type", SecretView { type_: None, ..good() }, SECRET, Err(AuthFailure::InvalidType)),
        ("no data", SecretView { data: None, ..good() }, SECRET, Err(AuthFailure::InvalidType)),
        ("wrong secret", good(), "0123456789abcdee", Err(AuthFailure::SecretMismatch)),
        ("no token-secret", unset(good(), KEY_TOKEN_SECRET), SECRET, Err(AuthFailure::SecretMismatch)),
        ("longer stored secret", e(KEY_TOKEN_SECRET, "0123456789abcdef0"), SECRET, Err(AuthFailure::SecretMismatch)),
        ("id mismatch", e(KEY_TOKEN_ID, "abcdeg"), SECRET, Err(AuthFailure::IdMismatch { expected: ID.into() })),
        ("no token-id", unset(good(), KEY_TOKEN_ID), SECRET, Err(AuthFailure::IdMismatch { expected: ID.into() })),
        (
            "expired",
            e(KEY_EXPIRATION, "2020-01-01T00:00:00Z"),
            SECRET,
            Err(AuthFailure::Expired { value: "2020-01-01T00:00:00Z".into() }),
        ),
        (
            "expires right now",
            e(KEY_EXPIRATION, "2026-01-01T00:00:00Z"),
            SECRET,
            Err(AuthFailure::Expired { value: "2026-01-01T00:00:00Z".into() }),
        ),
        (
            "expired by offset",
            e(KEY_EXPIRATION, "2026-01-01T00:30:00+01:00"),
            SECRET,
            Err(AuthFailure::Expired { value: "2026-01-01T00:30:00+01:00".into() }),
        ),
        ("unparsable expiration", e(KEY_EXPIRATION, "tomorrow"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        ("date-only expiration", e(KEY_EXPIRATION, "2030-01-01"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        ("fractional seconds", e(KEY_EXPIRATION, "2030-01-01T00:00:00.5Z"), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("lower-case t", e(KEY_EXPIRATION, "2030-01-01t00:00:00Z"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        ("space for T", e(KEY_EXPIRATION, "2030-01-01 00:00:00Z"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        ("lower-case z", e(KEY_EXPIRATION, "2030-01-01T00:00:00z"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        ("leap second", e(KEY_EXPIRATION, "2030-12-31T23:59:60Z"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        ("no zone", e(KEY_EXPIRATION, "2030-01-01T00:00:00"), SECRET, Err(AuthFailure::UnparsableExpiration)),
        (
            "non-UTF-8 expiration",
            set(good(), KEY_EXPIRATION, b"2030-01-01T00:00:00Z\xff"),
            SECRET,
            Err(AuthFailure::UnparsableExpiration),
        ),
        ("usage false", e(KEY_USAGE_AUTHENTICATION, "false"), SECRET, Err(AuthFailure::NotForAuthentication)),
        ("usage True", e(KEY_USAGE_AUTHENTICATION, "True"), SECRET, Err(AuthFailure::NotForAuthentication)),
        ("usage 1", e(KEY_USAGE_AUTHENTICATION, "1"), SECRET, Err(AuthFailure::NotForAuthentication)),
        ("usage missing", unset(good(), KEY_USAGE_AUTHENTICATION), SECRET, Err(AuthFailure::NotForAuthentication)),
        ("being deleted", SecretView { being_deleted: true, ..good() }, SECRET, Err(AuthFailure::Deleted)),
        (
            "extra groups, sorted and deduplicated",
            g(b"system:bootstrappers:worker,system:bootstrappers:kubeadm:default-node-token,system:bootstrappers:worker"),
            SECRET,
            Ok(vec![DEFAULT_GROUP, "system:bootstrappers:kubeadm:default-node-token", "system:bootstrappers:worker"]),
        ),
        ("an extra group", g(b"system:bootstrappers:x"), SECRET, Ok(vec![DEFAULT_GROUP, "system:bootstrappers:x"])),
        ("empty extra groups", g(b""), SECRET, Ok(vec![DEFAULT_GROUP])),
        ("a group outside the prefix", g(b"system:masters"), SECRET, group_err("system:masters")),
        ("one bad group spoils all", g(b"system:bootstrappers:worker,system:masters"), SECRET, group_err("system:masters")),
        (
            "spaces are not trimmed",
            g(b"system:bootstrappers:a, system:bootstrappers:b"),
            SECRET,
            group_err(" system:bootstrappers:b"),
        ),
        ("empty item", g(b"system:bootstrappers:a,"), SECRET, group_err("")),
        ("uppercase group", g(b"system:bootstrappers:Bad"), SECRET, group_err("system:bootstrappers:Bad")),
        ("bare default group", g(b"system:bootstrappers"), SECRET, group_err("system:bootstrappers")),
        ("non-UTF-8 group", g(b"system:bootstrappers:\xff"), SECRET, group_err("system:bootstrappers:\u{fffd}")),
    ];
    for (name, s, secret_part, want) in cases {
        let got = authenticate(&s, ID, secret_part, now);
        match (got, want) {
            (Ok(u), Ok(groups)) => {
                assert_eq!(u.name, "system:bootstrap:abcdef", "{name}");
                assert_eq!(u.groups, groups, "{name}");
            }
            (Err(e), Err(reason)) => {
                assert_eq!((e.namespace.as_str(), e.name.as_str()), (NAMESPACE, "bootstrap-token-abcdef"), "{name}");
                assert_eq!(e.reason, reason, "{name}");
                let shown = e.to_string();
                assert!(
                    shown.starts_with("bootstrap secret kube-system/bootstrap-token-abcdef matching bearer token "),
                    "{name}: names the secret: {shown}"
                );
                assert!(!shown.contains("0123456789abcde"), "{name}: the reason never holds the secret: {shown}");
            }
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn authentication_failures_speak_upstreams_words() {
    let cases: &[(AuthFailure, &str)] = &[
        (AuthFailure::Deleted, "is deleted and awaiting removal"),
        (AuthFailure::InvalidType, "has invalid type, expected bootstrap.kubernetes.io/token"),
        (AuthFailure::SecretMismatch, "has invalid value for key token-secret"),
        (AuthFailure::IdMismatch { expected: ID.into() }, "has invalid value for key token-id, expected abcdef"),
        (
            AuthFailure::Expired { value: "2020-01-01T00:00:00Z".into() },
            "has expired (expiration 2020-01-01T00:00:00Z)",
        ),
        (AuthFailure::UnparsableExpiration, "has an unparsable expiration, treated as expired"),
        (AuthFailure::NotForAuthentication, "not marked usage-bootstrap-authentication=true"),
        (
            AuthFailure::InvalidGroup { group: "system:masters".into() },
            r#"has invalid value for key auth-extra-groups: bootstrap group "system:masters" is invalid (must match system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9])"#,
        ),
    ];
    for (reason, want) in cases {
        assert_eq!(reason.to_string(), *want);
    }
}

#[test]
fn secrets_read_back_for_listing() {
    let full: &[(&str, &str)] = &[
        (KEY_TOKEN_ID, ID),
        (KEY_TOKEN_SECRET, SECRET),
        (KEY_EXPIRATION, "2026-01-02T03:04:05+02:00"),
        (KEY_DESCRIPTION, "rack 7"),
        (KEY_USAGE_SIGNING, "true"),
        (KEY_USAGE_AUTHENTICATION, "true"),
        ("usage-bootstrap-other", "false"),
        (KEY_EXTRA_GROUPS, "system:bootstrappers:a,system:bootstrappers:b"),
    ];
    let info = read_secret(&text(full)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.token, token());
    assert_eq!(info.description, "rack 7");
    assert_eq!(info.expires.map(|t| crate::rfc3339::format(&t)).as_deref(), Some("2026-01-02T03:04:05+02:00"));
    assert_eq!(info.usages, strings(&["authentication", "signing"]), "sorted, only \"true\"");
    assert_eq!(info.groups, strings(&["system:bootstrappers:a", "system:bootstrappers:b"]));

    let renamed = SecretView { name: "bootstrap-token-zzzzzz", ..text(full) };
    let cases: Vec<(&str, SecretView<'_>, &str)> = vec![
        ("no id", text(&[(KEY_TOKEN_SECRET, SECRET)]), "bootstrap Token Secret has no token-id data: bootstrap-token-abcdef"),
        ("name mismatch", renamed, "bootstrap token name is not of the form 'bootstrap-token-(token-id)'. Actual: \"bootstrap-token-zzzzzz\". Expected: \"bootstrap-token-abcdef\""),
        ("no secret", text(&[(KEY_TOKEN_ID, ID)]), "bootstrap Token Secret has no token-secret data: bootstrap-token-abcdef"),
        ("malformed secret", text(&[(KEY_TOKEN_ID, ID), (KEY_TOKEN_SECRET, "x")]), "bootstrap Token Secret is invalid and couldn't be parsed"),
        ("bad expiration", text(&[(KEY_TOKEN_ID, ID), (KEY_TOKEN_SECRET, SECRET), (KEY_EXPIRATION, "never")]), "can't parse expiration time of bootstrap token \"bootstrap-token-abcdef\""),
        (
            "expiration not text: an error, not \"never expires\"",
            set(text(&[(KEY_TOKEN_ID, ID), (KEY_TOKEN_SECRET, SECRET)]), KEY_EXPIRATION, b"2030-01-01T00:00:00Z\xff"),
            "bootstrap Token Secret bootstrap-token-abcdef has a value for key expiration that is not UTF-8 text",
        ),
        (
            "groups not text",
            set(text(&[(KEY_TOKEN_ID, ID), (KEY_TOKEN_SECRET, SECRET)]), KEY_EXTRA_GROUPS, b"system:bootstrappers:\xff"),
            "bootstrap Token Secret bootstrap-token-abcdef has a value for key auth-extra-groups that is not UTF-8 text",
        ),
    ];
    for (name, s, want) in cases {
        let err = read_secret(&s).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.starts_with(want), "{name}: {err}");
        assert!(!err.contains(SECRET), "{name}: the secret is never shown: {err}");
    }
    let bare = read_secret(&text(&[(KEY_TOKEN_ID, ID), (KEY_TOKEN_SECRET, SECRET)]));
    assert_eq!(
        bare.map(|i| (i.expires, i.usages, i.groups, i.description)),
        Ok((None, vec![], vec![], String::new())),
        "a bare token"
    );
}

#[test]
fn names_and_ids() {
    let cases: &[(&str, Option<&str>)] = &[
        ("bootstrap-token-abcdef", Some("abcdef")),
        ("bootstrap-token-abcde", None),
        ("bootstrap-token-ABCDEF", None),
        ("token-abcdef", None),
    ];
    for (name, want) in cases {
        assert_eq!(id_from_secret_name(name), *want, "{name}");
    }
    assert_eq!(secret_name("abcdef"), "bootstrap-token-abcdef");
    assert!(is_valid_id("a1b2c3") && !is_valid_id("a1b2c") && !is_valid_id("a1b2c3d"));
}
