//! The agent's own connection to an admin (modes `connect` and `auto`): one outbound WebSocket
//! to `GET <admin>/api/agent/connect`, kept open. Down it come the calls the admin would
//! otherwise POST to the agent (served by `handlers`, like the HTTP server's); up go the
//! heartbeats and the results (`AdminClient` sends them here while the connection is up).
//!
//! Before each connect the agent heartbeats that admin over HTTP: that enrolls its key at its
//! address, which the connect request must present. Pings both ways keep idle proxies from
//! cutting the connection; one silent for `SILENT_AFTER` is dropped. A dropped connection is
//! opened again with jittered backoff, trying the configured admins in order.
//!
//! With `pull` set, the agent also takes due runs of its group over the connection whenever it
//! has free slots (`take` up, `runBatch` down), besides the runs the admins push.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::handlers::Handlers;
use crate::protocol::{
    ACCESS_TOKEN_HEADER, AGENT_ADDRESS_HEADER, AGENT_GROUP_HEADER, AGENT_KEY_HEADER, CONNECT_PATH,
    Call, Frame, MAX_FRAME_BYTES, RawEnvelope, TakeParam, TakeResult,
};
use crate::registry::Registration;

/// How often each side pings.
pub const PING_EVERY: Duration = Duration::from_secs(15);
/// A connection nothing came over for this long is dropped.
pub const SILENT_AFTER: Duration = Duration::from_secs(45);
/// How long an up call (heartbeat, results) waits for the admin's reply.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The connection's read buffer (see `open`).
const LINK_READ_BUFFER_BYTES: usize = 16 * 1024;

/// The connection as the rest of the agent sees it: up or not, and calls over it.
#[derive(Default)]
pub struct Uplink {
    current: Mutex<Option<Arc<Session>>>,
}

/// One open connection.
struct Session {
    admin: String,
    out: mpsc::UnboundedSender<Message>,
    pending: Mutex<HashMap<u64, oneshot::Sender<RawEnvelope>>>,
    next_id: AtomicU64,
}

impl Session {
    fn send(&self, frame: &Frame) -> bool {
        self.send_text(frame.to_text())
    }

    fn send_text(&self, text: String) -> bool {
        self.out.send(Message::text(text)).is_ok()
    }

    fn complete(&self, id: u64, reply: RawEnvelope) {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        match waiter {
            Some(waiter) => drop(waiter.send(reply)),
            None => tracing::debug!(id, "A reply nobody waits for (timed out)"),
        }
    }
}

impl Uplink {
    fn session(&self) -> Option<Arc<Session>> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    fn set(&self, session: Option<Arc<Session>>) {
        if let Ok(mut current) = self.current.lock() {
            *current = session;
        }
    }

    /// The admin base URL the connection is open to, if it is.
    pub fn connected(&self) -> Option<String> {
        self.session().map(|s| s.admin.clone())
    }

    /// Calls the admin over the connection; `Err` when it is down, drops before the reply, or
    /// the reply takes too long. The reply may say no (`code` 500): the caller reads it.
    ///
    /// # Errors
    /// No connection, a lost one, or no reply in time.
    pub async fn call<T: serde::Serialize>(
        &self,
        call: Call,
        body: &T,
    ) -> Result<(String, RawEnvelope), String> {
        let session = self.session().ok_or("no connection")?;
        let body =
            serde_json::value::to_raw_value(body).map_err(|e| format!("encoding the call: {e}"))?;
        let id = session.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = session.pending.lock() {
            pending.insert(id, tx);
        }
        if !session.send_text(Frame::call_text(id, &call, &body)) {
            return Err("the connection closed".into());
        }
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(reply)) => Ok((session.admin.clone(), reply)),
            Ok(Err(_)) => Err("the connection dropped before the reply".into()),
            Err(_) => {
                if let Ok(mut pending) = session.pending.lock() {
                    pending.remove(&id);
                }
                Err("no reply over the connection in time".into())
            }
        }
    }
}

/// What the connection needs to know about this agent.
pub struct LinkConfig {
    pub admins: Vec<String>,
    pub token: String,
    pub key: String,
    pub group: String,
    /// The address this agent registers (`conn://…` in connect mode).
    pub address: String,
    /// How `wss://` admins are verified (`crate::tls::client_config`, shared with HTTP).
    pub tls: Arc<rustls::ClientConfig>,
    /// Most runs one `take` asks for; 0: the agent never pulls.
    pub pull: u32,
}

/// `http(s)://host/base/` → `ws(s)://host/base/api/agent/connect`.
fn connect_url(admin: &str) -> String {
    let ws = if let Some(rest) = admin.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = admin.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        admin.to_owned()
    };
    format!("{ws}{CONNECT_PATH}")
}

/// A delay between `d/2` and `d`, so agents cut off together do not come back together.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let half = d / 2;
    half + half.mul_f64(f64::from(nanos % 1000) / 1000.0)
}

/// Keeps a connection open to the first admin that takes one, until the task is dropped.
pub async fn keep_connected(
    uplink: Arc<Uplink>,
    config: LinkConfig,
    handlers: Arc<Handlers>,
    registration: Arc<Registration>,
    results: Arc<crate::spool::Due>,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut failing = false;
    loop {
        let mut errors = Vec::new();
        for admin in &config.admins {
            // The heartbeat enrolls the key at this address (first start) and tells the admin
            // the agent is here; the connect request is refused for an unknown key.
            if let Err(e) = registration.beat_at(admin).await {
                errors.push(format!("{admin}: {e}"));
                continue;
            }
            match open(admin, &config).await {
                Ok(ws) => {
                    tracing::info!(%admin, "Connected to the admin");
                    failing = false;
                    backoff = FIRST_BACKOFF;
                    let puller = (config.pull > 0).then(|| {
                        tokio::spawn(pull_forever(
                            uplink.clone(),
                            handlers.runner.clone(),
                            config.pull,
                        ))
                    });
                    serve(ws, admin, &uplink, &handlers, &results).await;
                    if let Some(puller) = puller {
                        puller.abort();
                    }
                    tracing::warn!(%admin, "Connection to the admin closed; connecting again");
                    errors.clear();
                    break;
                }
                Err(e) => errors.push(format!("{admin}: {e}")),
            }
        }
        if !errors.is_empty() {
            if failing {
                tracing::debug!(errors = %errors.join("; "), "No admin took the connection");
            } else {
                tracing::warn!(errors = %errors.join("; "), "No admin took the connection; retrying with backoff");
                failing = true;
            }
        }
        tokio::time::sleep(jitter(backoff)).await;
        if !errors.is_empty() {
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// How long an agent with free slots waits before asking again when the last take found
/// nothing (a finished run asks at once).
const PULL_IDLE: Duration = Duration::from_secs(1);

/// Takes due runs of the group whenever slots are free (`pull`): asks again at once while the
/// takes come back full, else when a run finishes or after `PULL_IDLE`. The admin sends the
/// runs down as `runBatch` calls, served like any trigger (journal, queue, results).
async fn pull_forever(uplink: Arc<Uplink>, runner: Arc<crate::runner::Runner>, batch: u32) {
    loop {
        let finished = runner.finished();
        let spare = u32::try_from(runner.spare()).unwrap_or(u32::MAX).min(batch);
        let mut full = false;
        if spare > 0 && uplink.connected().is_some() {
            match uplink.call(Call::Take, &TakeParam { max: spare }).await {
                Ok((_, reply)) if reply.is_ok() => {
                    let taken = reply
                        .payload()
                        .and_then(|p| serde_json::from_str::<TakeResult>(p.get()).ok());
                    if let Some(taken) = taken {
                        tracing::debug!(sent = taken.sent, accepted = taken.accepted, "Took runs");
                        full = taken.sent >= spare;
                    }
                }
                Ok((admin, reply)) => {
                    tracing::warn!(%admin, reason = reply.msg.as_deref().unwrap_or(""), "The admin refused a take");
                }
                Err(e) => tracing::debug!(error = %e, "Take failed"),
            }
        }
        if !full {
            tokio::select! {
                () = finished => {}
                () = tokio::time::sleep(PULL_IDLE) => {}
            }
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn open(admin: &str, config: &LinkConfig) -> Result<Ws, String> {
    let mut request = connect_url(admin)
        .into_client_request()
        .map_err(|e| format!("bad admin URL: {e}"))?;
    let header = |v: &str| HeaderValue::from_str(v).map_err(|e| format!("header: {e}"));
    let headers = request.headers_mut();
    headers.insert(ACCESS_TOKEN_HEADER, header(&config.token)?);
    headers.insert(AGENT_KEY_HEADER, header(&config.key)?);
    headers.insert(AGENT_ADDRESS_HEADER, header(&config.address)?);
    headers.insert(AGENT_GROUP_HEADER, header(&config.group)?);
    let mut ws_config = WebSocketConfig::default();
    // Frames a little over the cap still reach `Frame::parse`, which answers them; far bigger
    // ones end the connection in the library, before they fill memory.
    ws_config.max_message_size = Some(4 * MAX_FRAME_BYTES);
    ws_config.max_frame_size = Some(4 * MAX_FRAME_BYTES);
    // The library keeps a read buffer of this size for the connection's life and zeroes it
    // before each read (128 KiB by default: a quarter of an idle agent's heap). A larger frame
    // still arrives whole: the buffer grows to the frame's length, filled in reads of at most
    // this size, about one TLS record each.
    ws_config.read_buffer_size = LINK_READ_BUFFER_BYTES;
    let connector = tokio_tungstenite::Connector::Rustls(config.tls.clone());
    let connecting = tokio_tungstenite::connect_async_tls_with_config(
        request,
        Some(ws_config),
        true,
        Some(connector),
    );
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tungstenite::Error::Http(response))) => {
            let status = response.status();
            let body = response
                .body()
                .as_ref()
                .map(|b| {
                    String::from_utf8_lossy(b)
                        .chars()
                        .take(300)
                        .collect::<String>()
                })
                .unwrap_or_default();
            Err(format!("refused ({status}): {body}"))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out connecting".into()),
    }
}

/// Serves one connection until it closes or falls silent.
async fn serve(
    ws: Ws,
    admin: &str,
    uplink: &Uplink,
    handlers: &Arc<Handlers>,
    results: &crate::spool::Due,
) {
    let (mut sink, mut stream) = ws.split();
    let (out, mut outbox) = mpsc::unbounded_channel::<Message>();
    let session = Arc::new(Session {
        admin: admin.to_owned(),
        out,
        pending: Mutex::default(),
        next_id: AtomicU64::new(1),
    });
    let writer = tokio::spawn(async move {
        while let Some(message) = outbox.recv().await {
            if sink.send(message).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    uplink.set(Some(session.clone()));
    // Results spooled while no admin could be reached go now, over the connection.
    results.landed(std::time::Duration::ZERO);
    let mut ping = tokio::time::interval(PING_EVERY);
    let mut heard = Instant::now();
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(Ok(message)) = message else { break };
                heard = Instant::now();
                match message {
                    Message::Text(text) => on_text(text.as_str(), &session, handlers),
                    Message::Binary(_) => tracing::warn!("Ignored a binary frame from the admin"),
                    Message::Close(_) => break,
                    // tungstenite answers pings itself; a pong only proves the admin is there.
                    Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() > SILENT_AFTER {
                    tracing::warn!(%admin, "The admin fell silent; dropping the connection");
                    break;
                }
                let _ = session.out.send(Message::Ping(Default::default()));
            }
        }
    }
    uplink.set(None);
    // Callers waiting for replies get "dropped" now instead of at their timeout.
    if let Ok(mut pending) = session.pending.lock() {
        pending.clear();
    }
    writer.abort();
}

fn on_text(text: &str, session: &Arc<Session>, handlers: &Arc<Handlers>) {
    let Some((id, call, body)) = route(text, session) else {
        return;
    };
    let (session, handlers) = (session.clone(), handlers.clone());
    // Each call is its own task: a trigger waiting for its journal fsync holds up no log read.
    tokio::spawn(async move {
        let reply = handlers.handle(&call, body.get().as_bytes()).await;
        session.send(&Frame::Reply { id, reply });
    });
}

/// Settles a text frame that needs no handler — a reply goes to its caller, a bad frame is
/// answered with an error reply when it has an id (and only logged when it has none) — and
/// returns a call to serve.
fn route(text: &str, session: &Session) -> Option<(u64, Call, Box<serde_json::value::RawValue>)> {
    match Frame::parse(text) {
        Ok(Frame::Reply { id, reply }) => {
            session.complete(id, reply);
            None
        }
        Ok(Frame::Call { id, call, body }) => Some((id, call, body)),
        Err(bad) => {
            tracing::warn!(error = %bad, "Bad frame from the admin");
            if let Some(refusal) = Frame::refusal(&bad) {
                session.send(&refusal);
            }
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_connect_url_follows_the_admin_url() {
        assert_eq!(
            connect_url("http://a:8080/"),
            "ws://a:8080/api/agent/connect"
        );
        assert_eq!(
            connect_url("https://a/jobfleet/"),
            "wss://a/jobfleet/api/agent/connect"
        );
    }

    fn session() -> (Session, mpsc::UnboundedReceiver<Message>) {
        let (out, rx) = mpsc::unbounded_channel();
        let session = Session {
            admin: "http://a/".into(),
            out,
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
        };
        (session, rx)
    }

    fn sent(rx: &mut mpsc::UnboundedReceiver<Message>) -> Option<Frame> {
        match rx.try_recv() {
            Ok(Message::Text(text)) => Some(Frame::parse(text.as_str()).unwrap()),
            Ok(other) => panic!("not a text frame: {other:?}"),
            Err(_) => None,
        }
    }

    #[test]
    fn bad_frames_are_answered_or_logged_never_fatal() {
        let (session, mut rx) = session();
        // Garbage and an oversized frame have no id to answer: nothing is sent.
        assert!(route("garbage", &session).is_none());
        let big = format!(
            r#"{{"id":9,"call":"run","body":"{}"}}"#,
            "x".repeat(MAX_FRAME_BYTES)
        );
        assert!(route(&big, &session).is_none());
        assert!(sent(&mut rx).is_none());
        // An unknown call is answered with an error reply under its id.
        assert!(route(r#"{"id":4,"call":"rm_rf","body":{}}"#, &session).is_none());
        match sent(&mut rx) {
            Some(Frame::Reply { id: 4, reply }) => {
                assert!(!reply.is_ok());
                assert!(reply.msg.unwrap().contains("unknown call `rm_rf`"));
            }
            other => panic!("expected an error reply: {other:?}"),
        }
        // A well-formed call is handed on; a reply nobody waits for is dropped quietly.
        let (id, call, body) =
            route(r#"{"id":5,"call":"kill","body":{"jobId":1}}"#, &session).unwrap();
        assert_eq!((id, call, body.get()), (5, Call::Kill, r#"{"jobId":1}"#));
        assert!(route(r#"{"id":77,"reply":{"code":200}}"#, &session).is_none());
        assert!(sent(&mut rx).is_none());
    }

    #[tokio::test]
    async fn a_reply_reaches_its_caller() {
        let (session, _rx) = session();
        let (tx, rx) = oneshot::channel();
        session.pending.lock().unwrap().insert(3, tx);
        assert!(route(r#"{"id":3,"reply":{"code":500,"msg":"no"}}"#, &session).is_none());
        assert_eq!(rx.await.unwrap().msg.as_deref(), Some("no"));
    }

    #[test]
    fn backoff_is_jittered_within_half_to_whole() {
        for _ in 0..100 {
            let d = jitter(Duration::from_secs(10));
            assert!(d >= Duration::from_secs(5) && d <= Duration::from_secs(10));
        }
    }
}
