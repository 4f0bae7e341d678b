//! Webhook delivery: one JSON POST per alert, shaped for the receiver (`generic`, DingTalk,
//! Feishu, Slack, WeCom) and signed when the channel has a secret.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::domain::alert::WebhookFormat;
use crate::domain::ids::{GroupId, JobId, RunId};

/// What every format carries; `generic` sends all of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outgoing {
    pub kind: String,
    pub title: String,
    pub text: String,
    pub job_id: Option<JobId>,
    pub run_id: Option<RunId>,
    pub group_id: Option<GroupId>,
    /// The run status the alert is about (`failed`, `timed_out`, `lost`), or the event kind.
    pub status: String,
    /// The console link of the run, when `public_url` is configured.
    pub url: Option<String>,
}

/// The request to make: URL (with DingTalk's signature), extra headers and the exact body bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

pub const SIGNATURE_HEADER: &str = "X-Jobfleet-Signature";

fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => return Vec::new(),
    };
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// DingTalk robot signature: base64(HMAC-SHA256(key = secret, "{timestamp_ms}\n{secret}")).
pub fn dingtalk_sign(secret: &str, timestamp_ms: i64) -> String {
    BASE64.encode(hmac_sha256(
        secret.as_bytes(),
        format!("{timestamp_ms}\n{secret}").as_bytes(),
    ))
}

/// Feishu/Lark robot signature: base64(HMAC-SHA256(key = "{timestamp_s}\n{secret}", "")).
pub fn feishu_sign(secret: &str, timestamp_s: i64) -> String {
    BASE64.encode(hmac_sha256(
        format!("{timestamp_s}\n{secret}").as_bytes(),
        b"",
    ))
}

/// `sha256=` + hex HMAC-SHA256 of the body with the channel's secret (generic webhooks).
pub fn generic_signature(secret: &str, body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(hmac_sha256(secret.as_bytes(), body))
    )
}

/// WeCom refuses a markdown message over 4,096 bytes (errcode 40058): a long alert is cut on a
/// character boundary, saying so, rather than lost.
const WECOM_MAX_BYTES: usize = 4096;

fn wecom_markdown(message: &Outgoing) -> String {
    let full = format!("### {}\n{}", message.title, message.text.trim_end());
    if full.len() <= WECOM_MAX_BYTES {
        return full;
    }
    const CUT: &str = "\n…(cut)";
    let mut end = WECOM_MAX_BYTES - CUT.len();
    while !full.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT}", &full[..end])
}

fn chat_text(message: &Outgoing) -> String {
    format!("{}\n{}", message.title, message.text.trim_end())
}

/// Builds the request for `format`. Pure, so the shapes and signatures are unit-tested.
///
/// # Errors
/// A stored URL that no longer parses (it was validated when the channel was saved).
pub fn request(
    format: WebhookFormat,
    url: &str,
    secret: Option<&str>,
    message: &Outgoing,
    now_ms: i64,
) -> Result<Request, String> {
    let mut target = url::Url::parse(url).map_err(|e| format!("bad webhook URL: {e}"))?;
    let mut headers = Vec::new();
    let body: Value = match format {
        WebhookFormat::Generic => json!(message),
        WebhookFormat::Dingtalk => {
            if let Some(secret) = secret {
                target
                    .query_pairs_mut()
                    .append_pair("timestamp", &now_ms.to_string())
                    .append_pair("sign", &dingtalk_sign(secret, now_ms));
            }
            json!({
                "msgtype": "markdown",
                "markdown": {
                    "title": message.title,
                    "text": format!("### {}\n\n{}", message.title, message.text.trim_end().replace('\n', "  \n")),
                },
            })
        }
        WebhookFormat::Feishu => {
            let mut body = json!({"msg_type": "text", "content": {"text": chat_text(message)}});
            if let Some(secret) = secret {
                let timestamp_s = now_ms.div_euclid(1000);
                body["timestamp"] = json!(timestamp_s.to_string());
                body["sign"] = json!(feishu_sign(secret, timestamp_s));
            }
            body
        }
        WebhookFormat::Slack => json!({"text": chat_text(message)}),
        // WeCom (企业微信) group robot: the key is in the URL, nothing is signed.
        WebhookFormat::Wecom => json!({
            "msgtype": "markdown",
            "markdown": {"content": wecom_markdown(message)},
        }),
    };
    let body = serde_json::to_vec(&body).map_err(|e| format!("encoding the body: {e}"))?;
    if format == WebhookFormat::Generic
        && let Some(secret) = secret
    {
        headers.push((SIGNATURE_HEADER, generic_signature(secret, &body)));
    }
    Ok(Request {
        url: target.to_string(),
        headers,
        body,
    })
}

fn excerpt(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = flat.chars().take(200).collect();
    if flat.chars().count() > 200 {
        out.push('…');
    }
    out
}

/// DingTalk, Feishu and WeCom answer HTTP 200 with an error code in the body (bad signature or
/// key, keyword filter, rate limit): a non-zero `errcode`/`code` is a failure too.
fn app_error(format: WebhookFormat, body: &str) -> Option<String> {
    let field = match format {
        WebhookFormat::Dingtalk | WebhookFormat::Wecom => "errcode",
        WebhookFormat::Feishu => "code",
        _ => return None,
    };
    let value: Value = serde_json::from_str(body).ok()?;
    match value.get(field).and_then(Value::as_i64) {
        Some(0) | None => None,
        Some(code) => Some(format!(
            "{format} answered {field} {code}: {}",
            excerpt(body)
        )),
    }
}

/// Posts `message` to the webhook; `Err` says why in a line fit for `last_error`.
///
/// # Errors
/// Connection failures, timeouts, non-2xx answers (status and a body excerpt), and DingTalk,
/// Feishu or WeCom error codes.
pub async fn send(
    client: &reqwest::Client,
    format: WebhookFormat,
    url: &str,
    secret: Option<&str>,
    message: &Outgoing,
    now_ms: i64,
) -> Result<(), String> {
    let request = request(format, url, secret, message, now_ms)?;
    let mut builder = client
        .post(&request.url)
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("jobfleet/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in &request.headers {
        builder = builder.header(*name, value);
    }
    let response = builder.body(request.body).send().await.map_err(|e| {
        let what = if e.is_timeout() {
            "timed out"
        } else if e.is_connect() {
            "could not connect"
        } else {
            "request failed"
        };
        format!("webhook {what}: {e}")
    })?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!(
            "webhook answered HTTP {}: {}",
            status.as_u16(),
            excerpt(&text)
        ));
    }
    match app_error(format, &text) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Outgoing {
        Outgoing {
            kind: "run_failed".into(),
            title: "[jobfleet] run failed: nightly (run 42)".into(),
            text: "Job: nightly\nStatus: failed\n".into(),
            job_id: Some(JobId(7)),
            run_id: Some(RunId(42)),
            group_id: Some(GroupId(1)),
            status: "failed".into(),
            url: Some("https://jobs.example.com/console/runs/42".into()),
        }
    }

    fn body(r: &Request) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn signatures_match_the_published_examples() {
        // The robots' documented recipes, spelled out; the HMAC itself is checked against RFC 4231.
        assert_eq!(
            dingtalk_sign("SECabc", 1_700_000_000_000),
            BASE64.encode(hmac_sha256(b"SECabc", b"1700000000000\nSECabc"))
        );
        assert_eq!(
            feishu_sign("s3cr3t", 1_700_000_000),
            BASE64.encode(hmac_sha256(b"1700000000\ns3cr3t", b""))
        );
        // RFC 4231 test case 2.
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn each_format_has_its_shape() {
        let m = message();
        let generic = request(WebhookFormat::Generic, "http://h/x", Some("k"), &m, 5).unwrap();
        let b = body(&generic);
        assert_eq!(
            (b["kind"].as_str(), b["run_id"].as_i64()),
            (Some("run_failed"), Some(42))
        );
        assert_eq!(
            generic.headers,
            vec![(SIGNATURE_HEADER, generic_signature("k", &generic.body))]
        );
        let ding = request(
            WebhookFormat::Dingtalk,
            "https://oapi.dingtalk.com/robot/send?access_token=t",
            Some("SEC1"),
            &m,
            1_700_000_000_000,
        )
        .unwrap();
        let url = url::Url::parse(&ding.url).unwrap();
        let pairs: std::collections::HashMap<_, _> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs["access_token"], "t");
        assert_eq!(pairs["timestamp"], "1700000000000");
        assert_eq!(pairs["sign"], dingtalk_sign("SEC1", 1_700_000_000_000));
        assert_eq!(body(&ding)["msgtype"], "markdown");
        assert!(
            body(&ding)["markdown"]["text"]
                .as_str()
                .unwrap()
                .contains("Status: failed")
        );
        let feishu = request(
            WebhookFormat::Feishu,
            "http://h/x",
            Some("s"),
            &m,
            1_700_000_000_999,
        )
        .unwrap();
        let b = body(&feishu);
        assert_eq!(
            (b["msg_type"].as_str(), b["timestamp"].as_str()),
            (Some("text"), Some("1700000000"))
        );
        assert_eq!(b["sign"].as_str().unwrap(), feishu_sign("s", 1_700_000_000));
        let slack = request(WebhookFormat::Slack, "http://h/x", None, &m, 0).unwrap();
        assert!(
            body(&slack)["text"]
                .as_str()
                .unwrap()
                .starts_with("[jobfleet] run failed")
        );
        assert!(slack.headers.is_empty());
    }

    #[test]
    fn robot_error_codes_are_failures() {
        assert!(app_error(WebhookFormat::Dingtalk, r#"{"errcode":0,"errmsg":"ok"}"#).is_none());
        assert!(
            app_error(
                WebhookFormat::Dingtalk,
                r#"{"errcode":310000,"errmsg":"sign not match"}"#
            )
            .is_some()
        );
        assert!(
            app_error(
                WebhookFormat::Feishu,
                r#"{"code":19021,"msg":"sign match fail"}"#
            )
            .is_some()
        );
        assert!(app_error(WebhookFormat::Generic, r#"{"code":1}"#).is_none());
        assert!(app_error(WebhookFormat::Wecom, r#"{"errcode":0,"errmsg":"ok"}"#).is_none());
        let refused = app_error(
            WebhookFormat::Wecom,
            r#"{"errcode":93000,"errmsg":"invalid webhook url"}"#,
        )
        .unwrap();
        assert!(
            refused.contains("wecom answered errcode 93000"),
            "{refused}"
        );
    }

    #[test]
    fn a_wecom_robot_gets_markdown_and_its_key_stays_in_the_url() {
        let url = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6";
        let wecom = request(WebhookFormat::Wecom, url, None, &message(), 0).unwrap();
        assert_eq!(wecom.url, url);
        assert!(wecom.headers.is_empty());
        let b = body(&wecom);
        assert_eq!(b["msgtype"], "markdown");
        let content = b["markdown"]["content"].as_str().unwrap();
        assert!(
            content.starts_with("### [jobfleet] run failed: nightly (run 42)\n"),
            "{content}"
        );
        assert!(content.contains("Status: failed"), "{content}");

        // Over WeCom's 4,096 bytes: cut on a character boundary, saying so.
        let mut long = message();
        long.text = "任务失败 ".repeat(1000);
        let b = body(&request(WebhookFormat::Wecom, url, None, &long, 0).unwrap());
        let content = b["markdown"]["content"].as_str().unwrap();
        assert!(content.len() <= WECOM_MAX_BYTES, "{}", content.len());
        assert!(content.len() > WECOM_MAX_BYTES - 16, "{}", content.len());
        assert!(content.ends_with("…(cut)"), "{content}");
    }
}
