//! jobfleet: the frames of an agent's own connection to an admin (`GET /api/agent/connect`,
//! a WebSocket the agent opens; issue 14). Not part of XXL-Job.
//!
//! The connection carries a symmetric RPC in JSON text frames: a call
//! `{"id":N,"call":"run","body":…}` goes down (admin → agent: `run`, `kill`, `log`,
//! `idleBeat`, `beat`, `held`, `runBatch`) or up (agent → admin: `registry`, `callback`,
//! `take`), and its answer
//! `{"id":N,"reply":<XXL-Job envelope>}` comes back with the same id. Bodies and envelopes are
//! exactly the ones the HTTP endpoints of the same name take and give, so each side handles a
//! call with the code that serves it over HTTP.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::envelope::{Envelope, RawEnvelope};
use super::wire_enum::wire_enum;

/// Path of the connect endpoint on the admin, relative to its base URL.
pub const CONNECT_PATH: &str = "api/agent/connect";
/// Header of the connect request naming the address the agent registered (its `registryValue`).
pub const AGENT_ADDRESS_HEADER: &str = "X-Jobfleet-Agent-Address";
/// Header of the connect request naming the agent's group (its `registryKey`).
pub const AGENT_GROUP_HEADER: &str = "X-Jobfleet-Agent-Group";
/// Scheme of the address of an agent in `connect` mode: `conn://<hostname>/<agent id>`. It
/// names the agent in routing, liveness and storage, and cannot be dialled: calls to it go
/// over the agent's connection only.
pub const CONNECT_SCHEME: &str = "conn";
/// Largest frame either side takes; a bigger one is answered with an error, never parsed.
/// A trigger's script source is at most 1 MiB and the HTTP endpoints cap bodies at 2 MiB; a
/// reply carrying a log page (1 MiB, sent as both `content` and `data`, escaped) is the largest.
pub const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;

wire_enum! {
    /// What a call frame asks for. Down: the agent endpoints; up: the admin endpoints.
    pub enum Call {
        Run => "run",
        Kill => "kill",
        Log => "log",
        IdleBeat => "idleBeat",
        Beat => "beat",
        Held => "held",
        RunBatch => "runBatch",
        Registry => "registry",
        Callback => "callback",
        Take => "take",
    }
}

/// `take` (up): an agent with free slots asks its admin for due runs of its group (pull). The
/// admin sends what it found down the same connection as `runBatch` calls, stores the agent's
/// answers, then replies with a `TakeResult`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TakeParam {
    /// At most this many runs (the agent's free slots); the admin caps it at `MAX_TAKE`.
    pub max: u32,
}

/// The reply to `take`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TakeResult {
    /// Runs sent down.
    pub sent: u32,
    /// Of those, the ones the agent accepted.
    pub accepted: u32,
}

/// Most runs one `take` hands out.
pub const MAX_TAKE: u32 = 256;

impl Call {
    /// Whether an agent serves this call (the rest are the admin's).
    pub fn is_down(&self) -> bool {
        matches!(
            self,
            Call::Run
                | Call::Kill
                | Call::Log
                | Call::IdleBeat
                | Call::Beat
                | Call::Held
                | Call::RunBatch
        )
    }

    /// Whether an admin serves this call.
    pub fn is_up(&self) -> bool {
        matches!(self, Call::Registry | Call::Callback | Call::Take)
    }
}

/// One frame as it travels: a call (`call`, `body`) or a reply (`reply`), never both. The body
/// is kept as its text: the side that serves the call reads it straight into the type it takes
/// (a trigger, a batch of results), never through a tree of JSON values first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawFrame {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<Call>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<RawEnvelope>,
}

/// `RawFrame` as it is written, borrowing what it sends: a frame goes out without a copy of its
/// body or reply (one per trigger and per answer).
#[derive(Serialize)]
struct RawFrameOut<'a, B: Serialize + ?Sized = RawValue> {
    id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    call: Option<&'a Call>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a B>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply: Option<&'a RawEnvelope>,
}

/// A frame after its shape was checked. A call's body is its JSON text, checked to be JSON.
#[derive(Debug, Clone)]
pub enum Frame {
    Call {
        id: u64,
        call: Call,
        body: Box<RawValue>,
    },
    Reply {
        id: u64,
        reply: RawEnvelope,
    },
}

/// Equal frames say the same: a body or a reply's payload compares by its text.
impl PartialEq for Frame {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (
                Frame::Call { id, call, body },
                Frame::Call {
                    id: other_id,
                    call: other_call,
                    body: other_body,
                },
            ) => id == other_id && call == other_call && body.get() == other_body.get(),
            (
                Frame::Reply { id, reply },
                Frame::Reply {
                    id: other_id,
                    reply: other_reply,
                },
            ) => id == other_id && reply.same_as(other_reply),
            _ => false,
        }
    }
}

/// The body of a call sent without one (`beat`, `held`).
fn null_body() -> Box<RawValue> {
    RawValue::NULL.to_owned()
}

/// A frame that cannot be served, with the id to answer when the frame had one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadFrame {
    pub id: Option<u64>,
    pub message: String,
}

impl std::fmt::Display for BadFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Frame {
    /// Reads a text frame; `BadFrame` says why it is not one (too big, not JSON, neither or
    /// both of call and reply, a call this version does not know).
    ///
    /// # Errors
    /// Everything that is not a well-formed frame.
    pub fn parse(text: &str) -> Result<Frame, BadFrame> {
        if text.len() > MAX_FRAME_BYTES {
            return Err(BadFrame {
                id: None,
                message: format!("frame is larger than {MAX_FRAME_BYTES} bytes"),
            });
        }
        let raw: RawFrame = serde_json::from_str(text).map_err(|e| BadFrame {
            id: None,
            message: format!("malformed frame: {e}"),
        })?;
        let bad = |message: String| BadFrame {
            id: Some(raw.id),
            message,
        };
        match (raw.call, raw.reply) {
            (Some(Call::Other(name)), None) => Err(bad(format!("unknown call `{name}`"))),
            (Some(call), None) => Ok(Frame::Call {
                id: raw.id,
                call,
                body: raw.body.unwrap_or_else(null_body),
            }),
            (None, Some(reply)) => Ok(Frame::Reply { id: raw.id, reply }),
            (Some(_), Some(_)) => Err(bad("a frame is a call or a reply, not both".into())),
            (None, None) => Err(bad("a frame needs `call` or `reply`".into())),
        }
    }

    /// The text of a call frame, made from borrowed parts: the caller keeps its body (to send
    /// it again on another connection) without a copy per call. The body is JSON already, so
    /// writing the frame cannot fail.
    pub fn call_text(id: u64, call: &Call, body: &RawValue) -> String {
        let raw = RawFrameOut {
            id,
            call: Some(call),
            body: Some(body),
            reply: None,
        };
        serde_json::to_string(&raw).unwrap_or_default()
    }

    /// The frame as text.
    pub fn to_text(&self) -> String {
        let raw = match self {
            Frame::Call { id, call, body } => RawFrameOut {
                id: *id,
                call: Some(call),
                body: Some(&**body),
                reply: None,
            },
            Frame::Reply { id, reply } => RawFrameOut {
                id: *id,
                call: None,
                body: None,
                reply: Some(reply),
            },
        };
        // Serialising a struct of strings, numbers and JSON values cannot fail.
        serde_json::to_string(&raw).unwrap_or_default()
    }

    /// The reply to a frame that could not be served, when it had an id to answer.
    pub fn refusal(bad: &BadFrame) -> Option<Frame> {
        bad.id.map(|id| Frame::Reply {
            id,
            reply: Envelope::fail(bad.message.clone()),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_replies_round_trip() {
        let call = Frame::parse(r#"{"id":7,"call":"run","body":{"jobId":1}}"#).unwrap();
        assert_eq!(
            call,
            Frame::Call {
                id: 7,
                call: Call::Run,
                body: RawValue::from_string(r#"{"jobId":1}"#.to_owned()).unwrap()
            }
        );
        assert_eq!(Frame::parse(&call.to_text()).unwrap(), call);
        let reply = Frame::parse(r#"{"id":7,"reply":{"code":200,"msg":null}}"#).unwrap();
        assert!(matches!(&reply, Frame::Reply { id: 7, reply } if reply.is_ok()));
        assert_eq!(Frame::parse(&reply.to_text()).unwrap(), reply);
        // A call without a body (beat, held) has a null one.
        assert_eq!(
            Frame::parse(r#"{"id":1,"call":"beat"}"#).unwrap(),
            Frame::Call {
                id: 1,
                call: Call::Beat,
                body: null_body()
            }
        );
        assert!(Call::Run.is_down() && !Call::Run.is_up());
        assert!(Call::Callback.is_up() && !Call::Callback.is_down());
    }

    /// A body travels as the text it came as, whatever JSON it is, and a frame written again
    /// from it reads the same.
    #[test]
    fn bodies_of_any_json_pass_through_as_text() {
        for (frame, body) in [
            (r#"{"id":1,"call":"held"}"#, "null"),
            (r#"{"id":1,"call":"held","body":null}"#, "null"),
            (
                r#"{"id":1,"call":"runBatch","body":[{"jobId":1},{"jobId":2}]}"#,
                r#"[{"jobId":1},{"jobId":2}]"#,
            ),
            (r#"{"id":1,"call":"log","body":"text"}"#, r#""text""#),
            (
                r#"{"id":1,"call":"kill","body": {"jobId" : 3} }"#,
                r#"{"jobId" : 3}"#,
            ),
        ] {
            let parsed = Frame::parse(frame).unwrap();
            let Frame::Call { body: got, .. } = &parsed else {
                panic!("{frame} is a call");
            };
            assert_eq!(got.get(), body, "{frame}");
            assert_eq!(Frame::parse(&parsed.to_text()).unwrap(), parsed, "{frame}");
        }
        assert!(
            Frame::parse(r#"{"id":2,"call":"run","body":{"jobId":}}"#)
                .unwrap_err()
                .message
                .contains("malformed frame"),
            "a body that is not JSON is refused whole"
        );
        let written = Frame::call_text(
            3,
            &Call::Kill,
            &serde_json::value::to_raw_value(&serde_json::json!({"jobId": 4})).unwrap(),
        );
        assert_eq!(written, r#"{"id":3,"call":"kill","body":{"jobId":4}}"#);
    }

    #[test]
    fn bad_frames_are_errors_with_the_id_to_answer() {
        let garbage = Frame::parse("not json").unwrap_err();
        assert_eq!(garbage.id, None);
        assert!(garbage.message.contains("malformed frame"));
        let unknown = Frame::parse(r#"{"id":3,"call":"format_disk","body":{}}"#).unwrap_err();
        assert_eq!(unknown.id, Some(3));
        assert!(unknown.message.contains("unknown call `format_disk`"));
        let refusal = Frame::refusal(&unknown).unwrap();
        assert!(matches!(refusal, Frame::Reply { id: 3, reply } if !reply.is_ok()));
        assert_eq!(
            Frame::parse(r#"{"id":4}"#).unwrap_err().id,
            Some(4),
            "neither call nor reply"
        );
        assert!(
            Frame::parse(r#"{"id":5,"call":"run","reply":{"code":200}}"#)
                .unwrap_err()
                .message
                .contains("not both")
        );
        let big = format!(
            r#"{{"id":6,"call":"run","body":"{}"}}"#,
            "x".repeat(MAX_FRAME_BYTES)
        );
        assert!(Frame::parse(&big).unwrap_err().message.contains("larger"));
        assert_eq!(
            Frame::parse(r#"{"id":-1,"call":"run"}"#).unwrap_err().id,
            None
        );
    }
}
