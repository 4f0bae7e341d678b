//! How a run ended: XXL-Job's `handleCode` and jobfleet's finer `status`, which a result
//! carries side by side so XXL-Job admins read the code and jobfleet admins the status.

use super::wire_enum::wire_enum;

/// XXL-Job's `handleCode` values (`XxlJobContext.HANDLE_CODE_*`).
pub mod handle_code {
    pub const SUCCESS: i32 = 200;
    pub const FAIL: i32 = 500;
    /// The run hit its timeout.
    pub const TIMEOUT: i32 = 502;
}

wire_enum! {
    /// jobfleet: a result's `status`. XXL-Job executors send none; their `handleCode` says
    /// what they know (`RunOutcome::of_handle_code`).
    pub enum RunOutcome {
        Succeeded => "succeeded",
        /// A non-zero exit or a signal, or the run could not be started.
        Failed => "failed",
        TimedOut => "timed_out",
        /// Stopped on purpose: a kill, a cover-early replacement, the agent shutting down.
        Killed => "killed",
        /// Stopped by its memory limit.
        OomKilled => "oom_killed",
        /// Accepted but never started (the agent shut down first, or could not journal it).
        Rejected => "rejected",
        /// The agent died while the run was going (said after its restart).
        Lost => "lost",
        /// Accepted into the queue and never started before the agent restarted: the admin
        /// sends it again as the same run, without using a retry.
        NotStarted => "not_started",
    }
}

impl RunOutcome {
    /// The `handleCode` an XXL-Job admin reads for this outcome.
    pub fn handle_code(&self) -> i32 {
        match self {
            RunOutcome::Succeeded => handle_code::SUCCESS,
            RunOutcome::TimedOut => handle_code::TIMEOUT,
            _ => handle_code::FAIL,
        }
    }

    /// What a result without a `status` (from an XXL-Job executor) means.
    pub fn of_handle_code(code: i32) -> RunOutcome {
        match code {
            handle_code::SUCCESS => RunOutcome::Succeeded,
            handle_code::TIMEOUT => RunOutcome::TimedOut,
            _ => RunOutcome::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_codes_and_outcomes_agree() {
        for outcome in RunOutcome::KNOWN {
            let back = RunOutcome::of_handle_code(outcome.handle_code());
            assert_eq!(back.handle_code(), outcome.handle_code(), "{outcome}");
        }
        assert_eq!(RunOutcome::of_handle_code(0), RunOutcome::Failed);
    }
}
