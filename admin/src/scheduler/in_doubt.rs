//! Runs in doubt: taken for sending by an admin that stopped (kill -9, a crash) before it stored
//! the agent's answer. Whether an agent has the run is a fact the agents know, so ask them
//! instead of guessing: the agent that holds it gets it recorded (and its result will count),
//! and a run no agent holds is sent again under the same id, without using up a retry.
//!
//! The question is asked only after the stopped admin's hand-over must be over (each address it
//! could try costs at most `trigger_timeout`, twice with busyover), so no late answer can still
//! reach an agent. Groups whose agents cannot answer (XXL-Job executors, manual addresses) keep
//! the old rule: the run is ended `lost` after `STUCK_CLAIM_AFTER_MS` and retried per its policy.

use std::collections::HashMap;

use crate::db::{agent, executor_group, job_run};
use crate::domain::agent::live_since;
use crate::domain::ids::GroupId;
use crate::domain::policy::{AddressMode, RunStatus};
use crate::error::Error;
use crate::lifecycle;
use crate::state::AppState;

use super::monitors::STUCK_CLAIM_AFTER_MS;

/// What one look at the runs in doubt did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// An agent held the run: it is recorded as running there.
    pub adopted: usize,
    /// No agent held it: sent again.
    pub resent: usize,
    /// Nobody can tell (executors, manual addresses, agents not answering for too long).
    pub lost: usize,
}

/// How long after its claim a run may still be on its way to an agent: every candidate tried
/// in turn, each with an idle check (busyover) and a trigger, each bounded by the timeout.
pub fn handover_bound_ms(trigger_timeout_ms: i64, candidates: usize) -> i64 {
    let candidates = i64::try_from(candidates.max(1)).unwrap_or(i64::MAX / 4);
    trigger_timeout_ms.saturating_mul(2 * candidates + 1) + 1_000
}

/// Where a group's runs in doubt may be.
enum Whereabouts {
    /// Live jobfleet agents that can say what they hold.
    Agents(Vec<String>),
    /// Nobody can be asked.
    Unknowable,
}

fn whereabouts(group: &executor_group::ExecutorGroup, agents: &[agent::Agent]) -> Whereabouts {
    if group.address_mode == AddressMode::Manual || agents.iter().any(|a| a.key_hash.is_empty()) {
        return Whereabouts::Unknowable;
    }
    Whereabouts::Agents(agents.iter().map(|a| a.address.clone()).collect())
}

/// Looks at the runs claimed before `now` minus the shortest hand-over bound whose answer was
/// never stored, and settles those whose hand-over must be over.
///
/// # Errors
/// Database errors; the next pass tries again.
pub async fn resolve(state: &AppState, now: i64) -> Result<Resolved, Error> {
    let timeout_ms = i64::try_from(state.config.trigger_timeout.as_millis()).unwrap_or(i64::MAX);
    let earliest = now - handover_bound_ms(timeout_ms, 1);
    let (stuck, groups) = state
        .db
        .run(move |conn| {
            let stuck = job_run::stale_claims(conn, earliest, 500)?;
            let mut groups: HashMap<GroupId, (executor_group::ExecutorGroup, Vec<agent::Agent>)> =
                HashMap::new();
            for run in &stuck {
                if groups.contains_key(&run.group_id) {
                    continue;
                }
                let Some(group) = executor_group::find(conn, run.group_id)? else {
                    continue;
                };
                // Every registration of the group, approved or not: a pending agent cannot
                // have been sent a run, but asking it costs nothing and proves more.
                let live = agent::seen_since(conn, &group.app_name, live_since(now))?
                    .into_iter()
                    .filter(|a| a.approval != agent::REVOKED)
                    .collect();
                groups.insert(run.group_id, (group, live));
            }
            Ok((stuck, groups))
        })
        .await?;
    let mut done = Resolved::default();
    let mut resend = Vec::new();
    let mut answers: HashMap<String, Option<jobfleet_agent::protocol::HeldRuns>> = HashMap::new();
    for run in stuck {
        let Some(claimed) = run.triggered_ms else {
            continue;
        };
        let Some((group, agents)) = groups.get(&run.group_id) else {
            // The group is gone: nothing can be sent; let the old rule end it.
            done.lost += usize::from(lose_if_old(state, &run, claimed, now).await?);
            continue;
        };
        if now - claimed < handover_bound_ms(timeout_ms, agents.len()) {
            continue;
        }
        let addresses = match whereabouts(group, agents) {
            Whereabouts::Unknowable => {
                done.lost += usize::from(lose_if_old(state, &run, claimed, now).await?);
                continue;
            }
            Whereabouts::Agents(addresses) => addresses,
        };
        let mut holder = None;
        let mut all_answered = true;
        for address in &addresses {
            if !answers.contains_key(address) {
                let answer = state.agents.held(address).await;
                if let Err(e) = &answer {
                    tracing::warn!(agent = %address, error = %e, "Cannot ask an agent what it holds");
                }
                answers.insert(address.clone(), answer.ok());
            }
            match answers.get(address).and_then(Option::as_ref) {
                Some(held) if held.held_runs.contains(&run.id.0) => {
                    holder = Some((address.clone(), held.instance_id.clone()));
                    break;
                }
                Some(_) => {}
                None => all_answered = false,
            }
        }
        if let Some((address, instance)) = holder {
            let message = format!(
                "accepted by {address}; recovered after the admin that sent it stopped before storing the answer"
            );
            let (id, at) = (run.id, claimed);
            let adopted = state
                .db
                .run(move |conn| lifecycle::adopted(conn, id, at, &address, &instance, &message))
                .await?;
            if adopted {
                tracing::warn!(run_id = %run.id, "Run in doubt found on its agent");
                done.adopted += 1;
            }
        } else if all_answered {
            let (id, at) = (run.id, claimed);
            let released = state
                .db
                .run(move |conn| lifecycle::released(conn, id, at))
                .await?;
            if released {
                tracing::warn!(
                    run_id = %run.id,
                    "Run in doubt held by no agent: sending it again"
                );
                resend.push(run.id);
            }
        } else {
            done.lost += usize::from(lose_if_old(state, &run, claimed, now).await?);
        }
    }
    done.resent = super::monitors::send_all(state, resend).await?;
    Ok(done)
}

/// The old rule, where nobody can tell: ended `lost` (and retried per policy) once the claim is
/// `STUCK_CLAIM_AFTER_MS` old.
async fn lose_if_old(
    state: &AppState,
    run: &job_run::JobRun,
    claimed: i64,
    now: i64,
) -> Result<bool, Error> {
    if now - claimed < STUCK_CLAIM_AFTER_MS {
        return Ok(false);
    }
    let message = "the admin sending this run stopped before the agent's answer was stored, and no agent could say whether it has it; it may or may not have run".to_owned();
    super::monitors::end_run(state, run.id, RunStatus::Lost, message).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handover_bound_covers_every_candidate() {
        assert_eq!(handover_bound_ms(3_000, 0), 10_000);
        assert_eq!(handover_bound_ms(3_000, 1), 10_000);
        assert_eq!(handover_bound_ms(3_000, 3), 22_000);
        assert_eq!(handover_bound_ms(500, 2), 3_500);
    }
}
