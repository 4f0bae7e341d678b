//! A TCP proxy that can cut every connection and refuse new ones, to simulate a database outage.
#![cfg_attr(not(feature = "mysql"), allow(dead_code))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Mutex;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    port: u16,
    down: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

/// A fresh MariaDB test database reached through a proxy; returns the database (keep it),
/// the proxy and the `JOBFLEET_DATABASE_URL` that goes through it.
pub async fn mariadb() -> (jobfleet_admin::testing::TestDb, Proxy, String) {
    let db = super::mysql_db().await;
    let parsed = url::Url::parse(&db.url_string()).unwrap();
    let target = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(3306)
    );
    let proxy = Proxy::start(&target).await;
    let mut via_proxy = parsed;
    via_proxy.set_port(Some(proxy.port())).unwrap();
    (db, proxy, via_proxy.to_string())
}

impl Proxy {
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (down2, conns2, target) = (down.clone(), connections.clone(), target.to_owned());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if down2.load(Ordering::SeqCst) {
                    continue; // dropping the socket refuses the client
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns2.lock().unwrap().push(task);
            }
        });
        Self {
            port,
            down,
            connections,
            accept,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Severs every open connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
