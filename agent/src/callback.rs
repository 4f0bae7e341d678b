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
