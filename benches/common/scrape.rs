//! Figures read from a server's `/metrics` (kube-apiserver's names, which kustos serves too):
//! the storm reports what the server counted beside what the load generator saw.

use std::collections::BTreeMap;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of an OpenMetrics or Prometheus text exposition (comments and malformed lines
/// skipped; label values unescaped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (head, value) = match line.find('{') {
        Some(_) => {
            let close = line.rfind('}')?;
            (&line[..=close], line[close + 1..].trim())
        }
        None => line.split_once(' ').map(|(h, v)| (h, v.trim()))?,
    };
    let value: f64 = value.split_whitespace().next()?.parse().ok()?;
    let (name, labels) = match head.find('{') {
        Some(open) => (&head[..open], parse_labels(&head[open + 1..head.len() - 1])?),
        None => (head, BTreeMap::new()),
    };
    Some(Sample { name: name.to_string(), labels, value })
}

fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut labels = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        labels.insert(key.trim().trim_start_matches(',').to_string(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

/// The sum of `name`'s samples whose labels include every `(key, value)` of `filter`.
pub fn sum(samples: &[Sample], name: &str, filter: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && filter.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|l| l == v)))
        .map(|s| s.value)
        .sum()
}

/// `apiserver_request_total` by (verb, resource, code), `after` less `before`, largest first.
pub fn request_deltas(before: &[Sample], after: &[Sample]) -> Vec<(String, f64)> {
    deltas_by(before, after, "apiserver_request_total", |l| {
        let resource =
            if l("subresource").is_empty() { l("resource") } else { format!("{}/{}", l("resource"), l("subresource")) };
        format!("{} {} {}", l("verb"), resource, l("code"))
    })
}

/// `apiserver_flowcontrol_rejected_requests_total` by (priority level, reason), `after` less
/// `before`, largest first.
pub fn rejection_deltas(before: &[Sample], after: &[Sample]) -> Vec<(String, f64)> {
    deltas_by(before, after, "apiserver_flowcontrol_rejected_requests_total", |l| {
        format!("{} {}", l("priority_level"), l("reason"))
    })
}

/// `name`'s samples grouped by `key` (given a label lookup), `after` less `before`, the
/// positive ones, largest first.
fn deltas_by(
    before: &[Sample],
    after: &[Sample],
    name: &str,
    key: impl Fn(&dyn Fn(&str) -> String) -> String,
) -> Vec<(String, f64)> {
    let key_of = |s: &Sample| key(&|k: &str| s.labels.get(k).cloned().unwrap_or_default());
    let mut deltas: BTreeMap<String, f64> = BTreeMap::new();
    for s in after.iter().filter(|s| s.name == name) {
        *deltas.entry(key_of(s)).or_default() += s.value;
    }
    for s in before.iter().filter(|s| s.name == name) {
        *deltas.entry(key_of(s)).or_default() -= s.value;
    }
    let mut v: Vec<(String, f64)> = deltas.into_iter().filter(|(_, n)| *n > 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP apiserver_request Counter\n\
        # TYPE apiserver_request counter\n\
        apiserver_request_total{verb=\"POST\",resource=\"certificatesigningrequests\",subresource=\"\",code=\"201\"} 10\n\
        apiserver_request_total{verb=\"PUT\",resource=\"certificatesigningrequests\",subresource=\"approval\",code=\"200\"} 10\n\
        apiserver_request_total{verb=\"GET\",resource=\"odd \\\"name\\\", here\",subresource=\"\",code=\"404\"} 1\n\
        process_cpu_seconds_total 12.5\n\
        kustos_csr_signed_total{signer=\"kubernetes.io/kube-apiserver-client-kubelet\"} 10\n\
        broken line\n\
        # EOF\n";

    fn samples() -> Vec<Sample> {
        parse(TEXT)
    }

    #[test]
    fn samples_parse_with_escaped_labels() {
        let s = samples();
        assert_eq!(s.len(), 5, "{s:?}");
        assert_eq!(s[2].labels["resource"], "odd \"name\", here");
        assert_eq!(sum(&s, "process_cpu_seconds_total", &[]), 12.5);
        assert_eq!(sum(&s, "apiserver_request_total", &[("resource", "certificatesigningrequests")]), 20.0);
        assert_eq!(sum(&s, "apiserver_request_total", &[("verb", "POST"), ("code", "201")]), 10.0);
        assert_eq!(sum(&s, "kustos_csr_signed_total", &[]), 10.0);
        assert_eq!(sum(&s, "nothing", &[]), 0.0);
    }

    #[test]
    fn request_deltas_are_what_happened_in_between() {
        let before = parse("apiserver_request_total{verb=\"POST\",resource=\"certificatesigningrequests\",subresource=\"\",code=\"201\"} 4\n");
        let after = samples();
        let d = request_deltas(&before, &after);
        assert_eq!(
            d,
            vec![
                ("PUT certificatesigningrequests/approval 200".to_string(), 10.0),
                ("POST certificatesigningrequests 201".to_string(), 6.0),
                ("GET odd \"name\", here 404".to_string(), 1.0),
            ]
        );
    }

    #[test]
    fn rejection_deltas_group_by_level_and_reason() {
        let line = |fs: &str, reason: &str, n: u32| {
            format!("apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"{fs}\",priority_level=\"global-default\",reason=\"{reason}\"}} {n}\n")
        };
        let before = parse(&line("global-default", "queue-full", 2));
        let after = parse(
            &(line("global-default", "queue-full", 7)
                + &line("other", "queue-full", 1)
                + &line("global-default", "time-out", 3)),
        );
        assert_eq!(
            rejection_deltas(&before, &after),
            vec![("global-default queue-full".to_string(), 6.0), ("global-default time-out".to_string(), 3.0)]
        );
        assert!(rejection_deltas(&after, &after).is_empty());
    }
}
