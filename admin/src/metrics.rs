//! Prometheus metrics, kept in atomics and rendered as text at `/metrics`. Hand-written: a
//! dozen series do not justify a registry crate, and the text format is four line shapes.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A counter with one label, or two, each of a fixed set of values.
#[derive(Debug)]
pub struct LabeledCounter {
    name: &'static str,
    help: &'static str,
    label: &'static str,
    values: &'static [&'static str],
    /// The second label and its values, if the counter has two labels.
    second: Option<(&'static str, &'static [&'static str])>,
    counts: Vec<AtomicU64>,
}

impl LabeledCounter {
    fn new(
        name: &'static str,
        help: &'static str,
        label: &'static str,
        values: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            help,
            label,
            values,
            second: None,
            counts: values.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A counter over every pair of `label` and `second` values.
    fn pairs(
        name: &'static str,
        help: &'static str,
        label: &'static str,
        values: &'static [&'static str],
        second: (&'static str, &'static [&'static str]),
    ) -> Self {
        Self {
            second: Some(second),
            counts: (0..values.len() * second.1.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            ..Self::new(name, help, label, values)
        }
    }

    fn second_values(&self) -> &'static [&'static str] {
        self.second.map_or(&[""], |(_, values)| values)
    }

    /// Where a pair counts; an unknown value counts under the last one ("other").
    fn index(&self, value: &str, second: &str) -> usize {
        let at = |values: &[&str], v: &str| {
            values
                .iter()
                .position(|x| *x == v)
                .unwrap_or(values.len() - 1)
        };
        let seconds = self.second_values();
        at(self.values, value) * seconds.len() + at(seconds, second)
    }

    /// Counts one under `value`; an unknown value counts under the last one ("other").
    pub fn inc(&self, value: &str) {
        self.add(value, 1);
    }

    pub fn add(&self, value: &str, n: u64) {
        self.counts[self.index(value, "")].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one under a pair of values of a two-label counter.
    pub fn inc_pair(&self, value: &str, second: &str) {
        self.counts[self.index(value, second)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, value: &str) -> u64 {
        self.get_pair(value, "")
    }

    pub fn get_pair(&self, value: &str, second: &str) -> u64 {
        let known = |values: &[&str], v: &str| values.contains(&v);
        if !known(self.values, value)
            || (self.second.is_some() && !known(self.second_values(), second))
        {
            return 0;
        }
        self.counts[self.index(value, second)].load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} counter", self.name);
        let seconds = self.second_values();
        for (i, value) in self.values.iter().enumerate() {
            for (j, second) in seconds.iter().enumerate() {
                let pair = self
                    .second
                    .map(|(label, _)| format!(",{label}=\"{second}\""))
                    .unwrap_or_default();
                let count = self.counts[i * seconds.len() + j].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{}{{{}=\"{}\"{pair}}} {count}",
                    self.name, self.label, value
                );
            }
        }
    }
}

/// Bucket bounds in milliseconds.
const BUCKETS_MS: &[f64] = &[
    0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10_000.0,
    30_000.0,
];

#[derive(Debug)]
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            buckets: BUCKETS_MS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Records a duration in milliseconds; negative values (early) count as zero.
    pub fn observe_ms(&self, ms: f64) {
        let ms = ms.max(0.0);
        if let Some(i) = BUCKETS_MS.iter().position(|b| ms <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((ms * 1000.0) as u64, Ordering::Relaxed);
    }

    pub fn observe(&self, elapsed: std::time::Duration) {
        self.observe_ms(elapsed.as_secs_f64() * 1000.0);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} histogram", self.name);
        let mut cumulative = 0;
        for (bound, n) in BUCKETS_MS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{}_bucket{{le=\"{}\"}} {}",
                self.name,
                bound / 1000.0,
                cumulative
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{}_bucket{{le=\"+Inf\"}} {}", self.name, count);
        let _ = writeln!(
            out,
            "{}_sum {}",
            self.name,
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "{}_count {}", self.name, count);
    }
}

#[derive(Debug)]
pub struct Gauge {
    name: &'static str,
    help: &'static str,
    value: AtomicI64,
}

impl Gauge {
    fn new(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            help,
            value: AtomicI64::new(0),
        }
    }

    pub fn set(&self, v: i64) {
        self.value.store(v, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} gauge", self.name);
        let _ = writeln!(out, "{} {}", self.name, self.get());
    }
}

/// Every series this admin exports.
#[derive(Debug)]
pub struct Metrics {
    pub fires: LabeledCounter,
    pub misfired_slots: LabeledCounter,
    pub trigger_outcomes: LabeledCounter,
    pub run_outcomes: LabeledCounter,
    pub alert_deliveries: LabeledCounter,
    /// Open API requests refused by `auth::api_limit`, by class and role.
    pub api_rate_limited: LabeledCounter,
    pub fire_lateness: Histogram,
    pub dispatch_latency: Histogram,
    pub scheduler_loop: Histogram,
    pub lock_wait: Histogram,
    pub agents_alive: Gauge,
    pub runs_in_flight: Gauge,
    /// The background workers' health.
    pub workers: std::sync::Arc<crate::worker::WorkerRegistry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            fires: LabeledCounter::new(
                "jobfleet_fires_total",
                "Runs created, by why they exist.",
                "kind",
                &[
                    "schedule", "misfire", "manual", "api", "retry", "child", "other",
                ],
            ),
            misfired_slots: LabeledCounter::new(
                "jobfleet_misfired_slots_total",
                "Scheduled slots that passed while no admin could fire them, by what the misfire policy did.",
                "policy",
                &["do_nothing", "fire_once_now", "other"],
            ),
            trigger_outcomes: LabeledCounter::new(
                "jobfleet_trigger_outcomes_total",
                "Triggers by outcome: accepted by an agent, refused, no agent reachable, none live, skipped by the concurrency policy.",
                "outcome",
                &[
                    "accepted",
                    "refused",
                    "unreachable",
                    "no_agent",
                    "skipped",
                    "other",
                ],
            ),
            run_outcomes: LabeledCounter::new(
                "jobfleet_run_outcomes_total",
                "Runs that reached a final status, by status.",
                "status",
                &[
                    "succeeded",
                    "failed",
                    "timed_out",
                    "killed",
                    "lost",
                    "skipped",
                    "other",
                ],
            ),
            alert_deliveries: LabeledCounter::new(
                "jobfleet_alert_deliveries_total",
                "Alert delivery attempts by outcome: sent, failed and to be retried, given up (failed).",
                "outcome",
                &["sent", "retry", "failed", "other"],
            ),
            api_rate_limited: LabeledCounter::pairs(
                "jobfleet_api_rate_limited_total",
                "Open API requests refused with 429 by the request limits, by the limit reached (general or trigger) and the caller's role (anonymous: no valid credential).",
                "class",
                &["general", "trigger"],
                ("role", &["admin", "operator", "viewer", "anonymous"]),
            ),
            fire_lateness: Histogram::new(
                "jobfleet_fire_lateness_seconds",
                "From a run's scheduled time until its trigger was sent to an agent (for a run sent ahead, until the time it was sent for).",
            ),
            dispatch_latency: Histogram::new(
                "jobfleet_dispatch_seconds",
                "From taking a run for dispatch until an agent's answer was recorded.",
            ),
            scheduler_loop: Histogram::new(
                "jobfleet_scheduler_loop_seconds",
                "One scheduler pass: lock, read due jobs, store their fires.",
            ),
            lock_wait: Histogram::new(
                "jobfleet_scheduler_lock_wait_seconds",
                "Time spent waiting for the cluster's scheduler lock.",
            ),
            agents_alive: Gauge::new("jobfleet_agents_alive", "Agents with a recent heartbeat."),
            runs_in_flight: Gauge::new(
                "jobfleet_runs_in_flight",
                "Runs sent to an agent and not finished.",
            ),
            workers: std::sync::Arc::default(),
        }
    }
}

/// One metric family over the workers: name, type, help, and its value for one worker.
type WorkerFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&crate::worker::WorkerHealth) -> u64,
);

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        for c in [
            &self.fires,
            &self.misfired_slots,
            &self.trigger_outcomes,
            &self.run_outcomes,
            &self.alert_deliveries,
            &self.api_rate_limited,
        ] {
            c.render(&mut out);
        }
        for h in [
            &self.fire_lateness,
            &self.dispatch_latency,
            &self.scheduler_loop,
            &self.lock_wait,
        ] {
            h.render(&mut out);
        }
        self.agents_alive.render(&mut out);
        self.runs_in_flight.render(&mut out);
        self.render_workers(&mut out);
        out
    }

    fn render_workers(&self, out: &mut String) {
        use crate::worker::WorkerState;
        let workers = self.workers.snapshot();
        let families: [WorkerFamily; 3] = [
            (
                "jobfleet_worker_up",
                "gauge",
                "1 while a background worker runs (or backs off), 0 once it ended.",
                |h| {
                    u64::from(matches!(
                        h.state,
                        WorkerState::Running | WorkerState::BackingOff
                    ))
                },
            ),
            (
                "jobfleet_worker_failures_total",
                "counter",
                "Failed passes of a background worker.",
                |h| h.failures,
            ),
            (
                "jobfleet_worker_failing",
                "gauge",
                "1 while a worker's last pass failed.",
                |h| u64::from(h.failing_for > 0),
            ),
        ];
        for (name, kind, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (worker, health) in &workers {
                let _ = writeln!(out, "{name}{{worker=\"{worker}\"}} {}", value(health));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.fires.inc("schedule");
        m.fires.inc("nonsense");
        m.fire_lateness.observe_ms(3.0);
        m.fire_lateness.observe_ms(70_000.0);
        m.agents_alive.set(4);
        let text = m.render();
        assert!(text.contains("jobfleet_fires_total{kind=\"schedule\"} 1"));
        assert!(text.contains("jobfleet_fires_total{kind=\"other\"} 1"));
        assert!(text.contains("jobfleet_fire_lateness_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("jobfleet_fire_lateness_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("jobfleet_fire_lateness_seconds_count 2"));
        assert!(text.contains("jobfleet_agents_alive 4"));
        m.api_rate_limited.inc_pair("trigger", "operator");
        let text = m.render();
        assert!(
            text.contains("jobfleet_api_rate_limited_total{class=\"trigger\",role=\"operator\"} 1")
        );
        assert!(
            text.contains(
                "jobfleet_api_rate_limited_total{class=\"general\",role=\"anonymous\"} 0"
            )
        );
        assert_eq!(m.api_rate_limited.get_pair("trigger", "operator"), 1);
        assert_eq!(m.fires.get("schedule"), 1);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
        }
    }
}
