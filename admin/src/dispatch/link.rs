//! The agents connected to this admin (`GET /api/agent/connect`, modes `connect` and `auto`):
//! address → the connection's sender and the calls waiting for their replies. Admin-local: an
//! agent holds one connection, to one admin; other admins reach it by its address, or not at
//! all in connect mode (the cluster relay comes later). The socket tasks (`agent_link`) insert
//! and remove entries; `AgentClient` sends calls through them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jobfleet_agent::protocol::{Call, Frame, RawEnvelope};
use serde_json::value::RawValue;
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// Why a call over a connection got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// The connection closed before the reply came: the call may or may not have been served.
    Dropped,
    /// No reply within the deadline.
    TimedOut,
}

/// One agent's open connection.
#[derive(Debug)]
pub struct Link {
    /// Tells this connection from a later one of the same agent.
    pub serial: u64,
    /// When it opened (ms since the epoch).
    pub since_ms: i64,
    /// Round-trip time of the last ping, in microseconds (-1 before the first pong).
    pub rtt_us: AtomicI64,
    out: mpsc::UnboundedSender<String>,
    pending: Mutex<HashMap<u64, oneshot::Sender<RawEnvelope>>>,
    next_id: AtomicU64,
}

impl Link {
    /// A connection whose frames the socket task reads from the returned receiver.
    pub fn new(serial: u64, since_ms: i64) -> (Arc<Link>, mpsc::UnboundedReceiver<String>) {
        let (out, rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            serial,
            since_ms,
            rtt_us: AtomicI64::new(-1),
            out,
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
        });
        (link, rx)
    }

    /// Queues a frame for the socket; false when the connection is gone.
    pub fn send(&self, frame: &Frame) -> bool {
        self.out.send(frame.to_text()).is_ok()
    }

    /// Sends `call` and waits for its reply until `deadline`.
    ///
    /// # Errors
    /// `Dropped` when the connection closes first, `TimedOut` at the deadline.
    pub async fn call(
        &self,
        call: &Call,
        body: &RawValue,
        deadline: tokio::time::Instant,
    ) -> Result<RawEnvelope, LinkError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, tx);
        }
        if self.out.send(Frame::call_text(id, call, body)).is_err() {
            self.forget(id);
            return Err(LinkError::Dropped);
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(LinkError::Dropped),
            Err(_) => {
                self.forget(id);
                Err(LinkError::TimedOut)
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&id);
        }
    }

    /// Hands a reply to the call waiting for it (a late one, after its timeout, is dropped).
    pub fn complete(&self, id: u64, reply: RawEnvelope) {
        let waiter = self.pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(waiter) = waiter {
            drop(waiter.send(reply));
        }
    }

    /// Ends every waiting call with `Dropped` (the socket closed).
    pub fn close(&self) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }

    pub fn rtt(&self) -> Option<Duration> {
        u64::try_from(self.rtt_us.load(Ordering::Relaxed))
            .ok()
            .map(Duration::from_micros)
    }
}

/// The connections of this admin, by agent address.
#[derive(Debug)]
pub struct Links {
    by_address: Mutex<HashMap<String, Arc<Link>>>,
    next_serial: AtomicU64,
    /// Woken whenever a connection opens, for calls waiting for an agent to come back.
    opened: Notify,
    /// Moved on when the server stops: every socket task then closes its connection.
    closing: watch::Sender<u64>,
}

impl Default for Links {
    fn default() -> Self {
        Self {
            by_address: Mutex::default(),
            next_serial: AtomicU64::new(0),
            opened: Notify::new(),
            closing: watch::Sender::new(0),
        }
    }
}

impl Links {
    /// Closes every open connection (the server is stopping); later ones are taken as usual.
    pub fn close_all(&self) {
        self.closing.send_modify(|generation| *generation += 1);
    }

    /// What a socket task watches to learn that it must close.
    pub fn closing(&self) -> watch::Receiver<u64> {
        self.closing.subscribe()
    }

    pub fn next_serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Ordering::Relaxed)
    }

    pub fn get(&self, address: &str) -> Option<Arc<Link>> {
        self.by_address
            .lock()
            .ok()
            .and_then(|m| m.get(address).cloned())
    }

    /// Makes `link` the agent's connection; one it held before is closed (it reconnected
    /// before the old socket noticed it was gone).
    pub fn insert(&self, address: &str, link: Arc<Link>) {
        let old = self
            .by_address
            .lock()
            .ok()
            .and_then(|mut m| m.insert(address.to_owned(), link));
        if let Some(old) = old {
            old.close();
        }
        self.opened.notify_waiters();
    }

    /// Removes the agent's connection if it is still `serial` (not a newer one).
    pub fn remove(&self, address: &str, serial: u64) {
        if let Ok(mut m) = self.by_address.lock()
            && m.get(address).is_some_and(|l| l.serial == serial)
        {
            m.remove(address);
        }
    }

    /// The agent's connection, waiting for one to open until `deadline`.
    pub async fn wait_for(
        &self,
        address: &str,
        deadline: tokio::time::Instant,
    ) -> Option<Arc<Link>> {
        loop {
            // Registered before looking, so an insert between the look and the wait is seen.
            let opened = self.opened.notified();
            if let Some(link) = self.get(address) {
                return Some(link);
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return None;
            }
        }
    }

    /// How many agents are connected here.
    pub fn count(&self) -> usize {
        self.by_address.lock().map_or(0, |m| m.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_get_their_replies_and_a_close_drops_them() {
        let links = Links::default();
        let (link, mut rx) = Link::new(links.next_serial(), 0);
        links.insert("conn://h/1/", link.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let caller = {
            let link = link.clone();
            tokio::spawn(async move { link.call(&Call::Beat, RawValue::NULL, deadline).await })
        };
        let sent = Frame::parse(&rx.recv().await.unwrap()).unwrap();
        let Frame::Call { id, call, .. } = sent else {
            panic!("not a call: {sent:?}")
        };
        assert_eq!(call, Call::Beat);
        link.complete(id, RawEnvelope::fail("no"));
        assert_eq!(caller.await.unwrap().unwrap().msg.as_deref(), Some("no"));

        let caller = {
            let link = link.clone();
            tokio::spawn(async move { link.call(&Call::Beat, RawValue::NULL, deadline).await })
        };
        let _ = rx.recv().await.unwrap();
        link.close();
        assert_eq!(caller.await.unwrap().err(), Some(LinkError::Dropped));

        // A newer connection is not removed by the older one's end.
        let (newer, _rx2) = Link::new(links.next_serial(), 0);
        links.insert("conn://h/1/", newer.clone());
        links.remove("conn://h/1/", link.serial);
        assert_eq!(links.get("conn://h/1/").unwrap().serial, newer.serial);
        links.remove("conn://h/1/", newer.serial);
        assert!(links.get("conn://h/1/").is_none());
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(links.wait_for("conn://h/1/", soon).await.is_none());
    }
}
