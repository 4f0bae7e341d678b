//! Start marks: which runs got as far as their own process (an http run: as far as its request)
//! before the agent stopped. A restarted agent hands a run whose start is in its journal back to
//! the admins as `not_started` only when no mark says it got that far.
//!
//! The marks are slots of 8 bytes in one file of the data folder, each a run id (little-endian;
//! 0 is no run). A run takes a free slot before it starts. Its process writes its run id there,
//! in the spawner's child before any other step (so a process that left no mark ran nothing);
//! the agent writes an http run's mark itself before the request leaves. A slot is free again
//! once its run's result is in the spool, which is fsynced: from then on a restart reports the
//! spooled result, and the mark is not needed. Marks are not fsynced, so they are trusted only in
//! the boot of the host they were written in (`journal::Leftovers::same_boot`).
//!
//! Why slots and not a mark on each run's log file: that made every run create a file before it
//! started, even a run that writes nothing, and the create was the largest single cost of a run
//! on the agent's thread (BENCHMARKS.md, issue 17). A slot is rewritten in place: no inode, no
//! directory entry, and the file's modification time, its one journal change, moves only with
//! the kernel's clock tick, not with each write.
//!
//! The agent's own marks (http runs) go through a shared mapping of the file's first
//! `MAPPED_SLOTS` slots instead of `pwrite`: a store into a page already written since its last
//! writeback stamps nothing, so the file's time, and the ext4 journal wait it may cost the
//! runtime thread, comes once per writeback of the page, not once per clock tick (at 2,000 http
//! runs a second those waits were nearly all the runtime threads' waits on the journal). Those
//! slots are written with zeros when the file is opened, so a store never needs a block the disk
//! might not have (which would be a SIGBUS instead of an error). That holds only where a page is
//! rewritten in place, so the file is mapped only on ext2/3/4 and tmpfs: on a copy-on-write file
//! system (btrfs, zfs, xfs with reflinks) a store after writeback needs a new block, and a full
//! disk would end the agent. A mark in a slot past the mapping, or on another file system, is
//! written with `pwrite` as before. The same page cache serves both, so a restarted agent reads
//! every mark alike. What is left: a disk failing to read a page back in, or an ext4 aborted by
//! errors, ends the agent at a mark where `pwrite` failed the run (the run has no mark then and
//! comes back `not_started`, never run twice).

#![allow(
    unsafe_code,
    reason = "mapping the marks file and storing into it need libc and raw pointers"
)]

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// The marks file's name in the agent's data folder.
pub const FILE: &str = "started.marks";
const SLOT_BYTES: u64 = 8;
/// Slots in the mapping (32 KiB): more runs than an agent holds at once between start and
/// spooled result in all but a burst, where the rest write with `pwrite`.
const MAPPED_SLOTS: u64 = 4096;

/// Where a run's process writes its mark: `run_id` at `offset` of the marks file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mark {
    pub offset: u64,
    pub run_id: i64,
}

impl Mark {
    /// What the process writes at `offset`.
    pub fn bytes(self) -> [u8; 8] {
        self.run_id.to_le_bytes()
    }
}

/// The agent's marks file and which slot each starting or finished run holds in it.
pub struct StartMarks {
    /// Shared with the spawn requests, whose processes write their marks into it.
    file: Arc<File>,
    slots: Mutex<Slots>,
    /// The first `MAPPED_SLOTS` slots, mapped shared, for the agent's own marks.
    mapped: Option<Mapped>,
}

/// A shared, writable mapping of the start of the marks file, its blocks written beforehand.
struct Mapped {
    start: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is only ever stored into with atomic stores at 8-byte slots, and unmapped
// once, on drop; any thread may do either.
unsafe impl Send for Mapped {}
// SAFETY: as above: shared access is atomic stores only.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Writes the file's first `len` bytes with zeros (so that each of their blocks exists on
    /// disk) and maps them; `None` on a file system that may not rewrite a page in place.
    fn of(file: &File, len: usize) -> std::io::Result<Option<Self>> {
        use nix::sys::statfs::{EXT4_SUPER_MAGIC, TMPFS_MAGIC, fstatfs};
        use std::os::fd::AsRawFd;
        let kind = fstatfs(file)?.filesystem_type();
        if kind != EXT4_SUPER_MAGIC && kind != TMPFS_MAGIC {
            return Ok(None);
        }
        file.write_all_at(&vec![0; len], 0)?;
        // SAFETY: a new mapping the kernel places; the file is open read-write and at least
        // `len` bytes long (just written), and is never shortened while mapped (`open` truncates
        // only before it maps).
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let start = std::ptr::NonNull::new(start.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap gave a null mapping"))?;
        Ok(Some(Self { start, len }))
    }

    /// Stores `mark` if its slot is mapped; false if it is not.
    fn store(&self, mark: Mark) -> bool {
        let Some(offset) = usize::try_from(mark.offset)
            .ok()
            .filter(|&o| o % 8 == 0 && o + 8 <= self.len)
        else {
            return false;
        };
        // SAFETY: `offset` is inside the mapping and 8-byte aligned (the mapping starts on a
        // page); the slot is only ever accessed atomically in this process.
        let slot = unsafe {
            std::sync::atomic::AtomicU64::from_ptr(self.start.as_ptr().add(offset).cast())
        };
        slot.store(
            u64::from_ne_bytes(mark.bytes()),
            std::sync::atomic::Ordering::Relaxed,
        );
        true
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping `of` made, unmapped once; nothing borrows into it past a store.
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.len) };
    }
}

#[derive(Default)]
struct Slots {
    held: HashMap<i64, u32>,
    free: Vec<u32>,
    /// Slots ever handed out: the file's length in slots, at most.
    made: u32,
}

impl StartMarks {
    /// The runs a previous agent process marked in `dir`. Read before `open` empties the file.
    ///
    /// # Errors
    /// When the file is there and cannot be read.
    pub fn left_in(dir: &Path) -> std::io::Result<HashSet<i64>> {
        let bytes = match std::fs::read(dir.join(FILE)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
            Err(e) => return Err(e),
        };
        Ok(bytes
            .chunks_exact(SLOT_BYTES as usize)
            .filter_map(|slot| slot.try_into().ok().map(i64::from_le_bytes))
            .filter(|&run_id| run_id > 0)
            .collect())
    }

    /// The marks file in `dir`, emptied: call it once what a previous process left is settled
    /// (its results spooled), since a mark left in a slot no run takes would otherwise still be
    /// read after the next restart.
    ///
    /// # Errors
    /// When the file cannot be made or emptied.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(FILE))?;
        let len = usize::try_from(MAPPED_SLOTS * SLOT_BYTES).unwrap_or(usize::MAX);
        let mapped = match Mapped::of(&file, len) {
            Ok(mapped) => mapped,
            Err(e) => {
                tracing::warn!(error = %e, "Cannot map the start marks file; marks are written instead");
                None
            }
        };
        Ok(Self {
            file: Arc::new(file),
            slots: Mutex::new(Slots::default()),
            mapped,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The slot `run_id` writes its mark into: a free one, or the one it holds already.
    pub fn take(&self, run_id: i64) -> Mark {
        let mut slots = self.lock();
        let slot = match slots.held.get(&run_id) {
            Some(&slot) => slot,
            None => {
                let slot = match slots.free.pop() {
                    Some(slot) => slot,
                    None => {
                        slots.made += 1;
                        slots.made - 1
                    }
                };
                slots.held.insert(run_id, slot);
                slot
            }
        };
        Mark {
            offset: u64::from(slot) * SLOT_BYTES,
            run_id,
        }
    }

    /// Marks `run_id` started from the agent itself, for a run without a process of its own.
    ///
    /// # Errors
    /// When the write fails: the run must not start unmarked.
    pub fn mark(&self, run_id: i64) -> std::io::Result<()> {
        let mark = self.take(run_id);
        if self.mapped.as_ref().is_some_and(|m| m.store(mark)) {
            return Ok(());
        }
        self.file.write_all_at(&mark.bytes(), mark.offset)
    }

    /// `run_id`'s result is in the spool: its slot may go to another run. A run that never took
    /// one changes nothing.
    pub fn release(&self, run_id: i64) {
        let mut slots = self.lock();
        if let Some(slot) = slots.held.remove(&run_id) {
            slots.free.push(slot);
        }
    }

    /// `run_id`'s slot is never given to another run: its process may still write its mark
    /// late (the spawner died holding its request), and would then overwrite another run's.
    /// Eight bytes of the file per such run, for the agent process's life.
    pub fn retire(&self, run_id: i64) {
        self.lock().held.remove(&run_id);
    }

    /// The open marks file, for a spawn request to pass to the run's process.
    pub fn file(&self) -> Arc<File> {
        self.file.clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_read_back_after_a_restart_and_emptied_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        assert!(StartMarks::left_in(dir.path()).unwrap().is_empty());
        let marks = StartMarks::open(dir.path()).unwrap();
        marks.mark(7).unwrap();
        // A process writes its mark through its own descriptor of the file.
        let mark = marks.take(9);
        marks
            .file()
            .write_all_at(&mark.bytes(), mark.offset)
            .unwrap();
        // Taken, never written: its process did not get that far.
        marks.take(11);
        drop(marks);
        assert_eq!(
            StartMarks::left_in(dir.path()).unwrap(),
            HashSet::from([7, 9])
        );
        let _marks = StartMarks::open(dir.path()).unwrap();
        assert!(StartMarks::left_in(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_slot_goes_to_another_run_only_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let marks = StartMarks::open(dir.path()).unwrap();
        let first = marks.take(1);
        assert_eq!(marks.take(1), first, "a run keeps its slot");
        let second = marks.take(2);
        assert_ne!(second.offset, first.offset);
        marks.mark(1).unwrap();
        marks.release(1);
        marks.release(1);
        let third = marks.take(3);
        assert_eq!(third.offset, first.offset, "the released slot is reused");
        assert_ne!(
            marks.take(4).offset,
            third.offset,
            "released twice, given once"
        );
        marks.mark(3).unwrap();
        assert_eq!(
            StartMarks::left_in(dir.path()).unwrap(),
            HashSet::from([3]),
            "run 1's mark is gone with its slot"
        );
        // A retired slot stays out of use, released or not.
        let retired = marks.take(5);
        marks.retire(5);
        marks.release(5);
        assert_ne!(marks.take(6).offset, retired.offset);
    }

    /// The agent's own marks go through the mapping up to its last slot and are written past
    /// it; a restart reads both, and the mapped slots were made empty, not absent. Run in the
    /// test's temp folder (mapped or not, as its file system allows) and, where there is one,
    /// on `/dev/shm`'s tmpfs, so that the mapping is tested whatever the temp folder is.
    #[test]
    fn marks_stored_in_the_mapping_and_written_past_it_read_back_alike() {
        marks_read_back_alike_in(&tempfile::tempdir().unwrap());
        // Skipped where /dev/shm is no tmpfs, cannot be written, or has no room for the
        // mapping (a container's is small and shared).
        let shm = Path::new("/dev/shm");
        let room = nix::sys::statvfs::statvfs(shm).map_or(0, |s| {
            s.blocks_available().saturating_mul(s.fragment_size())
        });
        if nix::sys::statfs::statfs(shm)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
            && room >= 1024 * 1024
            && let Ok(dir) = tempfile::tempdir_in(shm)
        {
            marks_read_back_alike_in(&dir);
        }
    }

    fn marks_read_back_alike_in(dir: &tempfile::TempDir) {
        let marks = StartMarks::open(dir.path()).unwrap();
        let kind = nix::sys::statfs::statfs(dir.path())
            .unwrap()
            .filesystem_type();
        let mappable =
            kind == nix::sys::statfs::EXT4_SUPER_MAGIC || kind == nix::sys::statfs::TMPFS_MAGIC;
        assert_eq!(marks.mapped.is_some(), mappable, "mapped on {kind:?}");
        if let Some(mapped) = marks.mapped.as_ref() {
            // The mapping takes the last slot it holds and nothing past it or between slots.
            let at = |offset| Mark { offset, run_id: 1 };
            assert!(mapped.store(at((MAPPED_SLOTS - 1) * SLOT_BYTES)));
            assert!(!mapped.store(at(MAPPED_SLOTS * SLOT_BYTES)));
            assert!(!mapped.store(at(4)));
            mapped.store(Mark {
                offset: (MAPPED_SLOTS - 1) * SLOT_BYTES,
                run_id: 0,
            });
            assert_eq!(
                std::fs::metadata(dir.path().join(FILE)).unwrap().len(),
                MAPPED_SLOTS * SLOT_BYTES
            );
        }
        assert!(StartMarks::left_in(dir.path()).unwrap().is_empty());
        let last_mapped = i64::try_from(MAPPED_SLOTS).unwrap();
        for run_id in 1..=last_mapped + 1 {
            assert_eq!(
                marks.take(run_id).offset,
                u64::try_from(run_id - 1).unwrap() * SLOT_BYTES
            );
        }
        marks.mark(1).unwrap();
        marks.mark(last_mapped).unwrap();
        marks.mark(last_mapped + 1).unwrap();
        // A process's own write into a mapped slot, beside the agent's stores.
        let mark = marks.take(2);
        marks
            .file()
            .write_all_at(&mark.bytes(), mark.offset)
            .unwrap();
        let expected = HashSet::from([1, 2, last_mapped, last_mapped + 1]);
        assert_eq!(StartMarks::left_in(dir.path()).unwrap(), expected, "live");
        drop(marks);
        assert_eq!(
            StartMarks::left_in(dir.path()).unwrap(),
            expected,
            "after the agent let go of the mapping"
        );
        let _marks = StartMarks::open(dir.path()).unwrap();
        assert!(StartMarks::left_in(dir.path()).unwrap().is_empty());
    }

    /// A file cut short by a crash mid-write, or holding anything else: only whole slots with a
    /// run id count; a torn tail, empty slots and negative numbers name no run.
    #[test]
    fn a_torn_or_foreign_marks_file_names_only_whole_run_ids() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&42_i64.to_le_bytes());
        bytes.extend_from_slice(&0_i64.to_le_bytes());
        bytes.extend_from_slice(&(-3_i64).to_le_bytes());
        bytes.extend_from_slice(&7_i64.to_le_bytes());
        bytes.extend_from_slice(&9_i64.to_le_bytes()[..5]);
        std::fs::write(dir.path().join(FILE), &bytes).unwrap();
        assert_eq!(
            StartMarks::left_in(dir.path()).unwrap(),
            HashSet::from([42, 7])
        );
        std::fs::write(dir.path().join(FILE), b"not marks").unwrap();
        assert_eq!(
            StartMarks::left_in(dir.path()).unwrap().len(),
            1,
            "eight bytes of text read as one number, any number: a stray mark only makes a run lost"
        );
        std::fs::remove_file(dir.path().join(FILE)).unwrap();
        std::fs::create_dir(dir.path().join(FILE)).unwrap();
        assert!(
            StartMarks::left_in(dir.path()).is_err(),
            "an unreadable file stops the start"
        );
    }
}
