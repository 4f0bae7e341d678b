//! XXL-Job's `ReturnT`: `{code, msg, content}`. Since XXL-Job 3.3 the payload is called `data`;
//! we send both and read either.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// `code` values of the envelope (`ReturnT.SUCCESS_CODE`, `FAIL_CODE`); a result's
/// `handleCode` has its own (`handle_code`).
pub const CODE_OK: i32 = 200;
pub const CODE_FAIL: i32 = 500;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub code: i32,
    #[serde(default)]
    pub msg: Option<String>,
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub content: Option<T>,
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
}

impl<T: Clone> Envelope<T> {
    pub fn ok(payload: T) -> Self {
        Self {
            code: CODE_OK,
            msg: None,
            content: Some(payload.clone()),
            data: Some(payload),
        }
    }
}

impl<T> Envelope<T> {
    pub fn fail(msg: impl Into<String>) -> Self {
        Self {
            code: CODE_FAIL,
            msg: Some(msg.into()),
            content: None,
            data: None,
        }
    }

    pub fn is_ok(&self) -> bool {
        self.code == CODE_OK
    }

    /// The payload, from `content` or (XXL-Job ≥ 3.3) `data`.
    pub fn payload(self) -> Option<T> {
        self.content.or(self.data)
    }
}

impl Envelope<()> {
    /// Success without a payload.
    pub fn success() -> Self {
        Self {
            code: CODE_OK,
            msg: None,
            content: None,
            data: None,
        }
    }
}

/// An envelope whose payload is kept as its JSON text, as it travels between an admin and an
/// agent: the receiver reads it straight into the type it expects (`typed`), and the sender
/// writes it from its own type (`Envelope::encoded`), never through a tree of JSON values.
pub type RawEnvelope = Envelope<Box<RawValue>>;

impl<T: Serialize> Envelope<T> {
    /// The envelope with its payload as JSON text. A payload that cannot be encoded (none of
    /// ours: structs of strings and numbers) is left out.
    pub fn encoded(self) -> RawEnvelope {
        let encode = |payload: Option<T>| {
            payload.and_then(|payload| serde_json::value::to_raw_value(&payload).ok())
        };
        Envelope {
            code: self.code,
            msg: self.msg,
            content: encode(self.content),
            data: encode(self.data),
        }
    }
}

impl RawEnvelope {
    /// `Envelope::ok` with the payload encoded once for both of its fields.
    pub fn ok_encoded<T: Serialize>(payload: &T) -> Self {
        let content = serde_json::value::to_raw_value(payload).ok();
        Envelope {
            code: CODE_OK,
            msg: None,
            data: content.clone(),
            content,
        }
    }

    /// The envelope with its payloads read as `T`.
    ///
    /// # Errors
    /// A payload that is not a `T`.
    pub fn typed<T: serde::de::DeserializeOwned>(self) -> Result<Envelope<T>, serde_json::Error> {
        let read = |payload: Option<Box<RawValue>>| {
            payload
                .map(|payload| serde_json::from_str(payload.get()))
                .transpose()
        };
        Ok(Envelope {
            code: self.code,
            msg: self.msg,
            content: read(self.content)?,
            data: read(self.data)?,
        })
    }

    /// Whether two envelopes say the same: payloads compare by their text.
    pub fn same_as(&self, other: &Self) -> bool {
        fn text(payload: &Option<Box<RawValue>>) -> Option<&str> {
            payload.as_deref().map(RawValue::get)
        }
        self.code == other.code
            && self.msg == other.msg
            && text(&self.content) == text(&other.content)
            && text(&self.data) == text(&other.data)
    }
}
