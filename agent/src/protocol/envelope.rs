//! XXL-Job's `ReturnT`: `{code, msg, content}`. Since XXL-Job 3.3 the payload is called `data`;
//! we send both and read either.

use serde::{Deserialize, Serialize};

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
