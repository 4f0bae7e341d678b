//! A run's output: the child's stdout and stderr go into one pipe, and a copier task moves
//! them into the run's log file, capped and watched.
//!
//! The cap keeps the head and the tail. The first half of `max_bytes` is written live; beyond
//! it, output goes into a ring file of the other half (`<run>.log.tail`, so memory stays
//! bounded) and, when the output ends, the ring is appended after a line saying how many bytes
//! were cut. The log file is only ever appended to, so line numbers a pager has seen never
//! change. When free space on the log disk falls below the floor (or a write fails), logging
//! stops: the copier keeps draining the pipe so the job is never blocked, and says so in the
//! outcome and, where it can, in the log.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use tokio::sync::oneshot;

use super::prepare::RunLog;

/// Bytes read from the pipe at a time; kept small because every running run holds one.
const CHUNK: usize = 16 * 1024;
/// Free space is checked again after this many bytes were written.
const CHECK_EVERY: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy)]
pub struct OutputLimits {
    /// Most bytes of output kept (head plus tail).
    pub max_bytes: u64,
    /// Below this much free space on the log disk, logging stops.
    pub min_free_bytes: u64,
}

/// What happened to a run's output.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes the job wrote.
    pub total_bytes: u64,
    /// Bytes dropped between the head and the tail.
    pub cut_bytes: u64,
    /// Why logging stopped early, if it did.
    pub stopped: Option<String>,
}

/// A pipe for the child's stdout and stderr: (read end for the copier, write end for the child).
///
/// # Errors
/// When the process is out of file descriptors.
pub fn pipe() -> std::io::Result<(File, File)> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    // The copier reads without blocking; the job writes blocking (the flag is per end). Set here,
    // where both ends are known, `copy` skips tokio's checks of what it is given (an fstat and
    // an F_GETFL per run, BENCHMARKS.md).
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((File::from(read), File::from(write)))
}

/// Free bytes for unprivileged users on the file system holding `path`.
fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let stat = nix::sys::statvfs::statvfs(path)?;
    Ok(stat.blocks_available() * stat.fragment_size())
}

/// The ring of the last `cap` bytes, in a file beside the log.
struct Ring {
    /// The ring file and its path, made when the first byte beyond the head arrives.
    file: Option<(File, PathBuf)>,
    cap: u64,
    written: u64,
}

impl Ring {
    /// Keeps `bytes` of the output of the run logged at `log_path`.
    fn push(&mut self, log_path: &Path, mut bytes: &[u8]) -> std::io::Result<()> {
        if self.cap == 0 {
            self.written += bytes.len() as u64;
            return Ok(());
        }
        let file = match &self.file {
            Some((f, _)) => f,
            None => {
                let path = log_path.with_extension("log.tail");
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)?;
                &self.file.insert((file, path)).0
            }
        };
        // Only the last `cap` bytes of a large chunk can survive.
        if bytes.len() as u64 > self.cap {
            let skip = bytes.len() - self.cap as usize;
            self.written += skip as u64;
            bytes = &bytes[skip..];
        }
        while !bytes.is_empty() {
            let at = self.written % self.cap;
            let room = (self.cap - at) as usize;
            let take = room.min(bytes.len());
            file.write_all_at(&bytes[..take], at)?;
            self.written += take as u64;
            bytes = &bytes[take..];
        }
        Ok(())
    }

    /// Bytes that fell out of the ring.
    fn cut(&self) -> u64 {
        self.written.saturating_sub(self.cap)
    }

    /// Appends what the ring holds, oldest first, to `out`; then removes the ring file.
    fn drain_into(self, out: &mut impl Write) -> std::io::Result<()> {
        let Some((file, _)) = &self.file else {
            return Ok(());
        };
        let held = self.written.min(self.cap);
        let start = if self.written > self.cap {
            self.written % self.cap
        } else {
            0
        };
        let mut buf = vec![0u8; CHUNK];
        let mut done = 0;
        while done < held {
            let at = (start + done) % self.cap;
            let take = ((self.cap - at).min(held - done) as usize).min(CHUNK);
            file.read_exact_at(&mut buf[..take], at)?;
            out.write_all(&buf[..take])?;
            done += take as u64;
        }
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if let Some((_, path)) = &self.file {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{bytes} bytes")
    }
}

/// Output up to this many bytes is copied on the run's own task; a run that writes more has the
/// rest copied on a blocking thread, so that writing a talkative run's log never holds up the
/// other runs on the agent's thread. Most runs write far less, and a thread per run was a
/// measurable part of the agent's CPU per run (BENCHMARKS.md).
const INLINE_BYTES: u64 = 256 * 1024;

/// Copies the output pipe `source` into the run's log until end of file; the log is made by the
/// first byte. Never fails: what went wrong is in the outcome. `source` must be the read end
/// `pipe` made: it is taken as a non-blocking pipe without a look. `ended` is dropped as soon
/// as the output has ended (or cannot be read), before the log is finished.
///
/// The pipe is read once before the runtime watches it: a short run whose pid was read at the
/// agent's next wake-up has usually ended by then, and is seen ended without the pipe's
/// registration with epoll, the runtime's poll for it and its removal.
pub(super) async fn copy(
    source: File,
    log: RunLog,
    limits: OutputLimits,
    ended: oneshot::Sender<()>,
) -> Outcome {
    let mut copier = Copier::new(log, limits);
    match copier.read_what_is_there(&source) {
        Ok(true) => {
            drop(ended);
            return copier.finish();
        }
        Ok(false) => {}
        Err(e) => {
            drop(ended);
            copier.read_failed(&e);
            return copier.finish();
        }
    }
    let pipe = match tokio::net::unix::pipe::Receiver::from_file_unchecked(source) {
        Ok(pipe) => pipe,
        Err(e) => {
            drop(ended);
            copier.read_failed(&e);
            return copier.finish();
        }
    };
    // Not zeroed: most runs write little or nothing, and clearing 16 KiB per run showed in the
    // agent's profile; the kernel fills what it reads.
    let mut buf = Vec::with_capacity(CHUNK);
    loop {
        if copier.outcome.total_bytes > INLINE_BYTES {
            return match pipe.into_blocking_fd() {
                Ok(fd) => {
                    buf.resize(CHUNK, 0);
                    let rest = tokio::task::spawn_blocking(move || {
                        copier.drain(File::from(fd), &mut buf);
                        drop(ended);
                        copier.finish()
                    });
                    rest.await.unwrap_or_else(|e| Outcome {
                        stopped: Some(format!("the log copier failed: {e}")),
                        ..Outcome::default()
                    })
                }
                Err(e) => {
                    drop(ended);
                    copier.read_failed(&e);
                    copier.finish()
                }
            };
        }
        if let Err(e) = pipe.readable().await {
            copier.read_failed(&e);
            break;
        }
        buf.clear();
        match pipe.try_read_buf(&mut buf) {
            Ok(0) => break,
            Ok(n) => copier.take(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                copier.read_failed(&e);
                break;
            }
        }
    }
    drop(ended);
    copier.finish()
}

/// Moves a run's output into its log, chunk by chunk: the head, the held-back notice, the ring
/// of the tail, and the free-space watch.
struct Copier {
    outcome: Outcome,
    /// None once logging stopped: what follows is drained and counted, not written. The run's
    /// own log, shared rather than opened again (an open and a close per run).
    log: Option<RunLog>,
    ring: Ring,
    limits: OutputLimits,
    head_cap: u64,
    head: u64,
    last_byte: u8,
    /// Said once, when the first byte beyond the head arrives, whether or not a read happens
    /// to end exactly at the head's end.
    held_back_said: bool,
    next_check: u64,
}

impl Copier {
    fn new(log: RunLog, limits: OutputLimits) -> Self {
        let head_cap = limits.max_bytes / 2;
        Self {
            outcome: Outcome::default(),
            log: Some(log),
            ring: Ring {
                file: None,
                cap: limits.max_bytes - head_cap,
                written: 0,
            },
            limits,
            head_cap,
            head: 0,
            last_byte: b'\n',
            held_back_said: false,
            next_check: 0,
        }
    }

    fn read_failed(&mut self, e: &std::io::Error) {
        self.outcome
            .stopped
            .get_or_insert(format!("cannot read the output: {e}"));
    }

    /// Takes what the non-blocking `source` holds now, until it has none or more than
    /// `INLINE_BYTES` came in all (one read of 4 KiB past it at most); true once it has ended.
    fn read_what_is_there(&mut self, mut source: &File) -> std::io::Result<bool> {
        // On the stack and small: most runs write nothing, and this is read once.
        let mut chunk = [0u8; 4096];
        while self.outcome.total_bytes <= INLINE_BYTES {
            match source.read(&mut chunk) {
                Ok(0) => return Ok(true),
                Ok(n) => self.take(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Reads `source` to its end, blocking.
    fn drain(&mut self, mut source: File, buf: &mut [u8]) {
        loop {
            match source.read(buf) {
                Ok(0) => break,
                Ok(n) => self.take(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.read_failed(&e);
                    break;
                }
            }
        }
    }

    /// One chunk of output.
    fn take(&mut self, chunk: &[u8]) {
        self.outcome.total_bytes += chunk.len() as u64;
        // Logging stopped: drain so the job never blocks on a full pipe.
        let Some(log) = self.log.take() else {
            return;
        };
        match log.file() {
            Ok(file) => {
                if self.write(&log, file, chunk) {
                    self.log = Some(log);
                }
            }
            Err(e) => self.outcome.stopped = Some(format!("cannot make the log: {e}")),
        }
    }

    /// Writes a chunk into the open log; false once logging stopped.
    fn write(&mut self, log: &RunLog, mut file: &File, mut chunk: &[u8]) -> bool {
        if self.outcome.total_bytes >= self.next_check {
            self.next_check = self.outcome.total_bytes + CHECK_EVERY;
            let dir = log.path().parent().unwrap_or(Path::new("."));
            if let Ok(free) = free_bytes(dir)
                && free < self.limits.min_free_bytes
            {
                let why = format!(
                    "free space on the log disk is below {} ({} left)",
                    mib(self.limits.min_free_bytes),
                    mib(free)
                );
                let _ = writeln!(
                    file,
                    "{}[jobfleet-agent] logging stopped: {why}; the run goes on",
                    if self.last_byte == b'\n' { "" } else { "\n" }
                );
                self.outcome.stopped = Some(why);
                return false;
            }
        }
        let result = (|| -> std::io::Result<()> {
            if self.head < self.head_cap {
                let take = (self.head_cap - self.head).min(chunk.len() as u64) as usize;
                file.write_all(&chunk[..take])?;
                self.head += take as u64;
                if take > 0 {
                    self.last_byte = chunk[take - 1];
                }
                chunk = &chunk[take..];
            }
            if !chunk.is_empty() && !self.held_back_said {
                self.held_back_said = true;
                writeln!(
                    file,
                    "{}[jobfleet-agent] output beyond the first {} is held back; its last {} \
                     follow when the run ends (log_max_bytes)",
                    if self.last_byte == b'\n' { "" } else { "\n" },
                    mib(self.head_cap),
                    mib(self.ring.cap)
                )?;
                self.last_byte = b'\n';
            }
            self.ring.push(log.path(), chunk)
        })();
        if let Err(e) = result {
            self.outcome.stopped = Some(format!("cannot write the log: {e}"));
            return false;
        }
        true
    }

    /// Appends the tail held back, after a line saying what was cut.
    fn finish(self) -> Outcome {
        let Self {
            mut outcome,
            log,
            ring,
            last_byte,
            limits,
            ..
        } = self;
        outcome.cut_bytes = ring.cut();
        // A ring holds bytes only after the head was written, so the log is open by then.
        if let Some(log) = log
            && ring.written > 0
            && let Ok(mut file) = log.file()
        {
            let (cut, ring_cap) = (outcome.cut_bytes, ring.cap);
            let result = (|| -> std::io::Result<()> {
                if cut > 0 {
                    writeln!(
                        file,
                        "{}[jobfleet-agent] log capped at {} (log_max_bytes): {} bytes cut here; \
                         the last {} follow",
                        if last_byte == b'\n' { "" } else { "\n" },
                        mib(limits.max_bytes),
                        cut,
                        mib(ring_cap)
                    )?;
                }
                ring.drain_into(&mut file)
            })();
            if let Err(e) = result {
                outcome.stopped = Some(format!("cannot write the log's tail: {e}"));
            }
        }
        outcome
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(output: &[u8], limits: OutputLimits) -> (Outcome, Vec<u8>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("7.log");
        let (read, mut write) = pipe().unwrap();
        let data = output.to_vec();
        let writer = std::thread::spawn(move || write.write_all(&data).unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (ended, _output_ended) = oneshot::channel();
        let outcome = runtime.block_on(copy(read, RunLog::new(log.clone()), limits, ended));
        writer.join().unwrap();
        let text = std::fs::read(&log).unwrap_or_default();
        (outcome, text, dir)
    }

    #[test]
    fn the_output_s_end_is_told_when_the_last_writer_closes_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let (read, mut write) = pipe().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (ended, mut output_ended) = oneshot::channel();
        let copier = runtime.spawn(copy(
            read,
            RunLog::new(dir.path().join("7.log")),
            ROOMY,
            ended,
        ));
        write.write_all(b"still going\n").unwrap();
        runtime.block_on(async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        });
        assert_eq!(
            output_ended.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "the output is still open"
        );
        drop(write);
        runtime.block_on(async {
            assert!(
                (&mut output_ended).await.is_err(),
                "told by the sender's drop"
            );
            assert_eq!(copier.await.unwrap().total_bytes, 12);
        });
    }

    #[test]
    fn an_output_that_ended_before_its_copier_started_needs_no_reactor() {
        let dir = tempfile::tempdir().unwrap();
        let (read, mut write) = pipe().unwrap();
        write.write_all(b"done\n").unwrap();
        drop(write);
        // No I/O driver: a copier that registered the pipe with epoll would panic here.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (ended, mut output_ended) = oneshot::channel();
        let outcome = runtime.block_on(copy(
            read,
            RunLog::new(dir.path().join("7.log")),
            ROOMY,
            ended,
        ));
        assert_eq!(outcome.total_bytes, 5);
        assert_eq!(
            output_ended.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
        assert_eq!(std::fs::read(dir.path().join("7.log")).unwrap(), b"done\n");
    }

    const ROOMY: OutputLimits = OutputLimits {
        max_bytes: 1000,
        min_free_bytes: 0,
    };

    #[test]
    fn output_under_the_cap_is_kept_whole() {
        let data: Vec<u8> = (0..900).map(|i| b'a' + (i % 26) as u8).collect();
        let (outcome, text, dir) = run(&data, ROOMY);
        let notices = String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| l.contains("[jobfleet-agent]"))
            .count();
        // The held-back notice sits between head and tail; all bytes are there.
        assert_eq!(notices, 1);
        let kept: Vec<u8> = String::from_utf8_lossy(&text)
            .split('\n')
            .filter(|l| !l.contains("[jobfleet-agent]"))
            .collect::<String>()
            .into_bytes();
        assert_eq!(kept, data);
        assert_eq!((outcome.total_bytes, outcome.cut_bytes), (900, 0));
        assert!(!dir.path().join("7.log.tail").exists());
        let (outcome, text, _dir) = run(b"short\n", ROOMY);
        assert_eq!((text.as_slice(), outcome.cut_bytes), (&b"short\n"[..], 0));
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_says_what_was_cut() {
        let mut data = Vec::new();
        for i in 0..2000 {
            data.extend_from_slice(format!("line {i:05}\n").as_bytes());
        }
        let (outcome, text, dir) = run(&data, ROOMY);
        let text = String::from_utf8(text).unwrap();
        assert_eq!(outcome.total_bytes, data.len() as u64);
        assert_eq!(outcome.cut_bytes, data.len() as u64 - 1000);
        assert!(text.starts_with("line 00000\nline 00001\n"), "{text}");
        assert!(text.ends_with("line 01998\nline 01999\n"), "{text}");
        assert!(
            text.contains(&format!("{} bytes cut here", data.len() - 1000)),
            "{text}"
        );
        let kept = text
            .lines()
            .filter(|l| !l.starts_with("[jobfleet-agent]"))
            .map(str::len)
            .sum::<usize>();
        assert!(kept <= 1000, "{kept}");
        assert!(!dir.path().join("7.log.tail").exists());
    }

    #[test]
    fn logging_stops_below_the_free_space_floor_and_the_pipe_is_drained() {
        let data = vec![b'x'; 3 * CHUNK];
        let (outcome, text, _dir) = run(
            &data,
            OutputLimits {
                max_bytes: 1 << 20,
                min_free_bytes: u64::MAX,
            },
        );
        assert_eq!(outcome.total_bytes, data.len() as u64);
        assert!(
            outcome.stopped.as_deref().unwrap().contains("free space"),
            "{outcome:?}"
        );
        assert!(
            String::from_utf8_lossy(&text).contains("logging stopped"),
            "{}",
            String::from_utf8_lossy(&text)
        );
        assert!(text.len() < CHUNK);
    }

    #[test]
    fn a_talkative_run_is_copied_whole_past_the_part_copied_inline() {
        let mut data = Vec::new();
        let mut i = 0;
        while data.len() < 3 * INLINE_BYTES as usize {
            data.extend_from_slice(format!("line {i:07}\n").as_bytes());
            i += 1;
        }
        let limits = OutputLimits {
            max_bytes: 64 << 20,
            min_free_bytes: 0,
        };
        let (outcome, text, _dir) = run(&data, limits);
        assert_eq!(
            outcome,
            Outcome {
                total_bytes: data.len() as u64,
                ..Outcome::default()
            }
        );
        assert!(
            text == data,
            "{} of {} bytes logged",
            text.len(),
            data.len()
        );
    }
}
