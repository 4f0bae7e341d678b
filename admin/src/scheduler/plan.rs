//! Which fires a job owes between its stored next fire time and the pre-read horizon, and where
//! its next fire time moves to. Pure: the clock and the database stay outside.

use chrono_tz::Tz;

use crate::clock::UnixMillis;
use crate::domain::policy::{Misfire, TriggerKind};
use crate::domain::schedule::Schedule;

/// One fire: the slot it stands for (the unique key) and when to send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    pub slot_ms: UnixMillis,
    pub at_ms: UnixMillis,
    pub kind: TriggerKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub fires: Vec<Fire>,
    /// The job's next fire time after these fires; `None` when it never fires again.
    pub next_fire_ms: Option<UnixMillis>,
    /// Slots that were later than the misfire threshold and were not fired as themselves.
    pub missed: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub now_ms: UnixMillis,
    /// Fires at or before this are planned now (now + the pre-read).
    pub horizon_ms: UnixMillis,
    /// A slot older than `now − threshold` has misfired...
    pub misfire_threshold_ms: i64,
    /// ...unless it is at or after this: it fell due while this scheduler was running passes
    /// without a break, so it is late because of a backlog, not missed in an outage.
    pub backlog_from_ms: UnixMillis,
    /// At most this many fires per job per plan, so one runaway schedule cannot starve the rest.
    pub max_fires: usize,
}

/// Plans `schedule` from its stored next fire `stored_next_ms`.
///
/// Fixed-rate slots are anchored on the previous slot, so fires never drift by dispatch time;
/// cron slots come from the expression in `tz`, so DST gaps and repeats follow the cron engine.
pub fn plan(
    schedule: &Schedule,
    tz: Tz,
    misfire: Misfire,
    stored_next_ms: UnixMillis,
    window: Window,
) -> Plan {
    let mut fires = Vec::new();
    let mut missed = 0;
    let mut slot = Some(stored_next_ms);
    let late_limit = window
        .now_ms
        .saturating_sub(window.misfire_threshold_ms)
        .min(window.backlog_from_ms);
    if stored_next_ms < late_limit {
        // Jump straight to the first slot inside the threshold: after a long outage an
        // every-second job must not be walked slot by slot.
        let resumed = schedule.next_after(late_limit - 1, stored_next_ms, tz);
        missed = count_missed(schedule, tz, stored_next_ms, late_limit);
        if misfire == Misfire::FireOnceNow {
            fires.push(Fire {
                slot_ms: stored_next_ms,
                at_ms: window.now_ms,
                kind: TriggerKind::Misfire,
            });
            missed -= 1;
        }
        slot = resumed;
    }
    while let Some(s) = slot {
        if s > window.horizon_ms || fires.len() >= window.max_fires {
            break;
        }
        fires.push(Fire {
            slot_ms: s,
            at_ms: s,
            kind: TriggerKind::Schedule,
        });
        slot = schedule.next_after(s, s, tz);
    }
    Plan {
        fires,
        next_fire_ms: slot,
        missed,
    }
}

/// How many slots fell in `[first, late_limit)`, counted up to a cap (it is only reported).
fn count_missed(schedule: &Schedule, tz: Tz, first: UnixMillis, late_limit: UnixMillis) -> u64 {
    const CAP: u64 = 10_000;
    let mut count = 0;
    let mut slot = Some(first);
    while let Some(s) = slot
        && s < late_limit
        && count < CAP
    {
        count += 1;
        slot = schedule.next_after(s, s, tz);
    }
    count
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::domain::schedule::{parse_cron, parse_timezone};

    const SEC: i64 = 1000;

    fn window(now_ms: i64) -> Window {
        Window {
            now_ms,
            horizon_ms: now_ms + 5 * SEC,
            misfire_threshold_ms: 5 * SEC,
            backlog_from_ms: i64::MAX,
            max_fires: 1000,
        }
    }

    fn cron(expr: &str) -> Schedule {
        Schedule::Cron(Box::new(parse_cron("e", expr).unwrap()))
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        chrono::Utc
            .with_ymd_and_hms(y, mo, d, h, mi, s)
            .unwrap()
            .timestamp_millis()
    }

    fn slots(p: &Plan) -> Vec<i64> {
        p.fires.iter().map(|f| f.slot_ms).collect()
    }

    #[test]
    fn every_slot_inside_the_horizon_fires_at_its_time() {
        let s = cron("* * * * * ?");
        let now = utc(2026, 1, 1, 0, 0, 0) + 300;
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, now + 700, window(now));
        assert_eq!(p.fires.len(), 5);
        assert!(
            p.fires
                .iter()
                .all(|f| f.at_ms == f.slot_ms && f.kind == TriggerKind::Schedule)
        );
        assert_eq!(p.fires[0].slot_ms, now + 700);
        assert_eq!(p.next_fire_ms, Some(now + 5700));
        assert_eq!(p.missed, 0);
    }

    #[test]
    fn nothing_is_due_before_the_horizon() {
        let s = Schedule::FixedRate { interval_s: 60 };
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, 100 * SEC, window(0));
        assert!(p.fires.is_empty());
        assert_eq!(p.next_fire_ms, Some(100 * SEC));
    }

    #[test]
    fn a_late_slot_within_the_threshold_still_fires_at_once() {
        let s = Schedule::FixedRate { interval_s: 10 };
        let now = 100 * SEC;
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, now - 3 * SEC, window(now));
        assert_eq!(slots(&p), vec![now - 3 * SEC]);
        assert_eq!(p.next_fire_ms, Some(now + 7 * SEC));
    }

    #[test]
    fn misfire_do_nothing_skips_to_the_next_future_slot() {
        let s = Schedule::FixedRate { interval_s: 10 };
        // Stored next fire an hour ago (the admin was down).
        let now = 10_000 * SEC + 500;
        let p = plan(
            &s,
            Tz::UTC,
            Misfire::DoNothing,
            now - 3600 * SEC - 500,
            window(now),
        );
        assert!(p.fires.iter().all(|f| f.kind == TriggerKind::Schedule));
        // The phase of the fixed rate survives the outage.
        assert_eq!(slots(&p), vec![10_000 * SEC]);
        assert_eq!(p.next_fire_ms, Some(10_010 * SEC));
        assert_eq!(p.missed, 360);
    }

    #[test]
    fn misfire_fire_once_now_fires_one_catch_up_then_resumes() {
        let s = cron("0 * * * * ?");
        let now = utc(2026, 3, 1, 12, 0, 30);
        let stored = utc(2026, 3, 1, 9, 0, 0);
        let p = plan(&s, Tz::UTC, Misfire::FireOnceNow, stored, window(now));
        assert_eq!(
            p.fires,
            vec![Fire {
                slot_ms: stored,
                at_ms: now,
                kind: TriggerKind::Misfire
            }]
        );
        assert_eq!(p.next_fire_ms, Some(utc(2026, 3, 1, 12, 1, 0)));
        assert_eq!(p.missed, 180);
    }

    #[test]
    fn once_fires_once_and_a_missed_once_follows_the_policy() {
        let s = Schedule::Once { at_ms: 50 * SEC };
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, 50 * SEC, window(48 * SEC));
        assert_eq!(slots(&p), vec![50 * SEC]);
        assert_eq!(p.next_fire_ms, None);
        let late = plan(&s, Tz::UTC, Misfire::DoNothing, 50 * SEC, window(500 * SEC));
        assert!(late.fires.is_empty());
        assert_eq!(late.next_fire_ms, None);
        let caught = plan(
            &s,
            Tz::UTC,
            Misfire::FireOnceNow,
            50 * SEC,
            window(500 * SEC),
        );
        assert_eq!(caught.fires.len(), 1);
        assert_eq!(caught.fires[0].at_ms, 500 * SEC);
        assert_eq!(caught.next_fire_ms, None);
    }

    #[test]
    fn fixed_rate_does_not_drift_over_many_plans() {
        let s = Schedule::FixedRate { interval_s: 7 };
        let mut next = 1_000;
        let mut all = Vec::new();
        // Ticks at irregular moments, as a busy loop would have them.
        let mut now = 0;
        for step in [900, 1300, 333, 2100, 999, 1500, 4000, 1700] {
            now += step;
            let p = plan(&s, Tz::UTC, Misfire::DoNothing, next, window(now));
            all.extend(slots(&p));
            next = p.next_fire_ms.unwrap();
        }
        assert!(all.windows(2).all(|w| w[1] - w[0] == 7 * SEC), "{all:?}");
        assert_eq!(all[0], 1_000);
    }

    #[test]
    fn dst_spring_forward_fires_the_missing_time_once_after_the_gap() {
        // Europe/Berlin jumps from 02:00 to 03:00 on 2026-03-29: a 02:30 daily job has no
        // 02:30 that day.
        let tz = parse_timezone("tz", "Europe/Berlin").unwrap();
        let s = cron("0 30 2 * * ?");
        let mut next = s.next_after(utc(2026, 3, 27, 0, 0, 0), 0, tz).unwrap();
        let mut fired = Vec::new();
        while next < utc(2026, 4, 1, 0, 0, 0) {
            let p = plan(&s, tz, Misfire::DoNothing, next, window(next));
            fired.extend(slots(&p));
            next = p.next_fire_ms.unwrap();
        }
        let local: Vec<String> = fired
            .iter()
            .map(|ms| {
                chrono::Utc
                    .timestamp_millis_opt(*ms)
                    .unwrap()
                    .with_timezone(&tz)
                    .format("%m-%d %H:%M")
                    .to_string()
            })
            .collect();
        // As vixie cron does (see domain::cron): the missing 02:30 fires once, right after the gap.
        assert_eq!(
            local
                .iter()
                .filter(|l| l.starts_with("03-29"))
                .collect::<Vec<_>>(),
            vec!["03-29 03:00"]
        );
        assert_eq!(local.iter().filter(|l| l.starts_with("03-30")).count(), 1);
        assert_eq!(local.first().map(String::as_str), Some("03-27 02:30"));
    }

    #[test]
    fn dst_fall_back_fires_the_repeated_hour_once() {
        // Europe/Berlin repeats 02:00–03:00 on 2026-10-25: a 02:30 job fires once that day.
        let tz = parse_timezone("tz", "Europe/Berlin").unwrap();
        let s = cron("0 30 2 * * ?");
        let mut next = s.next_after(utc(2026, 10, 24, 0, 0, 0), 0, tz).unwrap();
        let mut fired = Vec::new();
        while next < utc(2026, 10, 27, 0, 0, 0) {
            let p = plan(&s, tz, Misfire::DoNothing, next, window(next));
            fired.extend(slots(&p));
            next = p.next_fire_ms.unwrap();
        }
        assert_eq!(fired.len(), 3, "{fired:?}");
        assert!(fired.windows(2).all(|w| w[1] > w[0]));
    }

    #[test]
    fn an_hourly_job_across_fall_back_fires_every_real_hour() {
        let tz = parse_timezone("tz", "Europe/Berlin").unwrap();
        let s = cron("0 0 * * * ?");
        let start = utc(2026, 10, 24, 22, 0, 0);
        let mut next = start;
        let mut fired = Vec::new();
        while next < utc(2026, 10, 25, 4, 0, 0) {
            let p = plan(&s, tz, Misfire::DoNothing, next, window(next));
            fired.extend(slots(&p));
            next = p.next_fire_ms.unwrap();
        }
        // 22:00Z..03:00Z is six real hours, local 00:00, 01:00, 02:00 (CEST), 02:00 (CET), 03:00, 04:00.
        assert_eq!(fired.len(), 6, "{fired:?}");
        assert!(fired.windows(2).all(|w| w[1] - w[0] == 3600 * SEC));
    }

    #[test]
    fn a_runaway_schedule_is_capped_per_plan() {
        let s = cron("* * * * * ?");
        let w = Window {
            max_fires: 3,
            ..window(0)
        };
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, SEC, w);
        assert_eq!(p.fires.len(), 3);
        assert_eq!(p.next_fire_ms, Some(4 * SEC));
    }

    #[test]
    fn a_backlog_is_not_a_misfire() {
        // Due 20 s ago, while this scheduler was busy with other jobs: it fires now.
        let s = Schedule::Once { at_ms: 100 * SEC };
        let backlog = Window {
            backlog_from_ms: 90 * SEC,
            ..window(120 * SEC)
        };
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, 100 * SEC, backlog);
        assert_eq!((p.fires.len(), p.missed), (1, 0));
        // The same slot after an outage (the scheduler came up at 119 s) has misfired.
        let outage = Window {
            backlog_from_ms: 114 * SEC,
            ..window(120 * SEC)
        };
        let p = plan(&s, Tz::UTC, Misfire::DoNothing, 100 * SEC, outage);
        assert_eq!((p.fires.len(), p.missed), (0, 1));
    }
}
