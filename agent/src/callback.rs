//! Drains the spool: sends results in batches to any live admin, with backoff while none
//! answers, and deletes a result only after an admin acknowledged it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

use crate::admin_client::AdminClient;
use crate::protocol::{HandleCallbackParam, admin_path};
use crate::spool::{Due, Spool};

/// Results per request, about: whole spool files are sent, so one may go a little over.
const BATCH: usize = 500;
/// Bytes of spool files per request at most (one file alone may be more): within the 1 MiB an
/// admin accepts by default (`max_body_bytes`), now that results carry small logs.
const MAX_REQUEST_BYTES: usize = 768 * 1024;
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Sends what is spooled now; returns how many results were acknowledged.
pub async fn drain_once(client: &AdminClient, spool: &Spool) -> Result<usize, String> {
    // The turn goes with each file-system step to its blocking thread and comes back with the
    // answer, so a drain aborted while a removal runs (a shutdown) holds it until the removal
    // is done: the shutdown's last drain then does not send again what is being removed.
    let turn = spool.drain_turn().lock_owned().await;
    let (files, mut turn) = on_disk(spool, turn, |spool| spool.pending())
        .await
        .map_err(|e| format!("reading the spool: {e}"))?;
    let mut files = files.into_iter().peekable();
    let mut sent = 0;
    while files.peek().is_some() {
        // Whole files per request, so a file is removed exactly when all it holds is stored.
        let mut batch = Vec::new();
        let mut count = 0;
        let mut bytes = 0;
        while let Some(file) = files.next_if(|file| {
            batch.is_empty() || (count < BATCH && bytes + file.bytes <= MAX_REQUEST_BYTES)
        }) {
            bytes += file.bytes;
            count += file.results.len();
            batch.push(file);
        }
        // Borrowed from the spool's files: the same JSON array as the results themselves.
        let results: Vec<&HandleCallbackParam> =
            batch.iter().flat_map(|file| file.results.iter()).collect();
        client.post(admin_path::CALLBACK, &results).await?;
        sent += results.len();
        ((), turn) = on_disk(spool, turn, move |spool| spool.ack(&batch))
            .await
            .map_err(|e| format!("removing acknowledged results: {e}"))?;
    }
    Ok(sent)
}

/// Runs `work` on the spool on a blocking thread, holding the drain's `turn` until it is done:
/// removing a file may wait on the file system's journal, reading the folder after an outage on
/// the disk, and the runtime thread starts runs.
async fn on_disk<T: Send + 'static>(
    spool: &Spool,
    turn: OwnedMutexGuard<()>,
    work: impl FnOnce(&Spool) -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<(T, OwnedMutexGuard<()>)> {
    let spool = spool.clone();
    let (done, turn) = tokio::task::spawn_blocking(move || (work(&spool), turn))
        .await
        .map_err(std::io::Error::other)?;
    Ok((done?, turn))
}

/// Runs forever: sends the spool when its results are due (`Due`), retries with growing
/// backoff while admins are away.
pub async fn drain_forever(client: Arc<AdminClient>, spool: Spool, due: Arc<Due>) {
    let mut backoff = Duration::from_millis(500);
    loop {
        match drain_once(&client, &spool).await {
            Ok(n) => {
                if n > 0 {
                    tracing::debug!(results = n, "Results delivered");
                }
                backoff = Duration::from_millis(500);
                // Also look again now and then, in case a spool write raced the wake-up.
                due.wait(Duration::from_secs(5)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "Results not delivered yet");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An admin on loopback that acknowledges every callback and counts them.
    async fn acknowledging_admin() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}/", listener.local_addr().unwrap());
        let posts = Arc::new(AtomicUsize::new(0));
        let counted = posts.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    // The headers, then as many body bytes as they announce.
                    let whole = loop {
                        let n = socket.read(&mut buf).await.unwrap();
                        if n == 0 {
                            return;
                        }
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request).to_lowercase();
                        if let Some(end) = text.find("\r\n\r\n") {
                            let length: usize = text
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .map_or(0, |v| v.trim().parse().unwrap());
                            if request.len() >= end + 4 + length {
                                break true;
                            }
                        }
                    };
                    if whole {
                        counted.fetch_add(1, Ordering::SeqCst);
                        let body = r#"{"code":200}"#;
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        socket.write_all(reply.as_bytes()).await.unwrap();
                    }
                });
            }
        });
        (address, posts)
    }

    /// One drain sends from the spool at a time: while another holds the turn (a drain whose
    /// removal still runs on its blocking thread), a drain neither sends nor removes anything.
    #[tokio::test]
    async fn a_drain_waits_for_the_turn_before_it_sends() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path().join("spool")).unwrap();
        spool
            .put(
                &serde_json::from_value(serde_json::json!({"logId": 7, "handleCode": 200}))
                    .unwrap(),
            )
            .unwrap();
        let (admin, posts) = acknowledging_admin().await;
        let tls = crate::tls::client_config(&crate::tls::TlsSettings::default()).unwrap();
        let client = AdminClient::new(vec![admin], None, None, &tls).unwrap();

        let held = spool.drain_turn().lock_owned().await;
        let waited =
            tokio::time::timeout(Duration::from_millis(300), drain_once(&client, &spool)).await;
        assert!(waited.is_err(), "the drain went ahead without the turn");
        assert_eq!(posts.load(Ordering::SeqCst), 0, "nothing sent meanwhile");
        assert_eq!(
            spool.pending().unwrap().len(),
            1,
            "nothing removed meanwhile"
        );

        drop(held);
        assert_eq!(drain_once(&client, &spool).await.unwrap(), 1);
        assert_eq!(posts.load(Ordering::SeqCst), 1);
        assert!(
            spool.pending().unwrap().is_empty(),
            "removed once acknowledged"
        );
    }
}
