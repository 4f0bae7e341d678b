//! Per-job policies: misfire, cluster-wide concurrency, the agent's block strategy, retries,
//! and the handler kinds.

use super::string_enum;

string_enum! {
    /// What to do with a fire that is later than the misfire threshold (the admin was down).
    pub enum Misfire {
        DoNothing => "do_nothing",
        FireOnceNow => "fire_once_now",
    }
}

string_enum! {
    /// Cluster-wide: may a new run start while one of the same job is in flight?
    pub enum Concurrency {
        Allow => "allow",
        Forbid => "forbid",
        Replace => "replace",
    }
}

string_enum! {
    /// Per agent, XXL-Job's executor block strategies.
    pub enum BlockStrategy {
        Serial => "serial",
        DiscardLater => "discard_later",
        CoverEarly => "cover_early",
    }
}

string_enum! {
    /// `http`: a request the agent sends itself, without a process.
    pub enum HandlerType {
        Shell => "shell",
        Script => "script",
        Bean => "bean",
        Http => "http",
    }
}

string_enum! {
    /// Interpreters a script job may name; the agent reports a missing one as a failed run.
    pub enum Interpreter {
        Bash => "bash",
        Sh => "sh",
        Python3 => "python3",
        Node => "node",
        Php => "php",
        Perl => "perl",
        Pwsh => "pwsh",
    }
}

string_enum! {
    pub enum AddressMode {
        Auto => "auto",
        Manual => "manual",
    }
}

string_enum! {
    /// `skipped`: never sent, because the concurrency policy said so or the job was disabled
    /// or deleted before its fire.
    pub enum RunStatus {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        TimedOut => "timed_out",
        Killed => "killed",
        Lost => "lost",
        Skipped => "skipped",
    }
}

impl RunStatus {
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

string_enum! {
    /// Why a run row exists.
    pub enum TriggerKind {
        Schedule => "schedule",
        Manual => "manual",
        Api => "api",
        Retry => "retry",
        Child => "child",
        Misfire => "misfire",
        Workflow => "workflow",
    }
}

/// The delay before retry `attempt` (1-based: the first retry is attempt 2): the base, then
/// three times the previous delay, capped at an hour, so a flapping dependency is not hammered.
pub fn retry_delay_s(backoff_s: i64, retry_number: u32) -> i64 {
    const CAP_S: i64 = 3600;
    let mut delay = backoff_s.max(0);
    for _ in 1..retry_number {
        delay = delay.saturating_mul(3);
        if delay >= CAP_S {
            return CAP_S;
        }
    }
    delay.min(CAP_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(retry_delay_s(10, 1), 10);
        assert_eq!(retry_delay_s(10, 2), 30);
        assert_eq!(retry_delay_s(10, 3), 90);
        assert_eq!(retry_delay_s(10, 30), 3600);
        assert_eq!(retry_delay_s(0, 5), 0);
        assert_eq!(retry_delay_s(-5, 1), 0);
    }

    #[test]
    fn enum_names_round_trip() {
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>(), Ok(*s));
        }
        assert!("queued".parse::<RunStatus>().is_err());
        assert!(RunStatus::Lost.is_final());
        assert!(!RunStatus::Running.is_final());
        assert_eq!(
            serde_json::to_string(&Misfire::FireOnceNow).unwrap(),
            "\"fire_once_now\""
        );
    }
}
