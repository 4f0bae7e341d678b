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
    // Always a pre_exec hook, so std forks rather than posix_spawn (a vfork): the kernel
    // carries the peak RSS of the memory a process execs away from into its own peak, and
    // after a vfork that memory is the whole agent's, so every small job reported the agent's
    // peak. A fork's copy holds only the agent's anonymous pages that are mapped at the time.
    // (Resetting the agent's peak first, `/proc/self/clear_refs`, and then posix_spawn was
    // tried: a `true` then reported the agent's whole current RSS, 13 MB, twice what a fork
    // reports; `security::agent_host` holds the line.)
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
    #[test]
    fn itoa_writes_decimal() {
        let mut buf = [0u8; 12];
        assert_eq!(super::itoa(0, &mut buf), b"0");
        let mut buf = [0u8; 12];
        assert_eq!(super::itoa(4_194_304, &mut buf), b"4194304");
    }
}
