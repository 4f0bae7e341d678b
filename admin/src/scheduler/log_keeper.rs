//! Logs that outlive their host: after a run ends, an admin reads its log from the agent and
//! keeps it in `run_log` (bounded by `kept_log_bytes`: the head and the tail of a longer log),
//! so the run page can show it after the agent is gone, reinstalled or has rotated it.
//!
//! The keeper walks the run table by id behind the runs as they end: a cursor at the first id
//! not yet looked at, and the ids it saw still pending or running, looked at again every
//! `PASS_EVERY` (a pass, or several back to back while a burst keeps the cursor busy).
//! It never touches the dispatch or callback path; it runs behind it, a batch at a time, with
//! a few reads from agents in flight. Several admins share the work: a run's log is claimed
//! with the insert of its `run_log` row, which only one admin's insert can make.
//!
//! Invariant: a kept log is what the agent had when the run had ended (the callback is sent
//! after the process exited and its output was closed).

use std::collections::BTreeSet;
use std::time::Duration;

use actix_web::web;

use crate::db::job_run::{self, RunEnd};
use crate::db::run_log;
use crate::domain::ids::RunId;
use crate::error::Error;
use crate::state::AppState;
use crate::worker::Worker;

/// Runs looked at per pass.
const BATCH: i64 = 500;
/// Logs read from agents at once.
const IN_FLIGHT: usize = 8;
/// A pass with nothing left to do waits this long.
const PASS_EVERY: Duration = Duration::from_secs(2);
/// At start, runs created within this window are looked at (a restart keeps recent logs).
const LOOK_BACK_MS: i64 = 3_600_000;
/// Ids seen unfinished, kept to be looked at again; beyond this the oldest are let go (their
/// logs stay on their agents).
const MAX_WAITING: usize = 20_000;
/// The most read from an agent for one run, whatever its log holds: the agent's own cap
/// (`log_max_bytes`) may be larger than anyone wants to page through.
const MAX_READ_BYTES: usize = 256 * 1024 * 1024;
/// How often the runs of the look-back window are swept for logs the cursor passed by (ids
/// committed out of order on MySQL, a pass that failed) and stale claims are released.
const SWEEP_EVERY_MS: i64 = 60_000;
/// A claim older than this was left by an admin that died or failed mid-read: released.
const STALE_CLAIM_MS: i64 = 300_000;
/// Room kept in `kept_log_bytes` for the line that says what was left out.
const MARKER_ROOM: usize = 256;

pub async fn run(state: web::Data<AppState>, mut worker: Worker) {
    let mut keeper = Keeper::default();
    loop {
        let wait = match keeper.pass(&state).await {
            Ok(looked_at) if looked_at >= BATCH as usize => {
                worker.succeeded();
                Duration::ZERO
            }
            Ok(_) => {
                worker.succeeded();
                PASS_EVERY
            }
            Err(e) => worker.failed(&e).max(PASS_EVERY),
        };
        if !worker.idle(wait, None).await {
            return;
        }
    }
}

#[derive(Debug, Default)]
pub struct Keeper {
    /// The first id not yet looked at; unset until the first pass.
    cursor: Option<RunId>,
    /// Ids looked at before they ended.
    waiting: BTreeSet<RunId>,
    /// When the look-back window was last swept.
    swept_ms: Option<i64>,
    /// When the waiting ids were last looked at again.
    rechecked: Option<std::time::Instant>,
}

impl Keeper {
    /// One pass: the runs that ended since the last, their logs read and kept. Returns how
    /// many runs it looked at past the cursor.
    ///
    /// # Errors
    /// Database errors (agents that cannot give a log are recorded, not errors).
    pub async fn pass(&mut self, state: &web::Data<AppState>) -> Result<usize, Error> {
        let cap = state.config.kept_log_bytes;
        if cap == 0 {
            return Ok(0);
        }
        let cursor = match self.cursor {
            Some(cursor) => cursor,
            None => {
                let since = state.clock.now_ms() - LOOK_BACK_MS;
                state
                    .db
                    .run(move |conn| job_run::first_since(conn, since))
                    .await?
            }
        };
        // The ids seen unfinished are looked at again at most once per `PASS_EVERY`: in a burst
        // the passes follow each other with no pause, and up to `MAX_WAITING` rows read back
        // every pass were a tenth of the admin's CPU (BENCHMARKS).
        let recheck = self.rechecked.is_none_or(|at| at.elapsed() >= PASS_EVERY);
        let waiting: Vec<RunId> = if recheck {
            self.waiting.iter().copied().collect()
        } else {
            Vec::new()
        };
        let (fresh, again) = state
            .db
            .run(move |conn| {
                Ok((
                    job_run::ends_from(conn, cursor, BATCH)?,
                    if waiting.is_empty() {
                        Vec::new()
                    } else {
                        job_run::ends_of(conn, &waiting)?
                    },
                ))
            })
            .await?;
        let looked_at = fresh.len();
        // The cursor and the waiting set move only once the claims are committed: a pass that
        // fails is looked at again.
        let next_cursor = fresh.last().map_or(cursor, |r| RunId(r.id.0 + 1));
        let still: BTreeSet<RunId> = again.iter().map(|r| r.id).collect();
        let mut waiting: BTreeSet<RunId> = self
            .waiting
            .iter()
            .copied()
            .filter(|id| !recheck || still.contains(id))
            .collect();
        let mut ended = Vec::new();
        for run in fresh.into_iter().chain(again) {
            if run.status.is_final() {
                waiting.remove(&run.id);
                // A run that never reached an agent has no log to keep.
                if run.agent_address.is_some() {
                    ended.push(run);
                }
            } else {
                waiting.insert(run.id);
            }
        }
        while waiting.len() > MAX_WAITING {
            waiting.pop_first();
        }
        let now = state.clock.now_ms();
        if self.swept_ms.is_none_or(|at| now - at >= SWEEP_EVERY_MS) {
            let since = now - LOOK_BACK_MS;
            state
                .db
                .transaction(move |conn| run_log::release_stale(conn, now - STALE_CLAIM_MS))
                .await?;
            // Read outside a write transaction: it looks up each of the hour's ended runs
            // (360,000 at 100 fires/s), and on SQLite a write transaction holds every other
            // writer off meanwhile. A run it finds is claimed by its row, as any.
            let passed_by = state
                .db
                .run(move |conn| job_run::ended_without_kept_log(conn, since, BATCH))
                .await?;
            for run in passed_by {
                if !ended.iter().any(|r| r.id == run.id) {
                    ended.push(run);
                }
            }
        }
        let ids: Vec<RunId> = ended.iter().map(|r| r.id).collect();
        let claimed = if ids.is_empty() {
            Vec::new()
        } else {
            state
                .db
                .transaction(move |conn| {
                    // Most short runs' logs came with their results: nothing to read back.
                    let have: BTreeSet<RunId> =
                        run_log::having_row(conn, &ids)?.into_iter().collect();
                    let unkept: Vec<RunId> = ids
                        .iter()
                        .copied()
                        .filter(|id| !have.contains(id))
                        .collect();
                    run_log::claim(conn, &unkept, now)
                })
                .await?
        };
        self.cursor = Some(next_cursor);
        self.waiting = waiting;
        if recheck {
            self.rechecked = Some(std::time::Instant::now());
        }
        if self.swept_ms.is_none_or(|at| now - at >= SWEEP_EVERY_MS) {
            self.swept_ms = Some(now);
        }
        ended.retain(|r| claimed.contains(&r.id));
        for chunk in ended.chunks(IN_FLIGHT) {
            let mut reads = tokio::task::JoinSet::new();
            for run in chunk.iter().cloned() {
                let state = state.clone();
                reads.spawn(async move {
                    let read = read_log(&state, &run, cap).await;
                    (run.id, read)
                });
            }
            let mut results = Vec::with_capacity(chunk.len());
            while let Some(joined) = reads.join_next().await {
                match joined {
                    Ok(result) => results.push(result),
                    Err(e) => tracing::warn!(error = %e, "A log read task failed"),
                }
            }
            let now = state.clock.now_ms();
            state
                .db
                .transaction(move |conn| {
                    for (id, read) in &results {
                        match read {
                            Ok(kept) => run_log::store(
                                conn,
                                *id,
                                run_log::KEPT,
                                &kept.content,
                                kept.bytes,
                                kept.truncated,
                                now,
                            )?,
                            Err(why) => {
                                tracing::debug!(run_id = %id, error = %why, "Log not kept");
                                run_log::store(conn, *id, run_log::MISSING, why, 0, false, now)?;
                            }
                        }
                    }
                    Ok(())
                })
                .await?;
        }
        Ok(looked_at)
    }
}

/// A log as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub content: String,
    pub bytes: i64,
    pub truncated: bool,
}

/// A log that came whole (with its run's result), kept as a read from the agent keeps it: at
/// most `cap` bytes, its head and its tail when longer.
pub fn kept_whole(log: &str, cap: u64) -> Kept {
    let mut kept = Bounded::new(usize::try_from(cap).unwrap_or(usize::MAX));
    kept.push(log);
    kept.finish()
}

/// Reads a run's whole log from its agent, page by page, keeping at most `cap` bytes.
async fn read_log(state: &AppState, run: &RunEnd, cap: u64) -> Result<Kept, String> {
    let Some(address) = &run.agent_address else {
        return Err("the run has no agent".into());
    };
    let mut log = Bounded::new(usize::try_from(cap).unwrap_or(usize::MAX));
    let mut from_line = 1;
    loop {
        let page = state
            .agents
            .run_log_page(address, run.id, run.created_ms, from_line)
            .await
            .map_err(|e| format!("agent {address}: {e}"))?;
        log.push(&page.log_content);
        if page.is_end {
            return Ok(log.finish());
        }
        // Only a log the agent says is whole is kept: a partial copy would be served for good.
        if page.to_line_num < from_line {
            return Err(format!(
                "agent {address}: the log stopped at line {} without its end",
                from_line - 1
            ));
        }
        if log.read >= MAX_READ_BYTES {
            return Err(format!(
                "agent {address}: the log is longer than {} MiB",
                MAX_READ_BYTES / 1024 / 1024
            ));
        }
        from_line = page.to_line_num + 1;
    }
}

/// A log read in order, keeping its head and its tail, each half of `cap`, once it is longer
/// than `cap`.
#[derive(Debug)]
struct Bounded {
    cap: usize,
    read: usize,
    head: String,
    /// Set once a byte did not fit the head: from then on everything goes to the tail.
    head_full: bool,
    tail: String,
    /// The tail lost its front: it no longer joins the head.
    tail_trimmed: bool,
}

impl Bounded {
    fn new(cap: usize) -> Self {
        Self {
            // The line that says what was left out fits within the cap too.
            cap: cap.saturating_sub(MARKER_ROOM).max(2),
            read: 0,
            head: String::new(),
            head_full: false,
            tail: String::new(),
            tail_trimmed: false,
        }
    }

    fn push(&mut self, text: &str) {
        self.read += text.len();
        let mut rest = text;
        if !self.head_full {
            let room = self.cap - self.head.len();
            let take = floor_char_boundary(rest, room.min(rest.len()));
            self.head.push_str(&rest[..take]);
            rest = &rest[take..];
        }
        if rest.is_empty() {
            return;
        }
        self.head_full = true;
        self.tail.push_str(rest);
        let half = (self.cap / 2).max(1);
        // Trimmed when twice the half, so a log is copied about twice, not once per page.
        if self.tail.len() > 2 * half {
            let from = ceil_char_boundary(&self.tail, self.tail.len() - half);
            self.tail.drain(..from);
            self.tail_trimmed = true;
        }
    }

    fn finish(mut self) -> Kept {
        let bytes = i64::try_from(self.read).unwrap_or(i64::MAX);
        if !self.head_full {
            return Kept {
                content: self.head,
                bytes,
                truncated: false,
            };
        }
        let half = self.cap / 2;
        let cut = floor_char_boundary(&self.head, half);
        let mut tail = if self.tail_trimmed {
            self.tail
        } else {
            let mut joined = self.head.split_off(cut);
            joined.push_str(&self.tail);
            joined
        };
        self.head.truncate(cut);
        if tail.len() > half {
            let from = ceil_char_boundary(&tail, tail.len() - half);
            tail.drain(..from);
        }
        // The tail starts at a line, so its first line is not a fragment.
        if let Some(newline) = tail.find('\n')
            && newline + 1 < tail.len()
        {
            tail.drain(..=newline);
        }
        let left_out = self.read - self.head.len() - tail.len();
        let mut content = self.head;
        if !content.is_empty() && !content.ends_with('\n') {
            content.push('\n');
        }
        content.push_str(&format!(
            "[… {left_out} bytes of this log were not kept by the admin (kept_log_bytes) …]\n"
        ));
        content.push_str(&tail);
        Kept {
            content,
            bytes,
            truncated: true,
        }
    }
}

fn floor_char_boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_char_boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// A page of a kept log, numbered as the agent numbers lines (up to `max_lines` from
/// `from_line`, 1-based), and whether it reaches the end.
pub fn page(content: &str, from_line: i64, max_lines: usize) -> (i64, String, bool) {
    let skip = usize::try_from(from_line.saturating_sub(1)).unwrap_or(usize::MAX);
    let mut lines = content.split_inclusive('\n').skip(skip).peekable();
    let mut text = String::new();
    let mut taken = 0;
    // Bounded in bytes as an agent's page is, one line at the least.
    while let Some(line) = lines.next_if(|line| {
        taken < max_lines && (taken == 0 || text.len() + line.len() <= MAX_PAGE_BYTES)
    }) {
        text.push_str(line);
        taken += 1;
    }
    let at_end = lines.peek().is_none();
    (from_line - 1 + taken as i64, text, at_end)
}

/// The most bytes of a kept log one page holds (an agent's page holds as much).
const MAX_PAGE_BYTES: usize = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// `cap` bytes of log, besides the room for the marker line.
    fn kept(cap: usize, pieces: &[&str]) -> Kept {
        let mut log = Bounded::new(cap + MARKER_ROOM);
        for piece in pieces {
            log.push(piece);
        }
        log.finish()
    }

    #[test]
    fn a_log_within_the_cap_is_kept_whole() {
        let k = kept(100, &["one\n", "two\n", "three"]);
        assert_eq!(k.content, "one\ntwo\nthree");
        assert_eq!((k.bytes, k.truncated), (13, false));
        let k = kept(13, &["one\ntwo\n", "three"]);
        assert!(!k.truncated);
    }

    #[test]
    fn a_longer_log_keeps_its_head_and_its_tail() {
        let lines: Vec<String> = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let pieces: Vec<&str> = lines.iter().map(String::as_str).collect();
        let k = kept(200, &pieces);
        assert!(k.truncated);
        assert_eq!(k.bytes, 10_000);
        assert!(
            k.content.starts_with("line 0000\nline 0001\n"),
            "{}",
            k.content
        );
        assert!(
            k.content.ends_with("line 0998\nline 0999\n"),
            "{}",
            k.content
        );
        assert!(k.content.contains("bytes of this log were not kept"));
        assert!(k.content.len() < 200 + 100, "{}", k.content.len());
        // Each half is whole lines at the tail, and at most half the cap each.
        let marker = k.content.find("[…").unwrap();
        assert!(marker <= 101);
    }

    #[test]
    fn cuts_never_split_a_character() {
        let text = "é".repeat(500);
        let k = kept(101, &[&text, "\n", &text]);
        assert!(k.truncated);
        assert!(k.content.is_char_boundary(k.content.len()));
        let single = kept(7, &["ééééééé"]);
        assert!(
            single
                .content
                .chars()
                .all(|c| c == 'é' || c == '\n' || !c.is_control())
        );
    }

    #[test]
    fn pages_number_lines_as_the_agent_does() {
        let content = "a\nb\nc\nd";
        assert_eq!(page(content, 1, 2), (2, "a\nb\n".into(), false));
        assert_eq!(page(content, 3, 2), (4, "c\nd".into(), true));
        assert_eq!(page(content, 5, 2), (4, String::new(), true));
        assert_eq!(page("", 1, 10), (0, String::new(), true));
    }
}
