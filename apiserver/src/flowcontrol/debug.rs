//! `/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues` and
//! `dump_requests[?includeRequestDetails=1]`: the same columns as upstream, comma-separated
//! and padded into columns (upstream writes them through Go's tabwriter: minimum width 8,
//! one space of padding).

use std::sync::Arc;

use super::dispatcher::{FlowControl, Level};
use super::queueset::ESTIMATED_SERVICE_DURATION;

/// Align rows: every cell but a row's last is followed by `,` and padded to its column's
/// width (at least 8, one space after the widest).
pub fn tabulate(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
            let w = (cell.chars().count() + 2).max(8);
            if widths.len() <= i {
                widths.push(w);
            } else {
                widths[i] = widths[i].max(w);
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                let text = format!("{cell},");
                out.push_str(&format!("{text:<width$}", width = widths[i]));
            }
        }
        out.push('\n');
    }
    out
}

fn s(v: impl ToString) -> String {
    v.to_string()
}

/// The levels in effect, by name.
fn levels_by_name(fc: &FlowControl) -> Vec<Arc<Level>> {
    let active = fc.active();
    let mut levels: Vec<Arc<Level>> = active.levels.values().cloned().collect();
    levels.sort_by(|a, b| a.name.cmp(&b.name));
    levels
}

/// A row of the level's name and `<none>` in every other column (levels without queues).
fn none_row(name: &str, columns: usize) -> Vec<String> {
    let mut r = vec![name.to_string()];
    r.extend(std::iter::repeat_n(s("<none>"), columns - 1));
    r
}

pub fn priority_levels(fc: &FlowControl) -> String {
    let headers = [
        "PriorityLevelName",
        "ActiveQueues",
        "IsIdle",
        "IsQuiescing",
        "WaitingRequests",
        "ExecutingRequests",
        "DispatchedRequests",
        "RejectedRequests",
        "TimedoutRequests",
        "CancelledRequests",
    ];
    let mut rows = vec![headers.iter().map(s).collect::<Vec<_>>()];
    for level in levels_by_name(fc) {
        let (name, st) = (&level.name, level.lock());
        let row = match &st.queues {
            None => none_row(name, headers.len()),
            Some(q) => {
                let active_queues = q.queues().iter().filter(|v| v.waiting > 0).count();
                vec![
                    name.clone(),
                    s(active_queues),
                    s(q.waiting() == 0 && q.executing() == 0),
                    s(false),
                    s(q.waiting()),
                    s(q.executing()),
                    s(st.counters.dispatched),
                    s(st.counters.rejected),
                    s(st.counters.timed_out),
                    s(st.counters.cancelled),
                ]
            }
        };
        rows.push(row);
    }
    tabulate(&rows)
}

pub fn queues(fc: &FlowControl) -> String {
    let headers = [
        "PriorityLevelName",
        "Index",
        "PendingRequests",
        "ExecutingRequests",
        "SeatsInUse",
        "NextDispatchR",
        "InitialSeatsSum",
        "MaxSeatsSum",
        "TotalWorkSum",
    ];
    let mut rows = vec![headers.iter().map(s).collect::<Vec<_>>()];
    for level in levels_by_name(fc) {
        let (name, st) = (&level.name, level.lock());
        match &st.queues {
            None => rows.push(none_row(name, headers.len())),
            Some(q) => {
                for v in q.queues() {
                    rows.push(vec![
                        name.clone(),
                        s(v.index),
                        s(v.waiting),
                        s(v.executing),
                        s(v.seats_in_use),
                        format!("{:.8}ss", v.next_dispatch_r),
                        s(v.waiting_seats),
                        s(v.waiting_seats),
                        // Work of the waiting requests: seats × the estimated service time.
                        format!("{:.8}ss", f64::from(v.waiting_seats) * ESTIMATED_SERVICE_DURATION.as_secs_f64()),
                    ]);
                }
            }
        }
    }
    tabulate(&rows)
}

pub fn requests(fc: &FlowControl, details: bool) -> String {
    let mut headers = vec![
        "PriorityLevelName",
        "FlowSchemaName",
        "QueueIndex",
        "RequestIndexInQueue",
        "FlowDistingsher",
        "ArriveTime",
        "InitialSeats",
        "FinalSeats",
        "AdditionalLatency",
    ];
    if details {
        headers.extend(["UserName", "Verb", "APIPath", "Namespace", "Name", "APIVersion", "Resource", "SubResource"]);
    }
    let mut rows = vec![headers.iter().map(s).collect::<Vec<_>>()];
    for level in levels_by_name(fc) {
        let (name, st) = (&level.name, level.lock());
        let Some(q) = &st.queues else { continue };
        let mut waiting: Vec<_> = q.requests().into_iter().filter(|r| r.position.is_some()).collect();
        waiting.sort_by_key(|r| (r.queue, r.position));
        for r in waiting {
            let Some(t) = st.requests.get(&r.id) else { continue };
            let arrived: chrono::DateTime<chrono::Utc> = t.arrived.into();
            let mut row = vec![
                name.clone(),
                t.schema.clone(),
                r.queue.map(s).unwrap_or_default(),
                r.position.map(s).unwrap_or_default(),
                t.distinguisher.clone(),
                arrived.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
                s(t.seats),
                s(0),
                s("0s"),
            ];
            if details {
                let d = &t.details;
                row.extend([
                    d.user.clone(),
                    d.verb.clone(),
                    d.path.clone(),
                    d.namespace.clone(),
                    d.name.clone(),
                    d.api_version.clone(),
                    d.resource.clone(),
                    d.subresource.clone(),
                ]);
            }
            rows.push(row);
        }
    }
    tabulate(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tabulate_pads_like_tabwriter() {
        let rows = vec![vec![s("PriorityLevelName"), s("Index"), s("Last")], vec![s("exempt"), s("12"), s("x")]];
        let out = tabulate(&rows);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "PriorityLevelName, Index,  Last", "header");
        assert_eq!(lines[1], "exempt,            12,     x", "row");
    }
}
