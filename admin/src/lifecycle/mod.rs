//! The run lifecycle: every change of a run's status goes through here, inside the caller's
//! transaction, and what the change leads to (a retry, child runs, alerts, a metric, timing the
//! new runs) is collected in a [`Changes`] and happens when the caller reports the commit.
//!
//! ```text
//! created ──claimed──▶ pending+claimed ──sent──▶ running ──finished──▶ succeeded | failed | …
//!    │                   │      │  ╰─released (nobody holds it) ─▶ pending
//!    │                   │      ╰─adopted (an agent holds it) ──▶ running
//!    ╰─skipped           ╰─refused by every agent ─▶ failed       ╰─requeued (never started) ─▶ pending
//!                        ended by the admin (lost, timed_out, killed) from pending or running
//! ```
//!
//! Each transition is a conditional update on the row's current status, so when two admins
//! (or an admin and a late agent) race, exactly one wins and only the winner's follow-ups exist.
//! The scheduler, dispatch, the callback endpoint and the agent registry call this module; it
//! calls only `db`, the alert outbox and the scheduler's handle (leaves). The workflow engine
//! hooks in at [`followup::after_final`].

mod followup;
pub mod workflow;

use std::collections::HashMap;
use std::sync::Arc;

use crate::alert::outbox::Outbox;
use crate::db::AnyConnection;
use crate::db::job::{self, Job};
use crate::db::job_run::{self, JobRun, NewJobRun, RunResult, TriggerAnswer};
use crate::domain::graph_cache::GraphCache;
use crate::domain::ids::{JobId, RunId};
use crate::domain::policy::RunStatus;
use crate::error::Error;
use crate::scheduler::handle::Due;
use crate::state::AppState;

/// What the transitions of one transaction lead to once it commits. Made before the
/// transaction, moved into it, and handed back to [`Changes::committed`] after the commit; a
/// rolled-back transaction drops it, and with it every follow-up it collected.
#[derive(Debug)]
#[must_use = "call `committed` after the transaction commits, or the follow-ups are lost"]
pub struct Changes {
    now_ms: i64,
    alerts: Outbox,
    dues: Vec<Due>,
    ended: Vec<RunStatus>,
    graphs: Arc<GraphCache>,
    jobs: JobsRead,
}

/// The jobs one transaction has read, each once however many of its runs the transaction
/// touches (whole, or only its end rules for the end of a run; a job may be read both ways): a
/// burst's batch of results or fires names hundreds of jobs, and a read per run was a round
/// trip per run on MariaDB. Nothing that writes a job runs in these transactions.
#[derive(Debug, Default)]
pub struct JobsRead {
    jobs: HashMap<JobId, Option<Arc<Job>>>,
    /// What the ends of runs need of their jobs (`job::EndRules`), read apart from whole jobs:
    /// most results need nothing more.
    end_rules: HashMap<JobId, Option<job::EndRules>>,
}

impl JobsRead {
    /// Job `id`, read at its first use in this transaction; `None` when it is gone.
    ///
    /// # Errors
    /// Database errors.
    pub fn get(&mut self, conn: &mut AnyConnection, id: JobId) -> Result<Option<Arc<Job>>, Error> {
        if let Some(job) = self.jobs.get(&id) {
            return Ok(job.clone());
        }
        let job = job::find(conn, id)?.map(Arc::new);
        self.jobs.insert(id, job.clone());
        Ok(job)
    }

    /// The end rules of job `id`, read at their first use in this transaction; `None` when the
    /// job is gone.
    ///
    /// # Errors
    /// Database errors.
    pub fn end_rules(
        &mut self,
        conn: &mut AnyConnection,
        id: JobId,
    ) -> Result<Option<job::EndRules>, Error> {
        if let Some(rules) = self.end_rules.get(&id) {
            return Ok(rules.clone());
        }
        let rules = match self.jobs.get(&id) {
            Some(job) => job.as_deref().map(job::EndRules::of),
            None => job::end_rules(conn, id)?,
        };
        self.end_rules.insert(id, rules.clone());
        Ok(rules)
    }

    /// Reads the end rules of the jobs of `ids` not read yet, a few hundred per statement.
    ///
    /// # Errors
    /// Database errors.
    pub fn read_end_rules_all(
        &mut self,
        conn: &mut AnyConnection,
        ids: impl IntoIterator<Item = JobId>,
    ) -> Result<(), Error> {
        let Some(missing) = missing(ids, |id| {
            self.end_rules.contains_key(id) || self.jobs.contains_key(id)
        }) else {
            return Ok(());
        };
        for found in job::end_rules_all(conn, &missing)? {
            self.end_rules.insert(found.id, Some(found));
        }
        for id in missing {
            self.end_rules.entry(id).or_insert(None);
        }
        Ok(())
    }

    /// Reads the jobs of `ids` not read yet, a few hundred per statement.
    ///
    /// # Errors
    /// Database errors.
    pub fn read_all(
        &mut self,
        conn: &mut AnyConnection,
        ids: impl IntoIterator<Item = JobId>,
    ) -> Result<(), Error> {
        let Some(missing) = missing(ids, |id| self.jobs.contains_key(id)) else {
            return Ok(());
        };
        for found in job::find_all(conn, &missing)? {
            self.jobs.insert(found.id, Some(Arc::new(found)));
        }
        for id in missing {
            self.jobs.entry(id).or_insert(None);
        }
        Ok(())
    }
}

/// The ids of `ids` not `known`, each once, when they are worth a batch read: one is read by
/// its kept single statement when it is needed.
fn missing(
    ids: impl IntoIterator<Item = JobId>,
    known: impl Fn(&JobId) -> bool,
) -> Option<Vec<JobId>> {
    let mut missing: Vec<JobId> = ids.into_iter().filter(|id| !known(id)).collect();
    missing.sort_unstable();
    missing.dedup();
    (missing.len() >= 2).then_some(missing)
}

impl Changes {
    pub fn new(state: &AppState) -> Self {
        Self::at(state, state.clock.now_ms())
    }

    /// With the transitions dated `now_ms` (a pass that read the clock once).
    pub fn at(state: &AppState, now_ms: i64) -> Self {
        Self {
            now_ms,
            alerts: state.alerts.outbox(),
            dues: Vec::new(),
            ended: Vec::new(),
            graphs: state.workflow_graphs.clone(),
            jobs: JobsRead::default(),
        }
    }

    /// The same start again, for a transaction the database gave up and runs again: what the
    /// given-up attempt gathered was rolled back with it and must not be acted on.
    pub fn afresh(&self) -> Self {
        Self {
            now_ms: self.now_ms,
            alerts: self.alerts.clone(),
            dues: Vec::new(),
            ended: Vec::new(),
            graphs: self.graphs.clone(),
            jobs: JobsRead::default(),
        }
    }

    /// The jobs this transaction has read.
    pub fn jobs(&mut self) -> &mut JobsRead {
        &mut self.jobs
    }

    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Takes out of the follow-ups the new runs due by this transaction's time, for a caller
    /// that sends them itself; the others still go to the timer at the commit.
    pub fn take_due_now(&mut self) -> Vec<RunId> {
        let now = self.now_ms;
        let (due, later): (Vec<Due>, Vec<Due>) = self.dues.drain(..).partition(|d| d.at_ms <= now);
        self.dues = later;
        due.into_iter().map(|d| d.run_id).collect()
    }

    /// The runs that ended in this transaction, by status.
    pub fn ended(&self) -> &[RunStatus] {
        &self.ended
    }

    /// After the commit: wakes the alert worker for what was written, counts the outcomes and
    /// hands the new and requeued runs to the timer.
    pub fn committed(self, state: &AppState) {
        self.alerts.committed();
        for status in &self.ended {
            state.metrics.run_outcomes.inc(status.as_str());
        }
        state.scheduler.enqueue(self.dues);
    }

    /// The agent's answer to a trigger. Accepted, the run is `running` there; refused by every
    /// agent, it has `failed` and its follow-ups are made. Returns whether it became final here.
    ///
    /// # Errors
    /// Database errors (the caller's transaction rolls back).
    pub fn sent(
        &mut self,
        conn: &mut AnyConnection,
        run_id: RunId,
        answer: &TriggerAnswer<'_>,
    ) -> Result<bool, Error> {
        let failed = job_run::record_trigger(conn, run_id, answer, self.now_ms)?;
        if failed {
            self.after_final(conn, run_id)?;
        }
        Ok(failed)
    }

    /// Agents' answers to triggers, as [`Self::sent`] each: the accepted ones stored together
    /// where that pays (`db::batch_writes_pay`; nothing follows from an acceptance), the others
    /// one by one.
    ///
    /// # Errors
    /// Database errors (the caller's transaction rolls back).
    pub fn sent_all(
        &mut self,
        conn: &mut AnyConnection,
        answers: &[(RunId, TriggerAnswer<'_>)],
    ) -> Result<(), Error> {
        let (accepted, refused): (Vec<_>, Vec<_>) =
            answers.iter().partition(|(_, answer)| answer.accepted);
        if accepted.len() > 1 && crate::db::batch_writes_pay(conn) {
            job_run::record_accepted_all(conn, &accepted)?;
        } else {
            for (run_id, answer) in &accepted {
                self.sent(conn, *run_id, answer)?;
            }
        }
        for (run_id, answer) in &refused {
            self.sent(conn, *run_id, answer)?;
        }
        Ok(())
    }

    /// Results of several runs, as [`Self::finished`] each: stored with a few statements where
    /// that pays (`db::batch_writes_pay`) and none of the runs has a final result yet (the usual
    /// case), one by one otherwise. Returns how many were stored.
    ///
    /// # Errors
    /// Database errors.
    pub fn finished_all(
        &mut self,
        conn: &mut AnyConnection,
        results: &[(JobRun, RunResult)],
    ) -> Result<usize, Error> {
        let pairs: Vec<(RunId, &RunResult)> = results
            .iter()
            .map(|(run, result)| (run.id, result))
            .collect();
        // A failure may page, which needs its whole job; the rest need only the end rules.
        let (failures, rest): (Vec<_>, Vec<_>) = results
            .iter()
            .partition(|(_, result)| followup::retryable(result.status));
        self.jobs
            .read_all(conn, failures.iter().map(|(run, _)| run.job_id))?;
        self.jobs
            .read_end_rules_all(conn, rest.iter().map(|(run, _)| run.job_id))?;
        if results.len() > 1
            && crate::db::batch_writes_pay(conn)
            && job_run::record_results_all(conn, &pairs)?
        {
            for (run, result) in results {
                self.after_final_of(conn, result.applied_to(run))?;
            }
            return Ok(results.len());
        }
        let mut stored = 0;
        for (run, result) in results {
            if self.finished(conn, run, result)? {
                stored += 1;
            }
        }
        Ok(stored)
    }

    /// The agent's result; a repeated or late one changes nothing. Returns whether it was stored.
    ///
    /// # Errors
    /// Database errors.
    pub fn finished(
        &mut self,
        conn: &mut AnyConnection,
        run: &JobRun,
        result: &RunResult,
    ) -> Result<bool, Error> {
        if !job_run::record_result(conn, run.id, result)? {
            return Ok(false);
        }
        // Stored over a pending or running row, whose other fields the result leaves alone.
        self.after_final_of(conn, result.applied_to(run))?;
        Ok(true)
    }

    /// Ends a pending or running run with a status the admin decided (`lost`, `timed_out`,
    /// `killed`), once. Returns whether this call ended it.
    ///
    /// # Errors
    /// Database errors.
    pub fn ended_by_admin(
        &mut self,
        conn: &mut AnyConnection,
        run_id: RunId,
        status: RunStatus,
        message: &str,
    ) -> Result<bool, Error> {
        debug_assert!(matches!(
            status,
            RunStatus::Lost | RunStatus::TimedOut | RunStatus::Killed
        ));
        if !job_run::finish(conn, run_id, status.as_str(), message, self.now_ms)? {
            return Ok(false);
        }
        self.after_final(conn, run_id)?;
        Ok(true)
    }

    /// Ends a pending run unsent (concurrency policy, a disabled or deleted job): no retry, no
    /// alert, no children.
    ///
    /// # Errors
    /// Database errors.
    pub fn skipped(
        &mut self,
        conn: &mut AnyConnection,
        run_id: RunId,
        reason: &str,
    ) -> Result<bool, Error> {
        let skipped = job_run::skip(conn, run_id, reason, self.now_ms)?;
        if skipped {
            self.ended.push(RunStatus::Skipped);
            // A workflow node whose run never went out has failed: the workflow moves on.
            workflow::job_run_skipped(conn, self, run_id)?;
        }
        Ok(skipped)
    }

    /// A run an agent accepted and handed back unstarted goes out again as the same run, at
    /// once and without using a retry: it cannot have run.
    ///
    /// # Errors
    /// Database errors.
    pub fn requeued(
        &mut self,
        conn: &mut AnyConnection,
        run_id: RunId,
        why: &str,
    ) -> Result<bool, Error> {
        let requeued = job_run::requeue(conn, run_id, why)?;
        if requeued {
            self.dues.push(Due {
                at_ms: self.now_ms,
                run_id,
            });
        }
        Ok(requeued)
    }

    fn after_final(&mut self, conn: &mut AnyConnection, run_id: RunId) -> Result<(), Error> {
        let run = job_run::get(conn, run_id)?;
        self.after_final_of(conn, run)
    }

    /// `run`, as it is now that it is final: its follow-ups.
    fn after_final_of(&mut self, conn: &mut AnyConnection, run: JobRun) -> Result<(), Error> {
        self.ended.push(run.status);
        let follow_ups =
            followup::after_final(conn, run, self.now_ms, &self.alerts, &mut self.jobs)?;
        self.dues.extend(follow_ups.dues);
        if let Some(run) = follow_ups.settled
            && run.workflow_node_id.is_some()
        {
            workflow::job_run_final(conn, self, &run)?;
        }
        Ok(())
    }
}

/// A new pending run.
///
/// # Errors
/// `Conflict` when its slot (or shard of the slot) already has a run; database errors.
pub fn created(conn: &mut AnyConnection, new: &NewJobRun) -> Result<RunId, Error> {
    job_run::insert(conn, new)
}

/// The planned fires of one scheduler pass, in one statement; their ids in order.
///
/// # Errors
/// `Conflict` when a slot already has its run (the unique key); database errors.
pub fn fires_created(conn: &mut AnyConnection, rows: &[NewJobRun]) -> Result<Vec<RunId>, Error> {
    job_run::insert_fires(conn, rows)
}

/// Takes a pending run for dispatch: one admin (and one task) wins.
///
/// # Errors
/// Database errors.
pub fn claimed(conn: &mut AnyConnection, run_id: RunId, now_ms: i64) -> Result<bool, Error> {
    job_run::claim(conn, run_id, now_ms)
}

/// Takes all of `run_ids` for dispatch, or none (someone took one of them already: claim them
/// one by one then). Returns whether they were taken.
///
/// # Errors
/// Database errors.
pub fn all_claimed(
    conn: &mut AnyConnection,
    run_ids: &[RunId],
    now_ms: i64,
) -> Result<bool, Error> {
    job_run::claim_all(conn, run_ids, now_ms)
}

/// A run in doubt that the agent at `address` turned out to hold: running there, once.
///
/// # Errors
/// Database errors.
pub fn adopted(
    conn: &mut AnyConnection,
    run_id: RunId,
    claimed_ms: i64,
    address: &str,
    instance: &str,
    message: &str,
) -> Result<bool, Error> {
    job_run::adopt(conn, run_id, claimed_ms, address, instance, message)
}

/// A run in doubt that no agent holds: its claim is given up, so it can be sent again.
///
/// # Errors
/// Database errors.
pub fn released(conn: &mut AnyConnection, run_id: RunId, claimed_ms: i64) -> Result<bool, Error> {
    job_run::release_claim(conn, run_id, claimed_ms)
}
