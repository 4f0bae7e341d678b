//! Lets go of memory an idle process holds without using it: the pages of its own code and
//! constants, and of its shared libraries', that it no longer runs, and the allocator's free
//! pages.
//!
//! An idle admin or agent keeps resident every page of its binary that start-up, a login or a
//! burst ever touched (the kernel maps 64 kB around each page fault): 20 MB of the admin's
//! 30 MB and 5 to 7 MB of the agent's 7.5 to 10 MB, of which what it runs while idle is about
//! 11 MB and 3 MB (BENCHMARKS.md, "Idle admin and agent"). Those pages are clean copies of the binary, so
//! unmapping them loses nothing: a page in use faults straight back in from the page cache (a
//! minor fault, no disk read), and the ones left unmapped are the first the kernel reclaims
//! under memory pressure instead of being shielded as mapped code. What stays resident is the
//! code the process runs now.
//!
//! The same goes for the shared libraries (libc's code alone was 1 MB of an idle agent's
//! 6.2 MB). Only the read-only segments of the objects the dynamic loader has loaded (the
//! executable and its libraries) are released, and only where smaps says their mapping is private,
//! cannot be written and holds no private copy of a page (`Anonymous: 0`): a relocated page (the
//! RELRO segment) or a patched one would be lost, not re-read, so any mapping that has one is left
//! alone. What is released is what the kernel may drop by itself at any time under memory
//! pressure (clean pages of a file; locked mappings are left alone), so no reader can tell the
//! difference but by a fault's cost. The pages of a library are shared with every process using
//! it: letting go of them lowers this process's RSS, and frees memory only when no other process
//! maps them.

#![allow(
    unsafe_code,
    reason = "madvise and dl_iterate_phdr have no safe interface"
)]

use std::time::Duration;

/// How often a long-running process lets go of its idle code pages: often enough that what is
/// resident is about a minute's working set; the working set faults back in each time (a few
/// hundred minor faults, well under a millisecond).
pub const RELEASE_EVERY: Duration = Duration::from_secs(60);

/// Start-up (migrations, config, the first connections) touches code it never runs again:
/// released this long after start, then every [`RELEASE_EVERY`].
pub const FIRST_RELEASE_AFTER: Duration = Duration::from_secs(10);

/// A stretch of the address space that may be released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    start: usize,
    end: usize,
    resident_kb: u64,
}

/// Releases the clean read-only pages of the executable and its libraries (returns how many
/// bytes were resident in them before) and the allocator's free pages.
///
/// A mapping is released only while it is a read-only segment of an object the dynamic loader
/// has loaded, and under the loader's lock (`dl_iterate_phdr` holds it while it calls back): a
/// file mapped for a while (a backtrace reading the executable's debug info, the loader's cache)
/// or a library `dlclose` may unload could otherwise be unmapped between the read of smaps and
/// the advice, and its addresses reused by memory in use, which the advice would zero.
///
/// # Errors
/// When `/proc/self` cannot be read. A mapping the kernel refuses to advise is skipped.
pub fn release() -> std::io::Result<u64> {
    let mut pass = Pass {
        page: usize::try_from(
            // SAFETY: sysconf reads a constant of the system.
            unsafe { libc::sysconf(libc::_SC_PAGESIZE) },
        )
        .unwrap_or(4096)
        .max(1),
        candidates: None,
        released_kb: 0,
        refused: 0,
    };
    // SAFETY: `release_object` reads only what the loader passes for the call and the `Pass`
    // given here, which outlives the call; it does not unwind (it has nothing that panics but
    // allocation failure, which aborts).
    unsafe { libc::dl_iterate_phdr(Some(release_object), (&raw mut pass).cast()) };
    match pass.candidates {
        Some(Ok(_)) => {}
        Some(Err(e)) => return Err(e),
        None => return Err(std::io::Error::other("the loader lists no loaded object")),
    }
    if pass.refused > 0 {
        tracing::debug!(
            mappings = pass.refused,
            "The kernel refused to release some mappings"
        );
    }
    release_free_heap();
    Ok(pass.released_kb * 1024)
}

/// One `release`, carried through the loader's calls.
struct Pass {
    page: usize,
    /// The mappings smaps says may be released, read at the first loaded object (under the
    /// loader's lock, so no object comes or goes between it and the advice).
    candidates: Option<std::io::Result<Vec<Region>>>,
    released_kb: u64,
    refused: u32,
}

/// Whether the object at `base` with program `headers` has its code relocated in place
/// (`DT_TEXTREL`, or `DF_TEXTREL` in `DT_FLAGS`): the loader then writes into its read-only
/// segments, maybe while `dlopen` loads it under the iteration, after smaps was read.
///
/// # Safety
/// The object must be loaded: its `PT_DYNAMIC` segment is read in place.
unsafe fn has_text_relocations(base: usize, headers: &[libc::Elf64_Phdr]) -> bool {
    const DT_NULL: i64 = 0;
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 0x4;
    const PT_DYNAMIC: u32 = 2;
    let Some(dynamic) = headers.iter().find(|h| h.p_type == PT_DYNAMIC) else {
        return false;
    };
    let (Ok(vaddr), Ok(size)) = (
        usize::try_from(dynamic.p_vaddr),
        usize::try_from(dynamic.p_memsz),
    ) else {
        return true;
    };
    let start = base.wrapping_add(vaddr) as *const [i64; 2];
    if start.is_null() || !start.is_aligned() {
        return true;
    }
    for index in 0..size / std::mem::size_of::<[i64; 2]>() {
        // SAFETY: an entry of the object's dynamic section (tag, value), within its segment.
        let [tag, value] = unsafe { start.add(index).read() };
        match tag {
            DT_NULL => return false,
            DT_TEXTREL => return true,
            DT_FLAGS if value.cast_unsigned() & DF_TEXTREL != 0 => return true,
            _ => {}
        }
    }
    false
}

/// Called by `dl_iterate_phdr` for each loaded object: releases the candidate mappings that lie
/// within one of its read-only `PT_LOAD` segments.
unsafe extern "C" fn release_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    pass: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `pass` is the `Pass` `release` handed to `dl_iterate_phdr`, borrowed by nothing
    // else during the call; `info` is the loader's record of one object for this call.
    let (pass, info) = unsafe { (&mut *pass.cast::<Pass>(), &*info) };
    let candidates = pass.candidates.get_or_insert_with(|| {
        // Read as bytes: a mapped file's path need not be UTF-8.
        std::fs::read("/proc/self/smaps").map(|smaps| releasable(&String::from_utf8_lossy(&smaps)))
    });
    let Ok(candidates) = candidates else {
        return 1;
    };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: the loader's program headers of this object, `dlpi_phnum` of them.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let base = usize::try_from(info.dlpi_addr).unwrap_or(usize::MAX);
    // SAFETY: the object is loaded (the loader's lock is held), so its dynamic section is mapped.
    if unsafe { has_text_relocations(base, headers) } {
        return 0;
    }
    for header in headers {
        if header.p_type != libc::PT_LOAD || header.p_flags & libc::PF_W != 0 {
            continue;
        }
        let (Ok(vaddr), Ok(size)) = (
            usize::try_from(header.p_vaddr),
            usize::try_from(header.p_memsz),
        ) else {
            continue;
        };
        let start = base.wrapping_add(vaddr) / pass.page * pass.page;
        let end = base
            .wrapping_add(vaddr)
            .saturating_add(size)
            .div_ceil(pass.page)
            .saturating_mul(pass.page);
        for region in candidates
            .iter()
            .filter(|r| r.start >= start && r.end <= end)
        {
            // SAFETY: the region is a whole private mapping of a file that nobody can write and
            // that holds no private page (smaps, read under the loader's lock held now), inside
            // a read-only segment of an object loaded now, so still that mapping: MADV_DONTNEED
            // only drops page-table entries there, and every later access re-reads the same
            // bytes from the file. No Rust object lives in it.
            let advised = unsafe {
                libc::madvise(
                    region.start as *mut libc::c_void,
                    region.end - region.start,
                    libc::MADV_DONTNEED,
                )
            };
            if advised == 0 {
                pass.released_kb += region.resident_kb;
            } else {
                pass.refused += 1;
            }
        }
    }
    0
}

/// Releases now, after [`FIRST_RELEASE_AFTER`], and every [`RELEASE_EVERY`] until dropped
/// (a task on the current tokio runtime).
pub async fn release_forever() {
    tokio::time::sleep(FIRST_RELEASE_AFTER).await;
    loop {
        // Reading smaps and trimming the heap take a few milliseconds: not on the agent's one
        // runtime thread.
        let released = tokio::task::spawn_blocking(release)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match released {
            Ok(bytes) => tracing::debug!(code_bytes = bytes, "Released idle memory"),
            Err(e) => {
                tracing::info!(error = %e, "Idle memory is not released on this system");
                return;
            }
        }
        tokio::time::sleep(RELEASE_EVERY).await;
    }
}

/// Hands the allocator's free pages back to the system: glibc keeps what a burst freed in each
/// thread's arena (0.8 MB of an idle admin's 7 MB of anonymous memory, measured).
#[cfg(target_env = "gnu")]
fn release_free_heap() {
    // SAFETY: malloc_trim only returns free memory under the allocator's own locks; it touches
    // no allocation in use.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(target_env = "gnu"))]
fn release_free_heap() {}

/// The mappings in `smaps` (the format of `/proc/<pid>/smaps`) that may be released.
fn releasable(smaps: &str) -> Vec<Region> {
    let mut out = Vec::new();
    // The mapping being read: its region, whether it qualifies so far, and whether its
    // `Anonymous` line was seen (a mapping without one is left alone).
    let mut current: Option<(Region, bool, bool)> = None;
    let finish = |current: Option<(Region, bool, bool)>, out: &mut Vec<Region>| {
        if let Some((region, true, true)) = current {
            out.push(region);
        }
    };
    for line in smaps.lines() {
        if let Some((region, readonly_of_a_file)) = mapping_header(line) {
            finish(current.take(), &mut out);
            current = Some((region, readonly_of_a_file, false));
            continue;
        }
        let Some((region, qualifies, anonymous_seen)) = current.as_mut() else {
            continue;
        };
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        let kb = value
            .trim()
            .strip_suffix(" kB")
            .and_then(|n| n.trim().parse::<u64>().ok());
        match (field, kb) {
            ("Rss", Some(kb)) => region.resident_kb = kb,
            ("Anonymous", Some(0)) => *anonymous_seen = true,
            // Not `Private_Dirty`: it also counts the file's own pages not written back yet (a
            // binary just installed), which are the file's content all the same.
            ("Anonymous" | "Swap", Some(kb)) if kb > 0 => *qualifies = false,
            // Locked pages stay resident by request; hugetlb's private pages are not counted as
            // `Anonymous`; a PFN or I/O mapping is no copy of a file.
            ("VmFlags", None)
                if value
                    .split_whitespace()
                    .any(|flag| matches!(flag, "lo" | "pf" | "io" | "ht")) =>
            {
                *qualifies = false;
            }
            _ => {}
        }
    }
    finish(current, &mut out);
    out
}

/// A mapping's header line (`start-end perms offset dev inode path`): its region and whether it
/// is a private read-only mapping of a file other than a device; `None` for any other line.
fn mapping_header(line: &str) -> Option<(Region, bool)> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16)
        .ok()
        .filter(|&end| end > start)?;
    let perms = fields.next()?;
    if perms.len() != 4 {
        return None;
    }
    let _offset = fields.next()?;
    let _device = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    // A file's path is absolute; `[heap]`, `[vdso]` and the like, and an anonymous mapping's
    // empty path, are not files.
    let readonly_of_a_file = path.starts_with('/')
        && !path.starts_with("/dev/")
        && !perms.contains('w')
        && perms.ends_with('p');
    Some((
        Region {
            start,
            end,
            resident_kb: 0,
        },
        readonly_of_a_file,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
5600a0000000-5600a0100000 r--p 00000000 fd:01 42 /usr/bin/jobfleet-agent
Size:               1024 kB
Rss:                 512 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
Swap:                  0 kB
5600a0100000-5600a0400000 r-xp 00100000 fd:01 42 /usr/bin/jobfleet-agent
Size:               3072 kB
Rss:                2048 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
5600a0400000-5600a0410000 r--p 00400000 fd:01 42 /usr/bin/jobfleet-agent
Rss:                  64 kB
Private_Dirty:        64 kB
Anonymous:            64 kB
5600a0410000-5600a0420000 rw-p 00410000 fd:01 42 /usr/bin/jobfleet-agent
Rss:                  16 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:01 77 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                1500 kB
Anonymous:             0 kB
7f0000200000-7f0000300000 rw-p 00000000 00:00 0 
Rss:                 300 kB
Anonymous:           300 kB
7f0000300000-7f0000301000 r--p 00000000 fd:01 43 /usr/bin/jobfleet-agent-old
Rss:                   4 kB
Anonymous:             0 kB
7f0000400000-7f0000401000 r--p 00000000 fd:01 42 /usr/bin/jobfleet-agent
Rss:                   4 kB
7f0000500000-7f0000501000 r--s 00000000 fd:01 44 /var/lib/jobfleet/shared.bin
Rss:                   4 kB
Anonymous:             0 kB
7f0000600000-7f0000601000 r--p 00000000 00:05 9 /dev/zero
Rss:                   4 kB
Anonymous:             0 kB
7f0000700000-7f0000701000 r--p 00000000 00:00 0                          [vvar]
Rss:                   4 kB
Anonymous:             0 kB
7f0000800000-7f0000802000 r-xp 00000000 00:00 0                          [vdso]
Rss:                   8 kB
Anonymous:             0 kB
7f0000900000-7f0000901000 r--p 00000000 00:00 0 
Rss:                   4 kB
Anonymous:             0 kB
7f0000a00000-7f0000a01000 r--p 00000000 fd:01 45 /usr/lib/x86_64-linux-gnu/libpinned.so
Rss:                   4 kB
Anonymous:             0 kB
VmFlags: rd mr mw me lo
";

    #[test]
    fn only_clean_read_only_private_mappings_of_files_are_released() {
        let region = |start, end, resident_kb| Region {
            start,
            end,
            resident_kb,
        };
        assert_eq!(
            releasable(SMAPS),
            [
                region(0x5600_a000_0000, 0x5600_a010_0000, 512),
                region(0x5600_a010_0000, 0x5600_a040_0000, 2048),
                region(0x7f00_0000_0000, 0x7f00_0010_0000, 1500),
                region(0x7f00_0030_0000, 0x7f00_0030_1000, 4),
            ],
            "the executable's and a library's code and constants, and another file's; not the \
             relocated (anonymous) one, a writable one, a shared one, a device's, a heap, the \
             vdso, an anonymous one, a locked one, or one whose smaps entry does not say it holds no private \
             page"
        );
        assert!(releasable("").is_empty());
        assert!(releasable("garbage\nRss: 5 kB\n").is_empty());
    }

    /// An object whose code the loader relocates in place is never released; the dynamic
    /// section is read up to its end marker, and an object without one is plain.
    #[test]
    fn objects_with_text_relocations_are_told_apart() {
        let header_of = |dynamic: &[[i64; 2]]| libc::Elf64_Phdr {
            p_type: 2,
            p_flags: 6,
            p_offset: 0,
            p_vaddr: dynamic.as_ptr() as u64,
            p_paddr: 0,
            p_filesz: 0,
            p_memsz: std::mem::size_of_val(dynamic) as u64,
            p_align: 8,
        };
        let relocated = |dynamic: &[[i64; 2]]| {
            // SAFETY: the "dynamic section" is the slice itself, at base 0.
            unsafe { has_text_relocations(0, &[header_of(dynamic)]) }
        };
        assert!(
            !relocated(&[[1, 7], [30, 0x8], [0, 0]]),
            "DT_FLAGS without DF_TEXTREL"
        );
        assert!(relocated(&[[1, 7], [30, 0x4 | 0x8], [0, 0]]), "DF_TEXTREL");
        assert!(relocated(&[[22, 0], [0, 0]]), "DT_TEXTREL");
        assert!(!relocated(&[[0, 0], [22, 0]]), "past the end marker");
        assert!(
            !relocated(&[[1, 7]]),
            "no end marker, bounded by the segment"
        );
        // SAFETY: no dynamic segment is read.
        assert!(!unsafe { has_text_relocations(0, &[]) }, "a static object");
    }

    /// A file the process maps itself is no loaded object: it may be unmapped, and its
    /// addresses reused, at any time, so it is never advised, however clean it reads in smaps.
    #[test]
    fn a_file_mapped_outside_the_loader_is_left_resident() {
        // Beside the test binary: a file system of files, where a TMPDIR under /dev (/dev/shm)
        // would make no candidate of it.
        let exe = std::env::current_exe().unwrap();
        let mut file = tempfile::tempfile_in(exe.parent().unwrap()).unwrap();
        std::io::Write::write_all(&mut file, &[7; 64 * 1024]).unwrap();
        let len = 64 * 1024;
        // SAFETY: a new read-only private mapping of a file this test holds open, unmapped below.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(start, libc::MAP_FAILED);
        let resident = || {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            releasable(&smaps)
                .iter()
                .find(|r| r.start == start as usize)
                .map(|r| r.resident_kb)
        };
        // Every page read just before smaps is: resident, so that a release would show.
        let touch = || {
            for offset in (0..len).step_by(4096) {
                // SAFETY: within the mapping made above, readable.
                let _ = unsafe { start.cast::<u8>().add(offset).read_volatile() };
            }
        };
        touch();
        let before = resident();
        release().unwrap();
        let after = resident();
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(start, len) };
        assert_eq!(before, Some(64), "a candidate by smaps alone, all resident");
        assert_eq!(after, Some(64), "still resident after the release");
    }

    /// Run alone in a child process of its own (this test binary, one test): in the shared
    /// process the other tests' threads fault code back in while this one measures.
    #[test]
    fn releasing_leaves_the_code_running_and_less_of_it_resident() {
        const ALONE: &str = "JOBFLEET_IDLE_MEMORY_TEST_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "idle_memory::tests::releasing_leaves_the_code_running_and_less_of_it_resident",
                    "--test-threads=1",
                ])
                .env(ALONE, "1")
                .status()
                .unwrap();
            assert!(status.success(), "the test alone: {status}");
            return;
        }
        let resident = || -> u64 {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            releasable(&smaps).iter().map(|r| r.resident_kb).sum()
        };
        let before = resident();
        assert!(before > 0, "a test binary has resident code");
        let released = release().unwrap();
        assert!(released > 0);
        // This thread's own code and the formatting below fault back in; the rest stays out.
        let after = resident();
        assert!(
            after < before,
            "resident {after} kB after, {before} kB before"
        );
        // Code that was released runs as before.
        assert_eq!(releasable(SMAPS).len(), 4, "parsing still works");
        assert_eq!(format!("{:?}", Some(41 + 1)), "Some(42)");
    }
}
