//! The saved XXL-Job bodies in `agent/tests/fixtures/xxl/` read into our types and written
//! back: nothing XXL-Job sets may be lost, and values we do not know must still parse.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::*;

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../tests/fixtures/xxl/", $name)),
        )
    };
}

/// Every field of `sent` is in `back` with the same value; `back` may add its own.
fn assert_kept(sent: &Value, back: &Value, at: &str) {
    match (sent, back) {
        (Value::Object(sent), Value::Object(back)) => {
            for (key, value) in sent {
                let Some(returned) = back.get(key) else {
                    panic!("{at}.{key} was lost");
                };
                assert_kept(value, returned, &format!("{at}.{key}"));
            }
        }
        (Value::Array(sent), Value::Array(back)) => {
            assert_eq!(sent.len(), back.len(), "{at}");
            for (i, (s, b)) in sent.iter().zip(back).enumerate() {
                assert_kept(s, b, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(sent, back, "{at}"),
    }
}

fn round_trip<T: DeserializeOwned + Serialize>((name, text): (&str, &str)) -> T {
    let parsed: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let sent: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&parsed).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_kept(&sent, &back, name);
    parsed
}

#[test]
fn triggers_round_trip() {
    let shell: TriggerParam = round_trip(fixture!("trigger-shell.json"));
    assert_eq!(
        (shell.glue_type, shell.executor_block_strategy, shell.log_id),
        (
            Some(GlueType::Shell),
            Some(BlockStrategy::SerialExecution),
            42
        )
    );
    let python: TriggerParam = round_trip(fixture!("trigger-python.json"));
    assert_eq!(
        (python.glue_type, python.executor_block_strategy),
        (Some(GlueType::Python), Some(BlockStrategy::DiscardLater))
    );
    let bean: TriggerParam = round_trip(fixture!("trigger-bean.json"));
    assert_eq!(
        (
            bean.glue_type,
            bean.executor_block_strategy,
            bean.executor_handler.as_deref(),
            (bean.broadcast_index, bean.broadcast_total)
        ),
        (
            Some(GlueType::Bean),
            Some(BlockStrategy::CoverEarly),
            Some("demoJobHandler"),
            (1, 3)
        )
    );
    // Unknown to us is not unreadable: the runner refuses it, with its name.
    let foreign: TriggerParam = round_trip(fixture!("trigger-foreign-values.json"));
    assert_eq!(
        (foreign.glue_type, foreign.executor_block_strategy),
        (
            Some(GlueType::Other("GLUE_RUBY".into())),
            Some(BlockStrategy::Other("CONCURRENT_EXECUTION".into()))
        )
    );
}

#[test]
fn callbacks_round_trip() {
    let results: Vec<HandleCallbackParam> = round_trip(fixture!("callback.json"));
    let outcomes: Vec<_> = results
        .iter()
        .map(|r| (r.status.clone(), RunOutcome::of_handle_code(r.handle_code)))
        .collect();
    assert_eq!(
        outcomes,
        [
            (None, RunOutcome::Succeeded),
            (None, RunOutcome::Failed),
            (None, RunOutcome::TimedOut)
        ]
    );
    let ours: Vec<HandleCallbackParam> = round_trip(fixture!("jobfleet-callback.json"));
    assert_eq!(
        (
            ours[0].status.clone(),
            ours[0].usage.as_ref().map(|u| u.oom_killed)
        ),
        (Some(RunOutcome::OomKilled), Some(true))
    );
    assert_eq!(ours[1].status, Some(RunOutcome::Other("paused".into())));
}

#[test]
fn registry_and_admin_calls_round_trip() {
    let registry: RegistryParam = round_trip(fixture!("registry.json"));
    assert_eq!(registry.registry_group, REGISTRY_GROUP_EXECUTOR);
    let idle: JobIdParam = round_trip(fixture!("idle-beat.json"));
    // XXL-Job's kill names the job only; ours may name the run too.
    let kill: KillParam = round_trip(fixture!("kill.json"));
    assert_eq!((idle.job_id, kill.job_id, kill.log_id), (1, 1, None));
    let log: LogParam = round_trip(fixture!("log.json"));
    assert_eq!((log.log_id, log.from_line_num), (42, 1));
    // `beat` has no body to speak of; the agent ignores it.
    let beat: Value = round_trip(fixture!("beat.json"));
    assert_eq!(beat, Value::String(String::new()));
}

#[test]
fn answers_round_trip() {
    let ok: Envelope<String> = round_trip(fixture!("return-success.json"));
    assert!(ok.is_ok());
    let refused: Envelope<String> = round_trip(fixture!("return-fail.json"));
    assert_eq!(
        (refused.is_ok(), refused.msg.as_deref()),
        (false, Some(WRONG_TOKEN_MSG))
    );
    let old: Envelope<LogResult> = round_trip(fixture!("return-log-2.4.json"));
    assert!(
        old.payload()
            .is_some_and(|l| l.is_end && l.to_line_num == 2)
    );
    let new: Envelope<LogResult> = round_trip(fixture!("response-log-3.x.json"));
    assert!(
        new.payload()
            .is_some_and(|l| !l.is_end && l.from_line_num == 3)
    );
}
