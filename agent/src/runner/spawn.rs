//! Starting a run's process: its own process group, output into the run's output pipe, the job's
//! context in the environment and arguments, and — between fork and exec — joining the run's
//! cgroup, applying rlimits and dropping to the run-as user.
#![allow(
    unsafe_code,
    reason = "pre_exec and wait4 need libc between fork and exec and to reap with rusage"
)]

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::protocol::Limits;

/// What the child needs between fork and exec, computed beforehand: nothing may allocate there.
pub struct Isolation {
    /// Raw fds of cgroup.procs files to write our pid into.
    pub cgroup_procs: Vec<i32>,
    /// (resource, limit) pairs for setrlimit, when no cgroup holds the limits.
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// uid/gid to switch to.
    pub user: Option<(u32, u32)>,
}

impl Isolation {
    pub fn rlimits_for(limits: &Limits) -> Vec<(libc::__rlimit_resource_t, u64)> {
        let mut out = Vec::new();
        if let Some(mb) = limits.memory_mb {
            out.push((libc::RLIMIT_AS, mb as u64 * 1024 * 1024));
        }
        if let Some(pids) = limits.pids {
            out.push((libc::RLIMIT_NPROC, pids as u64));
        }
        out
    }
}

/// Writes `n` in decimal into `buf` without allocating; returns the used tail.
fn itoa(mut n: u32, buf: &mut [u8; 12]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

pub struct Spec<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a BTreeMap<String, String>,
    pub cwd: &'a Path,
    /// The write end of the run's output pipe (stdout and stderr).
    pub output: &'a File,
}

/// Spawns the process as the leader of a new process group.
pub fn spawn(spec: &Spec<'_>, isolation: Isolation) -> std::io::Result<std::process::Child> {
    let mut command = Command::new(spec.program);
    command
        .args(spec.args)
        .env_clear()
        .envs(spec.env)
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(spec.output.try_clone()?))
        .stderr(Stdio::from(spec.output.try_clone()?))
        .process_group(0);
    let Isolation {
        cgroup_procs,
        rlimits,
        user,
    } = isolation;
    // The kernel carries the peak RSS of the memory a process execs away from into its own
    // peak. After posix_spawn (a vfork) that memory is the agent's, so a run would report the
    // agent's peak unless the agent's peak is first reset to its current size (what a fork's
    // copy would hold): then posix_spawn, which copies no page tables and leaves the agent's
    // pages writable. A fork cost the agent 1.5-5 ms of CPU per run (copying its page tables,
    // then a fault on each page it wrote afterwards). A run that needs the hook below, or a
    // host where the peak cannot be reset, forks.
    let needs_hook = !cgroup_procs.is_empty() || !rlimits.is_empty() || user.is_some();
    if !needs_hook && peak_rss_reset() {
        return command.spawn();
    }
    // SAFETY: the closure runs in the child between fork and exec. It only calls async-signal-safe
    // libc functions (getpid, write, setrlimit, setgroups, setgid, setuid) on data prepared before
    // the fork, and allocates nothing.
    unsafe {
        command.pre_exec(move || {
            let mut buf = [0u8; 12];
            let pid = itoa(libc::getpid() as u32, &mut buf);
            for fd in &cgroup_procs {
                if libc::write(*fd, pid.as_ptr().cast(), pid.len()) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (resource, limit) in &rlimits {
                let value = libc::rlimit {
                    rlim_cur: *limit,
                    rlim_max: *limit,
                };
                if libc::setrlimit(*resource, &value) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some((uid, gid)) = user {
                let groups = [gid];
                if libc::setgroups(1, groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Resets this process's peak RSS to its current RSS (`/proc/self/clear_refs`, value 5), so a
/// child spawned next inherits no more than what the agent holds now. Whether it could.
fn peak_rss_reset() -> bool {
    use std::os::unix::fs::FileExt;
    static CLEAR_REFS: std::sync::OnceLock<Option<File>> = std::sync::OnceLock::new();
    CLEAR_REFS
        .get_or_init(|| {
            std::fs::OpenOptions::new()
                .write(true)
                .open("/proc/self/clear_refs")
                .ok()
        })
        .as_ref()
        .is_some_and(|file| file.write_at(b"5", 0).is_ok())
}

/// How a process ended, with the kernel's account of its resource use.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_ms: u64,
    pub max_rss_kb: u64,
}

/// Blocks until `pid` exits, calls `before_reap` while it is still a zombie (its pid cannot
/// be reused yet), then reaps it with its rusage, holding what `before_reap` returned until then.
pub fn wait<G>(pid: i32, before_reap: impl FnOnce() -> G) -> std::io::Result<Exit> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into the local we pass, which outlives the call.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    let held = before_reap();
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 writes only into the two locals we pass, which outlive the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    drop(held);
    let cpu_ms = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) as u64 * 1000
        + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) as u64 / 1000;
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    };
    Ok(Exit {
        code,
        signal,
        cpu_ms,
        max_rss_kb: usage.ru_maxrss as u64,
    })
}

/// Raw fd of an open file, for `Isolation::cgroup_procs`.
pub fn raw_fd(file: &File) -> i32 {
    file.as_raw_fd()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    // A run without limits is posix_spawned from the agent's address space; its peak RSS must
    // still be its own, not the peak the agent once reached.
    #[test]
    fn a_runs_peak_rss_is_not_the_agents_past_peak() {
        let mut big = vec![0u8; 512 * 1024 * 1024];
        for page in big.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&big);
        drop(big);
        let output = tempfile::tempfile().unwrap();
        let dir = std::env::temp_dir();
        let spec = Spec {
            program: Path::new("/bin/true"),
            args: &[],
            env: &BTreeMap::new(),
            cwd: &dir,
            output: &output,
        };
        let isolation = Isolation {
            cgroup_procs: Vec::new(),
            rlimits: Vec::new(),
            user: None,
        };
        let child = spawn(&spec, isolation).unwrap();
        let exit = wait(child.id() as i32, || ()).unwrap();
        assert_eq!(exit.code, Some(0));
        assert!(
            exit.max_rss_kb < 256 * 1024,
            "a run reported the test process's past peak: {} kB",
            exit.max_rss_kb
        );
    }

    #[test]
    fn itoa_writes_decimal() {
        let mut buf = [0u8; 12];
        assert_eq!(super::itoa(0, &mut buf), b"0");
        let mut buf = [0u8; 12];
        assert_eq!(super::itoa(4_194_304, &mut buf), b"4194304");
    }
}
