//! `GET /api/agent/connect`: an agent's own connection to this admin (modes `connect` and
//! `auto`), a WebSocket carrying the frames of `jobfleet_agent::protocol::Frame`.
//!
//! The upgrade request is authenticated as `/api/registry` is: the shared access token, then
//! the agent key, which must be the one registered at the address the agent names (it
//! heartbeats by HTTP first; a connection never enrolls). A refusal is an HTTP error with the
//! reason in an XXL-Job envelope, before any upgrade.
//!
//! One task per connection owns the socket: it registers the connection in `Links` (which
//! `AgentClient` sends calls through), writes queued frames, serves the agent's up calls
//! (`registry`, `callback`) with the same services as the HTTP endpoints, hands replies to the
//! calls waiting for them, pings every 15 s (the pong's round trip is stored on the agent row),
//! and drops a connection silent for 45 s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::Message;
use jobfleet_agent::protocol::{
    ACCESS_TOKEN_HEADER, AGENT_ADDRESS_HEADER, AGENT_GROUP_HEADER, AGENT_KEY_HEADER, BadFrame,
    CODE_OK, Call, Envelope, Frame, HandleCallbackParam, MAX_FRAME_BYTES, RegistryParam, TakeParam,
    WRONG_TOKEN_MSG,
};
use serde_json::value::RawValue;

use crate::dispatch::link::Link;
use crate::error::Error;
use crate::state::AppState;
use crate::{callback, service};

const PING_EVERY: Duration = Duration::from_secs(15);
const SILENT_AFTER: Duration = Duration::from_secs(45);

/// Who is connecting, once checked.
struct Peer {
    agent_id: i64,
    address: String,
    key: String,
}

fn header<'a>(req: &'a HttpRequest, name: &str) -> Result<&'a str, Error> {
    req.headers()
        .get(name)
        .ok_or_else(|| Error::invalid(name, "header is required"))?
        .to_str()
        .map_err(|_| Error::invalid(name, "not printable ASCII"))
}

async fn check(state: &AppState, req: &HttpRequest) -> Result<Peer, Error> {
    let token = req
        .headers()
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !crate::auth::csrf::matches(&state.access_token, token) {
        return Err(Error::Unauthenticated(WRONG_TOKEN_MSG.into()));
    }
    let key = header(req, AGENT_KEY_HEADER)?;
    let group = header(req, AGENT_GROUP_HEADER)?;
    let address = header(req, AGENT_ADDRESS_HEADER)?;
    let (agent_id, address) = service::agents::check_connection(state, group, address, key).await?;
    Ok(Peer {
        agent_id,
        address,
        key: key.to_owned(),
    })
}

async fn connect(state: web::Data<AppState>, req: HttpRequest, body: web::Payload) -> HttpResponse {
    let peer = match check(&state, &req).await {
        Ok(peer) => peer,
        Err(e) => {
            if matches!(e, Error::Internal(_) | Error::Contended(_)) {
                tracing::error!(error = ?e, "Agent connection failed");
            }
            return HttpResponse::build(e.code().status())
                .json(Envelope::<()>::fail(e.public_message()));
        }
    };
    match actix_ws::handle(&req, body) {
        Ok((response, session, stream)) => {
            let stream = stream.max_frame_size(4 * MAX_FRAME_BYTES);
            actix_web::rt::spawn(serve(state.into_inner(), peer, session, stream));
            response
        }
        Err(e) => HttpResponse::BadRequest().json(Envelope::<()>::fail(format!(
            "not a WebSocket upgrade: {e}"
        ))),
    }
}

/// Microseconds on a monotonic clock, for the pings' round trip.
fn micros(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX)
}

async fn serve(
    state: Arc<AppState>,
    peer: Peer,
    mut session: actix_ws::Session,
    mut stream: actix_ws::MessageStream,
) {
    let links = state.agents.links.clone();
    let since_ms = state.clock.now_ms();
    let (link, mut outbox) = Link::new(links.next_serial(), since_ms);
    let holder = state.scheduler.holder.clone();
    if let Err(e) =
        service::agents::link_opened(&state, peer.agent_id, holder.clone(), since_ms).await
    {
        tracing::warn!(error = %e, agent = %peer.address, "Could not record the agent's connection");
    }
    links.insert(&peer.address, link.clone());
    tracing::info!(agent = %peer.address, "Agent connected");
    let origin = Instant::now();
    let mut ping = tokio::time::interval(PING_EVERY);
    let mut heard = Instant::now();
    let mut closing = links.closing();
    let reason = loop {
        tokio::select! {
            _ = closing.changed() => break "the admin is stopping".to_owned(),
            message = stream.recv() => {
                let message = match message {
                    Some(Ok(message)) => message,
                    Some(Err(e)) => break format!("protocol error: {e}"),
                    None => break "closed by the agent".to_owned(),
                };
                heard = Instant::now();
                match message {
                    Message::Text(text) => on_text(&state, &peer, &link, &text),
                    Message::Ping(bytes) => {
                        if session.pong(&bytes).await.is_err() {
                            break "closed".to_owned();
                        }
                    }
                    Message::Pong(bytes) => {
                        let sent = <[u8; 8]>::try_from(&bytes[..]).map(u64::from_be_bytes);
                        if let Ok(sent) = sent {
                            let rtt = i64::try_from(micros(origin).saturating_sub(sent)).unwrap_or(i64::MAX);
                            link.rtt_us.store(rtt, std::sync::atomic::Ordering::Relaxed);
                            let (state, holder) = (state.clone(), holder.clone());
                            let id = peer.agent_id;
                            actix_web::rt::spawn(async move {
                                if let Err(e) = service::agents::link_rtt(&state, id, holder, since_ms, rtt).await {
                                    tracing::debug!(error = %e, "Could not store the round-trip time");
                                }
                            });
                        }
                    }
                    Message::Close(_) => break "closed by the agent".to_owned(),
                    Message::Binary(_) | Message::Continuation(_) | Message::Nop => {
                        tracing::warn!(agent = %peer.address, "Ignored a non-text frame");
                    }
                }
            }
            frame = outbox.recv() => {
                let Some(frame) = frame else { break "closed".to_owned() };
                if session.text(frame).await.is_err() {
                    break "closed".to_owned();
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() > SILENT_AFTER {
                    break format!("silent for {} s", SILENT_AFTER.as_secs());
                }
                if session.ping(&micros(origin).to_be_bytes()).await.is_err() {
                    break "closed".to_owned();
                }
            }
        }
    };
    links.remove(&peer.address, link.serial);
    link.close();
    tracing::info!(agent = %peer.address, %reason, "Agent connection ended");
    let _ = session.close(None).await;
    if let Err(e) = service::agents::link_closed(&state, peer.agent_id, holder, since_ms).await {
        tracing::warn!(error = %e, agent = %peer.address, "Could not record the end of the agent's connection");
    }
}

fn on_text(state: &Arc<AppState>, peer: &Peer, link: &Arc<Link>, text: &str) {
    // Up calls obey the same body cap as the HTTP endpoints they stand for; replies (a log
    // page) only the frame cap.
    let cap = state.config.max_body_bytes.saturating_add(1024);
    let frame = match Frame::parse(text) {
        Ok(Frame::Call { id, .. }) if text.len() > cap => Err(BadFrame {
            id: Some(id),
            message: format!(
                "the body is larger than {} bytes",
                state.config.max_body_bytes
            ),
        }),
        other => other,
    };
    match frame {
        Ok(Frame::Reply { id, reply }) => link.complete(id, reply),
        Ok(Frame::Call { id, call, body }) => {
            let (state, link) = (state.clone(), link.clone());
            let (address, key) = (peer.address.clone(), peer.key.clone());
            // Its own task: a slow transaction holds up neither the pings nor the replies.
            actix_web::rt::spawn(async move {
                let reply = match up_call(&state, &address, &key, &call, body).await {
                    Ok(content) => Envelope {
                        code: CODE_OK,
                        msg: None,
                        content,
                        data: None,
                    },
                    Err(e) => {
                        if matches!(e, Error::Internal(_) | Error::Contended(_)) {
                            tracing::error!(error = ?e, "Agent call failed");
                        }
                        Envelope::fail(e.public_message())
                    }
                };
                link.send(&Frame::Reply { id, reply });
            });
        }
        Err(bad) => {
            tracing::warn!(agent = %peer.address, error = %bad, "Bad frame from an agent");
            if let Some(refusal) = Frame::refusal(&bad) {
                link.send(&refusal);
            }
        }
    }
}

/// An agent → admin call: `registry` or `callback`, served as the HTTP endpoints serve them,
/// with the connection's key (a heartbeat must be for the connection's own address), or
/// `take` (pull), served for the connection's agent. The reply's content, if any.
async fn up_call(
    state: &Arc<AppState>,
    address: &str,
    key: &str,
    call: &Call,
    body: Box<RawValue>,
) -> Result<Option<Box<RawValue>>, Error> {
    let malformed =
        |e: serde_json::Error| Error::invalid("body", format!("malformed request: {e}"));
    match call {
        Call::Registry => {
            let param: RegistryParam = serde_json::from_str(body.get()).map_err(malformed)?;
            let named = param.registry_value.trim().trim_end_matches('/');
            if named != address.trim_end_matches('/') {
                return Err(Error::Forbidden(
                    "a connection heartbeats only for the address it was opened for".into(),
                ));
            }
            service::agents::register(state, param, Some(key))
                .await
                .map(|_| None)
        }
        Call::Callback => {
            let batch: Vec<HandleCallbackParam> =
                serde_json::from_str(body.get()).map_err(malformed)?;
            callback::accept(state, batch, Some(key))
                .await
                .map(|_| None)
        }
        Call::Take => {
            let param: TakeParam = serde_json::from_str(body.get()).map_err(malformed)?;
            let taken = crate::dispatch::pull::take(state, address, param.max).await?;
            Ok(Some(
                serde_json::value::to_raw_value(&taken).map_err(|e| Error::Internal(e.into()))?,
            ))
        }
        other => Err(Error::invalid(
            "call",
            format!("`{other}` is not a call an admin serves (registry, callback, take)"),
        )),
    }
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route(
        &format!("/{}", jobfleet_agent::protocol::CONNECT_PATH),
        web::get().to(connect),
    );
}
