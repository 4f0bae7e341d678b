//! Starting a run's process: its own process group, output into the run's output pipe, the job's
//! context in the environment and arguments, and — before exec — joining the run's cgroup,
//! applying rlimits and dropping to the run-as user; then waiting for it with its rusage.
#![allow(
    unsafe_code,
    reason = "pidfd_open, waitid and wait4 need libc to watch and reap with rusage"
)]

use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::spawner;
use super::start_marks::Mark;
use crate::protocol::Limits;

/// What the child needs before exec, computed beforehand: nothing may allocate there.
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

pub struct Spec<'a> {
    pub program: &'a Path,
    /// The program's name first.
    pub argv: &'a spawner::Strings,
    /// `KEY=value` entries.
    pub env: &'a spawner::Strings,
    pub cwd: &'a Path,
    /// The write end of the run's output pipe (stdout and stderr). The request takes it: once
    /// the process started, only the job holds it, and the copier sees the output end when the
    /// job's last process closes it.
    pub output: File,
    /// The start marks file, and the mark the process writes into it as it starts
    /// (`start_marks`).
    pub start_mark: Option<(Arc<File>, Mark)>,
}

/// The spawner's request for the process, the leader of a new process group (see `spawner` for
/// why not a fork of the agent); `contain::Containment::spawn` has it started.
pub fn request(spec: Spec<'_>, isolation: &Isolation) -> std::io::Result<spawner::Queued> {
    let nul = |what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the {what} contains a NUL byte"),
        )
    };
    let program = CString::new(spec.program.as_os_str().as_bytes()).map_err(|_| nul("program"))?;
    let cwd = CString::new(spec.cwd.as_os_str().as_bytes()).map_err(|_| nul("folder"))?;
    if spec.argv.has_nul() {
        return Err(nul("arguments"));
    }
    if spec.env.has_nul() {
        return Err(nul("environment"));
    }
    let request = spawner::Request {
        program: &program,
        argv: spec.argv,
        env: spec.env,
        cwd: &cwd,
        output: spec.output.as_raw_fd(),
        start_mark: spec
            .start_mark
            .as_ref()
            .map(|(marks, mark)| (marks.as_raw_fd(), *mark)),
        cgroup_procs: &isolation.cgroup_procs,
        rlimits: &isolation.rlimits,
        user: isolation.user,
    };
    spawner::Queued::holding_own(
        &request,
        spec.output.into(),
        spec.start_mark.map(|(marks, _)| marks),
    )
}

/// How a process ended, with the kernel's account of its resource use.
#[derive(Debug, Clone, Copy)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_ms: u64,
    pub max_rss_kb: u64,
}

/// Becomes readable once `pid` (a child of this process) has exited, without reaping it: a
/// pidfd on the runtime's reactor, so that waiting for a run takes no thread of its own.
///
/// # Errors
/// When the kernel has no pidfds (before Linux 5.3): the caller then waits on a blocking thread.
pub fn exit_watch(pid: i32) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just returned to us and nothing else owns it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as std::os::fd::RawFd) };
    // SAFETY: the AsyncFd owns the descriptor, so it stays open and the same for its lifetime.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}

/// Blocks until `pid` exits, calls `before_reap` while it is still a zombie (its pid cannot
/// be reused yet), then reaps it with its rusage, holding what `before_reap` returned until then.
pub fn wait<G>(pid: i32, before_reap: impl FnOnce() -> G) -> std::io::Result<Exit> {
    loop {
        match exited_unreaped(pid, 0) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    reap(pid, before_reap)
}

/// `reap` if `pid` has exited already, without waiting; None while it runs (or when the look
/// fails: the caller then waits as it would have).
pub fn reap_if_exited<G>(
    pid: i32,
    before_reap: impl FnOnce() -> G,
) -> Option<std::io::Result<Exit>> {
    matches!(exited_unreaped(pid, libc::WNOHANG), Ok(true)).then(|| reap(pid, before_reap))
}

/// Whether `pid` has exited, leaving it a zombie: `waitid` with `WNOWAIT` and `flags`
/// (`WNOHANG` not to wait for it).
fn exited_unreaped(pid: i32, flags: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: an all-zero siginfo_t is a valid value of this plain C struct; waitid leaves its
    // pid zero when, with WNOHANG, no child of the kind is waitable.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid writes only into the local we pass, which outlives the call.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT | flags,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: waitid filled the siginfo for a child's exit, or left it zeroed.
    Ok(unsafe { info.si_pid() } == pid)
}

/// `wait` for a `pid` known to have exited (its pidfd turned readable, or `reap_if_exited` saw
/// it): the look that waits is skipped.
pub fn reap<G>(pid: i32, before_reap: impl FnOnce() -> G) -> std::io::Result<Exit> {
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

    #[test]
    #[allow(
        clippy::zombie_processes,
        reason = "reaping the child is what the test does, through the function it tests"
    )]
    fn an_exit_is_reaped_without_waiting_only_once_it_happened() {
        // It exits by itself a second from now: a look that waited, or reaped a process still
        // running, would return its exit from the first call.
        let child = std::process::Command::new("sh")
            .args(["-c", "sleep 1; exit 7"])
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let mut prepared = 0;
        assert!(
            reap_if_exited(pid, || prepared += 1).is_none(),
            "a running process is not reaped"
        );
        assert_eq!(prepared, 0, "nor prepared for a reap");
        let started = std::time::Instant::now();
        let exit = loop {
            if let Some(exit) = reap_if_exited(pid, || prepared += 1) {
                break exit.unwrap();
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(30));
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!((exit.code, exit.signal, prepared), (Some(7), None, 1));
        assert!(
            reap_if_exited(pid, || prepared += 1).is_none(),
            "reaped once: nothing is left to reap"
        );
        assert_eq!(prepared, 1);
    }
}
