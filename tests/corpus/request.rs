//! What surrounds a body: headers (impersonation, content negotiation, user agent), bearer
//! tokens, query parameters, label and field selectors, watches, gzip bodies and chunked
//! bodies past the limit.

use base64::Engine as _;

use super::wire::gzip_bomb;
use super::*;

const REVIEW: &str = r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub fn cases(ctx: &Ctx) -> Vec<Case> {
    let mut c = Vec::new();
    headers(&mut c);
    tokens(&mut c);
    query(&mut c, ctx);
    selectors(&mut c, ctx);
    bodies(&mut c);
    c
}

fn review(name: &str, who: Who) -> Case {
    Case::post(name, who, SSR, JSON, REVIEW)
}

fn headers(c: &mut Vec<Case>) {
    for framing in [Framing::H1, Framing::H2] {
        let tag = if framing == Framing::H1 { "HTTP/1.1" } else { "HTTP/2" };
        // Impersonation: the admin may; a node may not (403 before any work).
        let mut imp = review(&format!("headers ({tag}): 90 Impersonate-Extra of 3 KB, admin"), Who::Admin)
            .framing(framing)
            .header("impersonate-user", "someone");
        for i in 0..90 {
            imp = imp.header(&format!("impersonate-extra-k{i}"), "v".repeat(3000));
        }
        c.push(imp.expect(&[201, 431]));
        let mut imp = review(&format!("headers ({tag}): 5,000 Impersonate-Group values, node"), Who::Node)
            .framing(framing)
            .header("impersonate-user", "someone");
        imp = imp.header("impersonate-group", (0..5_000).map(|i| format!("g{i}")).collect::<Vec<_>>().join(","));
        c.push(imp.expect(&[403, 431]));
        let accept = (0..30_000).map(|i| format!("application/json;q=0.{}", i % 10)).collect::<Vec<_>>().join(",");
        c.push(
            review(&format!("headers ({tag}): Accept of 30k entries"), Who::ServiceAccount)
                .framing(framing)
                .header("accept", accept)
                .expect(&[201, 406, 431]),
        );
        let params = (0..20_000).map(|i| format!("p{i}=v")).collect::<Vec<_>>().join(";");
        c.push(
            review(&format!("headers ({tag}): Accept with 20k parameters"), Who::ServiceAccount)
                .framing(framing)
                .header("accept", format!("application/json;{params}"))
                .expect(&[201, 406, 431]),
        );
        c.push(
            review(&format!("headers ({tag}): a 300 KB User-Agent"), Who::ServiceAccount)
                .framing(framing)
                .header("user-agent", "u".repeat(300_000))
                .expect(&[201, 431]),
        );
        let mut many = review(&format!("headers ({tag}): 120 headers"), Who::ServiceAccount).framing(framing);
        for i in 0..120 {
            many = many.header(&format!("x-h{i}"), "v");
        }
        c.push(many.expect(&[201, 431]));
        c.push(
            review(&format!("headers ({tag}): Content-Type of 100k parameters"), Who::ServiceAccount)
                .framing(framing)
                .content_type(&format!(
                    "application/json;{}",
                    (0..10_000).map(|i| format!("a{i}=b")).collect::<Vec<_>>().join(";")
                ))
                .expect(&[201, 400, 415, 431]),
        );
    }
}

fn tokens(c: &mut Vec<Case>) {
    let claims = b64url(br#"{"iss":"kubernetes/serviceaccount","sub":"system:serviceaccount:default:default"}"#);
    let big_header = b64url(format!(r#"{{"alg":"RS256","kid":"{}"}}"#, "k".repeat(90_000)).as_bytes());
    for framing in [Framing::H1, Framing::H2] {
        let tag = if framing == Framing::H1 { "HTTP/1.1" } else { "HTTP/2" };
        let bearer = |name: &str, token: String| {
            review(&format!("token ({tag}): {name}"), Who::Token)
                .framing(framing)
                .header("authorization", format!("Bearer {token}"))
                .expect(&[401, 431])
        };
        c.push(bearer("a 120 KB JWT header", format!("{big_header}.{claims}.AAAA")));
        let deep = b64url(format!("{}{}", "[".repeat(60_000), "]".repeat(60_000)).as_bytes());
        c.push(bearer("claims nested 60k deep", format!("eyJhbGciOiJSUzI1NiJ9.{deep}.AAAA")));
        c.push(bearer("a 300 KB token", "a".repeat(300_000)));
        let many_dots = repeat_join("eyJ9", ".", 20_000);
        c.push(bearer("20k segments", many_dots));
        c.push(bearer("a bootstrap-token shape with a 100 KB secret", format!("abcdef.{}", "0".repeat(100_000))));
    }
}

fn query(c: &mut Vec<Case>, ctx: &Ctx) {
    // A node may list and watch CSRs, a bootstrap token a CSR by name: both reach list.
    let list =
        |name: &str, who: Who, q: &str, expect: &[u16]| Case::get(name, who, format!("{CSRS}?{q}")).expect(expect);
    let garbage = "A".repeat(60_000);
    // A revision the server has not reached waits a little, then is upstream's 504 Timeout
    // ("Too large resource version"), which clients retry.
    for (what, q, expect) in [
        ("limit=-1", "limit=-1".to_string(), &[200, 400][..]),
        ("limit=2^64", "limit=18446744073709551616".into(), &[200, 400]),
        ("limit=i64::MAX", "limit=9223372036854775807".into(), &[200, 400]),
        ("60 KB continue garbage", format!("limit=1&continue={garbage}"), &[400, 410]),
        (
            "forged continue (rv 2^63)",
            format!("limit=1&continue={}", b64url(br#"{"v":"meta.k8s.io/v1","rv":9223372036854775807,"start":"x"}"#)),
            &[400, 410, 504],
        ),
        (
            "forged continue (start 30 KB)",
            format!(
                "limit=1&continue={}",
                b64url(format!(r#"{{"v":"meta.k8s.io/v1","rv":1,"start":"{}"}}"#, "x".repeat(30_000)).as_bytes())
            ),
            &[200, 400, 410],
        ),
        (
            "resourceVersion u64::MAX NotOlderThan",
            "resourceVersion=18446744073709551615&resourceVersionMatch=NotOlderThan".into(),
            &[400, 504],
        ),
        (
            "resourceVersion 2^64 Exact",
            "resourceVersion=18446744073709551616&resourceVersionMatch=Exact".into(),
            &[400],
        ),
        ("resourceVersion -1", "resourceVersion=-1".into(), &[400]),
        ("resourceVersion 60 KB", format!("resourceVersion={}", "9".repeat(60_000)), &[400]),
        ("timeoutSeconds=2^64", "timeoutSeconds=18446744073709551616".into(), &[200, 400]),
        ("60k repeated parameters", repeat_join("limit=1", "&", 7_000), &[200, 400]),
        ("pretty and includeObject garbage", format!("pretty={0}&includeObject={0}", &garbage[..30_000]), &[200, 400]),
    ] {
        c.push(list(&format!("query: list CSRs with {what}"), Who::Node, &q, expect));
    }
    let watch = |name: &str, q: String, expect: &[u16]| {
        Case::get(name, Who::Node, format!("{CSRS}?watch=1&{q}")).expect(expect).watch()
    };
    c.push(watch(
        "watch: timeoutSeconds=2^63",
        "timeoutSeconds=9223372036854775807&allowWatchBookmarks=true".into(),
        &[200],
    ));
    c.push(watch(
        "watch: resourceVersion far in the future",
        "resourceVersion=9223372036854775807&timeoutSeconds=5".into(),
        &[200, 400, 410, 504],
    ));
    c.push(watch(
        "watch: sendInitialEvents with garbage resourceVersion",
        format!("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion={garbage}"),
        &[400],
    ));
    c.push(watch(
        "watch: 60 KB fieldSelector",
        format!("fieldSelector={}", repeat_join("metadata.name=x", ",", 3_500)),
        &[200, 400],
    ));
    let one = format!(
        "{CSRS}?fieldSelector=metadata.name%3D{}&watch=1&timeoutSeconds=9223372036854775807",
        "x".repeat(60_000)
    );
    c.push(
        Case::get("watch: a bootstrap token's one-CSR watch with a 60 KB name", Who::Bootstrap, one)
            .expect(&[200, 400, 403])
            .watch(),
    );
    let _ = ctx;
}

fn selectors(c: &mut Vec<Case>, ctx: &Ctx) {
    let list = |name: &str, q: String, expect: &[u16]| Case::get(name, Who::Node, format!("{CSRS}?{q}")).expect(expect);
    c.push(list(
        "selector: 6k label terms",
        format!("labelSelector={}", (0..6_000).map(|i| format!("a{i}%3Db")).collect::<Vec<_>>().join(",")),
        &[200, 400],
    ));
    c.push(list(
        "selector: in() of 9k values",
        format!("labelSelector=a+in+({})", (0..9_000).map(|i| format!("v{i}")).collect::<Vec<_>>().join(",")),
        &[200, 400],
    ));
    c.push(list(
        "selector: 2,500 field terms",
        format!(
            "fieldSelector={}",
            (0..2_500).map(|i| format!("metadata.name%21%3Dn{i}")).collect::<Vec<_>>().join(",")
        ),
        &[200, 400],
    ));
    c.push(list(
        "selector: 30k nested parentheses",
        format!("labelSelector=a+in+{}b{}", "(".repeat(30_000), ")".repeat(30_000)),
        &[400],
    ));
    c.push(list(
        "selector: 60 KB of escapes",
        format!("fieldSelector=metadata.name%3D{}", "%5C%5C".repeat(10_000)),
        &[200, 400],
    ));
    // Admin lists of a custom resource with a selector on 60 KB of label keys.
    c.push(
        Case::get(
            "selector: 60 KB key on a custom resource list",
            Who::Admin,
            format!(
                "/apis/{CRD_GROUP}/v1/namespaces/{}/{}?labelSelector={}",
                ctx.ns,
                ctx.crd_plural,
                "k".repeat(60_000)
            ),
        )
        .expect(&[200, 400]),
    );
    // SelfSubjectAccessReview with a huge selector in its attributes (any user).
    let review = format!(
        r#"{{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{{"resourceAttributes":{{"verb":"list","resource":"pods","fieldSelector":{{"rawSelector":"{}"}},"labelSelector":{{"requirements":[{}]}}}}}}}}"#,
        repeat_join("metadata.name!=x", ",", 60_000),
        repeat_join(r#"{"key":"a","operator":"In","values":["a","b","c"]}"#, ",", 20_000),
    );
    c.push(
        Case::post(
            "selector: access review with 60k field and 20k label requirements",
            Who::ServiceAccount,
            SSAR,
            JSON,
            review,
        )
        .expect(&[201, 400, 422]),
    );
}

fn bodies(c: &mut Vec<Case>) {
    // 3 MB of gzip that inflates to 3 GB.
    let bomb = gzip_bomb(3 << 20, NEAR_LIMIT);
    c.push(
        review("body: a gzip bomb (3 MB -> 3 GB)", Who::ServiceAccount)
            .header("content-encoding", "gzip")
            .body(bomb.clone())
            .expect(&[400, 415]),
    );
    c.push(
        Case::post("body: a gzip bomb as protobuf", Who::ServiceAccount, SSR, PROTOBUF, bomb)
            .header("content-encoding", "gzip")
            .expect(&[400, 415]),
    );
    // Past the limit without a length: chunked (HTTP/1.1) and a stream (HTTP/2).
    let big = format!(
        r#"{{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","x":"{}"}}"#,
        "x".repeat(8 << 20)
    );
    c.push(
        review("body: 8 MB chunked", Who::ServiceAccount)
            .framing(Framing::H1Chunked(64 * 1024))
            .body(big.clone())
            .expect(&[413]),
    );
    c.push(
        review("body: 4 MB chunked in 4 KB chunks", Who::ServiceAccount)
            .framing(Framing::H1Chunked(4096))
            .body(big[..4 << 20].to_string())
            .expect(&[413]),
    );
    c.push(review("body: 8 MB with Content-Length (HTTP/2)", Who::ServiceAccount).body(big.clone()).expect(&[413]));
    c.push(review("body: 8 MB from an anonymous caller", Who::Anonymous).body(big).expect(&[401, 403, 413]));
    // Bodies on requests that take none.
    c.push(
        Case::get("body: 3 MB on a GET", Who::ServiceAccount, "/version")
            .content_type(JSON)
            .body("x".repeat(NEAR_LIMIT))
            .expect(&[200, 400]),
    );
    c.push(
        Case::new("body: 3 MB DeleteOptions", Who::Node, reqwest::Method::DELETE, format!("{CSRS}/does-not-exist"))
            .content_type(JSON)
            .body(format!(
                r#"{{"kind":"DeleteOptions","apiVersion":"v1","dryRun":[{}]}}"#,
                fill("\"All\"", ",", NEAR_LIMIT - 100)
            ))
            .expect(&[400, 403, 404, 422]),
    );
}
