//! The messages of the executor protocol, with jobfleet's optional extras.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{BlockStrategy, GlueType, RunOutcome};

/// Register or heartbeat (`api/registry`) and deregister (`api/registryRemove`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryParam {
    /// Always `EXECUTOR` for agents.
    pub registry_group: String,
    /// The group's app name.
    pub registry_key: String,
    /// The agent's base URL, e.g. `http://10.0.0.5:9999/`.
    pub registry_value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<HostMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_mode: Option<String>,
    /// jobfleet: a random id of this agent process, new at every start. A heartbeat from a new
    /// instance tells the admin that runs the previous one held are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// jobfleet: the run ids this instance holds (running, queued, or with a result not yet
    /// acknowledged), as of the heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_runs: Option<Vec<i64>>,
    /// jobfleet: the highest accept sequence number this instance had handed out when
    /// `held_runs` was taken; a run accepted with a sequence at or below it and missing from
    /// `held_runs` is no longer held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_through: Option<u64>,
    /// jobfleet: the user jobs run as when a trigger names none (`root` when the agent runs
    /// as root without a `run_as`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// jobfleet: how the admin reaches the agent: `push` (it dials the address), `connect`
    /// (only over the agent's own connection), `auto` (the connection when held, else the address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// jobfleet's answer to an accepted `run`, in the envelope's `content`: which agent instance
/// took the run and its accept sequence number there. It travels as its JSON text inside a
/// string (`as_content`): an XXL-Job admin reads a run's content as a `String` (its
/// `ReturnT<String>`, through Gson), so an object there would turn every accepted trigger into
/// "response content invalid", a failure, while the run goes on here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAccepted {
    pub instance_id: String,
    pub seq: u64,
}

impl RunAccepted {
    /// The content of a `run` answer: this, as JSON text, to be sent as a JSON string.
    pub fn as_content(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a `run` answer's content: the string `as_content` makes, or the object itself
    /// (agents before 2026-11-29 sent that). Anything else (an executor's own content) is none.
    pub fn from_content(content: &serde_json::value::RawValue) -> Option<Self> {
        serde_json::from_str::<String>(content.get())
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .or_else(|| serde_json::from_str(content.get()).ok())
    }
}

/// jobfleet: what an agent holds now (`held`), the same facts a heartbeat carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldRuns {
    pub instance_id: String,
    /// Running, queued, or with a result not yet acknowledged.
    pub held_runs: Vec<i64>,
    /// The last accept sequence number handed out before `held_runs` was taken.
    pub accepted_through: u64,
}

/// Host metrics an agent sends with each heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostMetrics {
    pub cpu_pct: f64,
    pub load1: f64,
    pub mem_used_mb: u64,
    pub mem_total_mb: u64,
    pub disk_free_mb: u64,
    pub running: u32,
}

/// `run`: start a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerParam {
    pub job_id: i64,
    #[serde(default)]
    pub executor_handler: Option<String>,
    #[serde(default)]
    pub executor_params: Option<String>,
    #[serde(default)]
    pub executor_block_strategy: Option<BlockStrategy>,
    /// Seconds; 0 = none.
    #[serde(default)]
    pub executor_timeout: i64,
    /// The run id.
    pub log_id: i64,
    /// Older executors spell it `logDateTim`, as callbacks still do.
    #[serde(default, alias = "logDateTim")]
    pub log_date_time: i64,
    #[serde(default)]
    pub glue_type: Option<GlueType>,
    #[serde(default)]
    pub glue_source: Option<String>,
    #[serde(default)]
    pub glue_updatetime: i64,
    #[serde(default)]
    pub broadcast_index: i32,
    #[serde(default = "one")]
    pub broadcast_total: i32,
    /// jobfleet: interpreter for a script (`bash`, `python3`, `perl`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
    /// jobfleet: resource limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// jobfleet: extra environment for the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// jobfleet: 1 for the first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<String>,
    /// jobfleet: how long a success of this run may wait on the agent for other results to
    /// travel with it (milliseconds, at most [`MAX_RESULT_LINGER_MS`]). Absent, and for a
    /// failure: sent once the results that end together are collected (`spool::COLLECT_FOR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_linger_ms: Option<i64>,
    /// jobfleet: start the run this many milliseconds after the trigger arrives instead of at
    /// once (at most [`MAX_START_IN_MS`]): the admin sends the runs of its next moments together,
    /// ahead of their time. The run holds its slot and its place in its job meanwhile; a kill
    /// or a cover before then ends it `killed`, a shutdown `rejected`, unstarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_in_ms: Option<i64>,
}

/// The longest `resultLingerMs` an agent accepts.
pub const MAX_RESULT_LINGER_MS: i64 = 10_000;
/// The longest `startInMs` an agent accepts.
pub const MAX_START_IN_MS: i64 = 10_000;

fn one() -> i32 {
    1
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// CPU cores, e.g. 0.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<i64>,
}

/// `idleBeat` carries just the job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobIdParam {
    pub job_id: i64,
}

/// `kill`: XXL-Job names the job only (its executor runs one run of a job at a time there). A
/// jobfleet admin names the run too, so that a kill arriving after the run ended (its result
/// still on the way, or waiting for company in the spool) does not stop the job's next run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KillParam {
    pub job_id: i64,
    /// jobfleet: the run to kill; absent: whatever of the job runs or waits here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_id: Option<i64>,
}

/// `log`: read a run's log from a line on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogParam {
    #[serde(default)]
    pub log_date_tim: i64,
    pub log_id: i64,
    pub from_line_num: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogResult {
    pub from_line_num: i64,
    pub to_line_num: i64,
    pub log_content: String,
    /// True once the run has finished and the last line was returned.
    pub is_end: bool,
}

/// A finished run's result (`api/callback` takes a list of these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandleCallbackParam {
    pub log_id: i64,
    /// Spelled so by XXL-Job.
    #[serde(default)]
    pub log_date_tim: i64,
    /// One of `handle_code`'s values from a jobfleet agent; a foreign executor may send others.
    pub handle_code: i32,
    #[serde(default)]
    pub handle_msg: Option<String>,
    /// jobfleet: how the run ended, finer than `handle_code`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_mode: Option<String>,
    /// jobfleet: microseconds from the agent receiving the trigger to the process running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_latency_us: Option<u64>,
    /// jobfleet: the attempt this result belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// jobfleet: what the run wrote to its output file (`$JOBFLEET_OUTPUT`): `KEY=value` lines,
    /// at most [`MAX_OUTPUT_BYTES`]. Workflows pass them to downstream nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// jobfleet: the run's whole log when it is at most [`INLINE_LOG_MAX_BYTES`] (invalid UTF-8
    /// replaced), so that an admin keeping logs stores it with the result instead of reading it
    /// back from the agent; absent for a longer log, which the admin reads page by page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// The most of a run's output file an agent sends (whole lines; the rest is dropped).
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// The longest log a result carries whole (`HandleCallbackParam::log`).
pub const INLINE_LOG_MAX_BYTES: usize = 4 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub cpu_ms: u64,
    pub max_rss_kb: u64,
    pub oom_killed: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::Envelope;
    use super::*;

    /// A trigger as an XXL-Job 2.4 admin sends it (nulls written out, no jobfleet extras).
    const XXL_TRIGGER: &str = r##"{"jobId":1,"executorHandler":"","executorParams":null,"executorBlockStrategy":"SERIAL_EXECUTION","executorTimeout":0,"logId":42,"logDateTime":1732270000000,"glueType":"GLUE_SHELL","glueSource":"#!/bin/bash\necho hi","glueUpdatetime":1732260000000,"broadcastIndex":0,"broadcastTotal":1}"##;
    /// A callback as a Java executor sends it (legacy `executeResult` included, nulls omitted).
    const XXL_CALLBACK: &str = r#"[{"logId":42,"logDateTim":1732270000000,"handleCode":200,"executeResult":{"code":200,"msg":null}}]"#;
    const XXL_REGISTRY: &str = r#"{"registryGroup":"EXECUTOR","registryKey":"xxl-job-executor-sample","registryValue":"http://10.0.0.5:9999/"}"#;

    #[test]
    fn reads_xxl_job_messages() {
        let trigger: TriggerParam = serde_json::from_str(XXL_TRIGGER).unwrap();
        assert_eq!(
            (trigger.job_id, trigger.log_id, trigger.log_date_time),
            (1, 42, 1_732_270_000_000)
        );
        assert_eq!(trigger.executor_params, None);
        assert_eq!(trigger.limits, None);
        let callbacks: Vec<HandleCallbackParam> = serde_json::from_str(XXL_CALLBACK).unwrap();
        assert_eq!(
            (
                callbacks[0].log_id,
                callbacks[0].handle_code,
                callbacks[0].handle_msg.as_deref()
            ),
            (42, 200, None)
        );
        let registry: RegistryParam = serde_json::from_str(XXL_REGISTRY).unwrap();
        assert_eq!(registry.registry_key, "xxl-job-executor-sample");
        let old: TriggerParam =
            serde_json::from_str(r#"{"jobId":1,"logId":2,"logDateTim":3}"#).unwrap();
        assert_eq!((old.log_date_time, old.broadcast_total), (3, 1));
    }

    #[test]
    fn writes_xxl_job_field_names_and_skips_absent_extras() {
        let cb = HandleCallbackParam {
            log_id: 1,
            log_date_tim: 2,
            handle_code: 500,
            handle_msg: Some("boom".into()),
            status: None,
            exit_code: None,
            signal: None,
            started_ms: None,
            finished_ms: None,
            usage: None,
            limits_mode: None,
            start_latency_us: None,
            attempt: None,
            output: None,
            log: None,
        };
        assert_eq!(
            serde_json::to_string(&cb).unwrap(),
            r#"{"logId":1,"logDateTim":2,"handleCode":500,"handleMsg":"boom"}"#
        );
        let log = LogResult {
            from_line_num: 1,
            to_line_num: 3,
            log_content: "a\n".into(),
            is_end: true,
        };
        assert_eq!(
            serde_json::to_string(&log).unwrap(),
            r#"{"fromLineNum":1,"toLineNum":3,"logContent":"a\n","isEnd":true}"#
        );
    }

    #[test]
    fn envelopes_carry_content_and_data() {
        let ok = serde_json::to_string(&Envelope::ok(5)).unwrap();
        assert_eq!(ok, r#"{"code":200,"msg":null,"content":5,"data":5}"#);
        let new_style: Envelope<i32> = serde_json::from_str(r#"{"code":200,"data":7}"#).unwrap();
        assert_eq!(new_style.payload(), Some(7));
        let failed: Envelope<LogResult> =
            serde_json::from_str(r#"{"code":500,"msg":"The access token is wrong."}"#).unwrap();
        assert!(!failed.is_ok());
        assert_eq!(
            serde_json::to_string(&Envelope::<()>::success()).unwrap(),
            r#"{"code":200,"msg":null}"#
        );
    }

    /// What a `run` answer carries is a string to an XXL-Job admin, and an acceptance to ours;
    /// the object an older agent sent still reads.
    #[test]
    fn a_run_acceptance_travels_as_a_string() {
        let taken = RunAccepted {
            instance_id: "i-1".into(),
            seq: 9,
        };
        let answer = serde_json::to_string(&Envelope::ok(taken.as_content())).unwrap();
        assert_eq!(
            answer,
            r#"{"code":200,"msg":null,"content":"{\"instanceId\":\"i-1\",\"seq\":9}","data":"{\"instanceId\":\"i-1\",\"seq\":9}"}"#
        );
        let read: Envelope<String> = serde_json::from_str(&answer).unwrap();
        assert!(
            read.payload().is_some(),
            "a String content, as XXL-Job's ReturnT<String>"
        );
        let raw = |text: &str| serde_json::value::RawValue::from_string(text.to_owned()).unwrap();
        let content = serde_json::to_string(&taken.as_content()).unwrap();
        assert_eq!(
            RunAccepted::from_content(&raw(&content)),
            Some(taken.clone())
        );
        assert_eq!(
            RunAccepted::from_content(&raw(r#"{"instanceId":"i-1","seq":9}"#)),
            Some(taken)
        );
        for foreign in [r#""ok""#, "null", "42", r#"{"x":1}"#] {
            assert_eq!(RunAccepted::from_content(&raw(foreign)), None, "{foreign}");
        }
    }

    /// An envelope kept as text reads and writes exactly as the typed one does: XXL-Job peers
    /// see no difference, and a payload in `data` only (XXL-Job ≥ 3.3) is read too.
    #[test]
    fn a_raw_envelope_is_the_same_on_the_wire() {
        use super::super::RawEnvelope;
        let log = LogResult {
            from_line_num: 1,
            to_line_num: 3,
            log_content: "a\n".into(),
            is_end: true,
        };
        let raw = RawEnvelope::ok_encoded(&log);
        assert_eq!(
            serde_json::to_string(&raw).unwrap(),
            serde_json::to_string(&Envelope::ok(log.clone())).unwrap()
        );
        assert_eq!(
            raw.clone().typed::<LogResult>().unwrap().payload(),
            Some(log.clone())
        );
        assert!(raw.same_as(&Envelope::ok(log.clone()).encoded()));
        assert!(!raw.same_as(&RawEnvelope::fail("no")));
        let new_style: RawEnvelope =
            serde_json::from_str(r#"{"code":200,"data":{"x":1}}"#).unwrap();
        assert_eq!(new_style.payload().unwrap().get(), r#"{"x":1}"#);
        let wrong: RawEnvelope = serde_json::from_str(r#"{"code":200,"content":"text"}"#).unwrap();
        assert!(wrong.typed::<LogResult>().is_err(), "not a LogResult");
    }
}
