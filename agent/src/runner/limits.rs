//! Resource limits per run: a cgroup (v2, or v1 controllers) nested under the agent's own
//! cgroup when the host lets us write there, `setrlimit` otherwise. Detected once at start.
//!
//! The child joins its cgroup before it runs anything: `spawn` writes its pid into cgroup.procs
//! files opened here in advance, from `pre_exec` (see `spawn.rs`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::protocol::Limits;

const CPU_PERIOD_US: u64 = 100_000;

#[derive(Debug, Clone)]
pub enum Mode {
    V2 {
        base: PathBuf,
    },
    V1 {
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
    },
    Rlimit,
    /// The run has no limits to hold: no cgroup, no rlimits.
    Unlimited,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::V2 { .. } => "cgroup_v2",
            Mode::V1 { .. } => "cgroup_v1",
            Mode::Rlimit => "rlimit",
            Mode::Unlimited => "none",
        }
    }
}

fn own_cgroups() -> Vec<(String, String)> {
    std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

/// Creates `dir` and checks we can make children in it.
fn usable(dir: &Path) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let probe = dir.join(format!("probe-{}", std::process::id()));
    let ok = std::fs::create_dir(&probe).is_ok();
    let _ = std::fs::remove_dir(&probe);
    ok
}

/// Finds where run cgroups can go: under the agent's own cgroup, in folder `parent_name`.
pub fn detect(parent_name: &str) -> Mode {
    detect_in(Path::new("/sys/fs/cgroup"), &own_cgroups(), parent_name)
}

/// `detect` below cgroup mount `root`, for a process whose `/proc/self/cgroup` lines are `own`
/// (controllers, path): a test points it at a fake tree.
fn detect_in(root: &Path, own: &[(String, String)], parent_name: &str) -> Mode {
    if root.join("cgroup.controllers").exists() {
        if let Some((_, path)) = own.iter().find(|(ctl, _)| ctl.is_empty()) {
            let base = root.join(path.trim_start_matches('/')).join(parent_name);
            if let Some(mode) = prepare_v2(&base) {
                return mode;
            }
        }
        return Mode::Rlimit;
    }
    let v1 = |controller: &str| -> Option<PathBuf> {
        let path = own
            .iter()
            .find(|(ctls, _)| ctls.split(',').any(|c| c == controller))
            .map(|(_, p)| p.clone())?;
        let dir = root
            .join(controller)
            .join(path.trim_start_matches('/'))
            .join(parent_name);
        usable(&dir).then_some(dir)
    };
    let memory = v1("memory");
    if memory.is_none() {
        return Mode::Rlimit;
    }
    Mode::V1 {
        cpu: v1("cpu"),
        cpuacct: v1("cpuacct"),
        memory,
        pids: v1("pids"),
    }
}

/// cgroup v2 forbids processes in inner nodes: the agent moves into a leaf `agent/` and runs
/// become its siblings, with the controllers enabled for them.
fn prepare_v2(base: &Path) -> Option<Mode> {
    if !usable(base) {
        return None;
    }
    let leaf = base.join("agent");
    std::fs::create_dir_all(&leaf).ok()?;
    std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string()).ok()?;
    // Enabling may partly fail (a controller not delegated); what was enabled still applies.
    for controller in ["+cpu", "+memory", "+pids"] {
        let _ = std::fs::write(base.join("cgroup.subtree_control"), controller);
    }
    Some(Mode::V2 {
        base: base.to_owned(),
    })
}

/// A run's cgroup(s): created before spawn, removed after the run.
#[derive(Debug)]
pub struct RunCgroup {
    dirs: Vec<PathBuf>,
    /// cgroup.procs of each dir, opened before fork so the child can join without allocating.
    pub procs: Vec<File>,
    mode: Mode,
}

fn write(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(dir.join(file))?
        .write_all(value.as_bytes())
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_key(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

/// Usage read from the cgroup after the run.
#[derive(Debug, Default, Clone, Copy)]
pub struct CgroupUsage {
    pub cpu_ms: Option<u64>,
    pub max_rss_kb: Option<u64>,
    pub oom_killed: bool,
}

impl RunCgroup {
    /// Creates the run's cgroup(s) with `limits` applied. `None` in rlimit mode.
    pub fn create(mode: &Mode, run_id: i64, limits: &Limits) -> std::io::Result<Option<RunCgroup>> {
        let name = format!("run-{run_id}");
        let mut dirs = Vec::new();
        match mode {
            Mode::Rlimit | Mode::Unlimited => return Ok(None),
            Mode::V2 { base } => {
                let dir = base.join(&name);
                std::fs::create_dir_all(&dir)?;
                if let Some(cpu) = limits.cpu {
                    write(
                        &dir,
                        "cpu.max",
                        &format!("{} {CPU_PERIOD_US}", (cpu * CPU_PERIOD_US as f64) as u64),
                    )?;
                }
                if let Some(mb) = limits.memory_mb {
                    write(&dir, "memory.max", &(mb as u64 * 1024 * 1024).to_string())?;
                    let _ = write(&dir, "memory.swap.max", "0");
                }
                if let Some(pids) = limits.pids {
                    write(&dir, "pids.max", &pids.to_string())?;
                }
                dirs.push(dir);
            }
            Mode::V1 {
                cpu,
                cpuacct,
                memory,
                pids,
            } => {
                let mut make = |base: &Option<PathBuf>| -> std::io::Result<Option<PathBuf>> {
                    let Some(base) = base else { return Ok(None) };
                    let dir = base.join(&name);
                    if !dirs.contains(&dir) {
                        std::fs::create_dir_all(&dir)?;
                        dirs.push(dir.clone());
                    }
                    Ok(Some(dir))
                };
                if let Some(dir) = make(memory)?
                    && let Some(mb) = limits.memory_mb
                {
                    let bytes = (mb as u64 * 1024 * 1024).to_string();
                    write(&dir, "memory.limit_in_bytes", &bytes)?;
                    // Without these the kernel swaps instead of enforcing the limit.
                    let _ = write(&dir, "memory.memsw.limit_in_bytes", &bytes);
                    let _ = write(&dir, "memory.swappiness", "0");
                }
                // Each v1 hierarchy joined is one more migration, and the kernel makes every
                // migration wait for an RCU grace period (milliseconds). Join cpu/cpuacct and
                // pids only when the run has that limit; CPU time then comes from wait4.
                if let Some(cores) = limits.cpu {
                    if let Some(dir) = make(cpu)? {
                        write(&dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                        write(
                            &dir,
                            "cpu.cfs_quota_us",
                            &((cores * CPU_PERIOD_US as f64) as u64)
                                .max(1000)
                                .to_string(),
                        )?;
                    }
                    make(cpuacct)?;
                }
                if let Some(max) = limits.pids
                    && let Some(dir) = make(pids)?
                {
                    write(&dir, "pids.max", &max.to_string())?;
                }
            }
        }
        let procs = dirs
            .iter()
            .map(|d| OpenOptions::new().write(true).open(d.join("cgroup.procs")))
            .collect::<Result<_, _>>()?;
        Ok(Some(RunCgroup {
            dirs,
            procs,
            mode: mode.clone(),
        }))
    }

    /// CPU time, peak memory and whether the OOM killer struck.
    pub fn usage(&self) -> CgroupUsage {
        let mut usage = CgroupUsage::default();
        for dir in &self.dirs {
            match self.mode {
                Mode::V2 { .. } => {
                    usage.cpu_ms =
                        read_key(&dir.join("cpu.stat"), "usage_usec").map(|us| us / 1000);
                    usage.max_rss_kb = read_u64(&dir.join("memory.peak")).map(|b| b / 1024);
                    usage.oom_killed =
                        read_key(&dir.join("memory.events"), "oom_kill").is_some_and(|n| n > 0);
                }
                _ => {
                    if let Some(ns) = read_u64(&dir.join("cpuacct.usage")) {
                        usage.cpu_ms = Some(ns / 1_000_000);
                    }
                    if let Some(bytes) = read_u64(&dir.join("memory.max_usage_in_bytes")) {
                        usage.max_rss_kb = Some(bytes / 1024);
                    }
                    if read_key(&dir.join("memory.oom_control"), "oom_kill").is_some_and(|n| n > 0)
                    {
                        usage.oom_killed = true;
                    }
                }
            }
        }
        usage
    }

    /// Kills whatever is left in the cgroup and removes it.
    pub fn remove(self) {
        for dir in &self.dirs {
            if let Err(e) = empty_and_remove(dir) {
                tracing::warn!(cgroup = %dir.display(), error = %e, "Cannot remove a run's cgroup");
            }
        }
    }
}

/// Kills every process in the cgroup `dir` (waiting up to 2 s for them to go) and removes it.
fn empty_and_remove(dir: &Path) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Polling is all cgroup v1 offers here (no cgroup.events); the processes are SIGKILLed.
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_dir(dir)
}

impl Mode {
    /// The agent's folder in each hierarchy (`<own cgroup>/<cgroup_parent>/agent-<port>`).
    fn agent_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = match self {
            Mode::V2 { base } => vec![base.clone()],
            Mode::V1 {
                cpu,
                cpuacct,
                memory,
                pids,
            } => [cpu, cpuacct, memory, pids]
                .into_iter()
                .flatten()
                .cloned()
                .collect(),
            Mode::Rlimit | Mode::Unlimited => Vec::new(),
        };
        dirs.dedup();
        dirs
    }

    /// Removes run cgroups a previous agent on this port left behind (killed, or crashed),
    /// killing what still runs in them: their runs are lost either way, and the admin retries
    /// them. Returns how many went.
    pub fn remove_stale_runs(&self) -> usize {
        let mut removed = 0;
        for dir in self.agent_dirs() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let is_run = entry.file_name().to_string_lossy().starts_with("run-");
                if is_run && entry.path().is_dir() {
                    match empty_and_remove(&entry.path()) {
                        Ok(()) => removed += 1,
                        Err(e) => {
                            tracing::warn!(cgroup = %entry.path().display(), error = %e, "Cannot remove a stale run cgroup");
                        }
                    }
                }
            }
        }
        removed
    }

    /// Removes the agent's folders on a graceful exit (after the runs ended), and the
    /// `cgroup_parent` folder above them when no other agent uses it.
    pub fn remove_agent_dirs(&self) {
        self.remove_stale_runs();
        for dir in self.agent_dirs() {
            if let Mode::V2 { .. } = self {
                // The agent sits in the leaf `agent/`: move back to where it started first.
                if let Some(start) = dir.parent().and_then(Path::parent) {
                    let _ =
                        std::fs::write(start.join("cgroup.procs"), std::process::id().to_string());
                }
                let _ = std::fs::remove_dir(dir.join("agent"));
            }
            if let Err(e) = std::fs::remove_dir(&dir) {
                tracing::warn!(cgroup = %dir.display(), error = %e, "Cannot remove the agent's cgroup");
            }
            if let Some(parent) = dir.parent() {
                // Fails while another agent's folder is in it, which is what we want.
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A kernel makes a cgroup's control files when the folder is made; a fake tree has to.
    fn fake_cgroup(dir: &Path, files: &[&str]) {
        std::fs::create_dir_all(dir).unwrap();
        for file in files {
            std::fs::write(dir.join(file), "").unwrap();
        }
    }

    /// The cgroup v2 path (this CI host is cgroup v1): detection below the agent's own cgroup,
    /// the `agent/` leaf, the controllers enabled for runs, a run's limits, its usage, removal.
    #[test]
    fn cgroup_v2_on_a_fake_tree() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        std::fs::write(root.join("cgroup.controllers"), "cpu memory pids").unwrap();
        let own = vec![(
            String::new(),
            "/system.slice/jobfleet-agent.service".to_owned(),
        )];
        let mode = detect_in(root, &own, "jobfleet");
        let base = root.join("system.slice/jobfleet-agent.service/jobfleet");
        match &mode {
            Mode::V2 { base: found } => assert_eq!(found, &base),
            other => panic!("not v2: {other:?}"),
        }
        assert_eq!(mode.name(), "cgroup_v2");
        // The agent moved itself into the leaf (no processes in inner nodes) and enabled the
        // controllers for its children; the last write is what a fake file keeps.
        assert_eq!(
            std::fs::read_to_string(base.join("agent/cgroup.procs")).unwrap(),
            std::process::id().to_string()
        );
        assert_eq!(
            std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap(),
            "+pids"
        );

        let run = base.join("run-7");
        fake_cgroup(
            &run,
            &[
                "cgroup.procs",
                "cpu.max",
                "memory.max",
                "memory.swap.max",
                "pids.max",
            ],
        );
        let limits = Limits {
            cpu: Some(0.5),
            memory_mb: Some(256),
            pids: Some(64),
        };
        let cgroup = RunCgroup::create(&mode, 7, &limits).unwrap().unwrap();
        let read = |file: &str| std::fs::read_to_string(run.join(file)).unwrap();
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(read("memory.max"), (256u64 * 1024 * 1024).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "64");
        assert_eq!(cgroup.procs.len(), 1, "the run joins one cgroup");

        std::fs::write(run.join("cpu.stat"), "usage_usec 12345\nuser_usec 10000\n").unwrap();
        std::fs::write(run.join("memory.peak"), "1048576\n").unwrap();
        std::fs::write(run.join("memory.events"), "low 0\noom 1\noom_kill 1\n").unwrap();
        let usage = cgroup.usage();
        assert_eq!(
            (usage.cpu_ms, usage.max_rss_kb, usage.oom_killed),
            (Some(12), Some(1024), true)
        );

        // A missing control file (a controller not delegated) is an error, not a silent run
        // without its limit.
        fake_cgroup(&base.join("run-8"), &["cgroup.procs"]);
        assert!(RunCgroup::create(&mode, 8, &limits).is_err());

        // A stale run of a previous agent is removed at start (a kernel's rmdir ignores the
        // control files; a fake folder must be emptied first).
        for dir in [&run, &base.join("run-8")] {
            for entry in std::fs::read_dir(dir).unwrap() {
                std::fs::remove_file(entry.unwrap().path()).unwrap();
            }
        }
        drop(cgroup);
        assert_eq!(mode.remove_stale_runs(), 2);
        assert!(!run.exists());
    }

    /// Without a writable cgroup v2 subtree the agent falls back to rlimits.
    #[test]
    fn an_unwritable_v2_tree_falls_back_to_rlimits() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "").unwrap();
        let own = vec![(String::new(), "/".to_owned())];
        let blocker = root.path().join("jobfleet");
        // A file where the agent's folder should go: it cannot be made.
        std::fs::write(&blocker, "").unwrap();
        assert_eq!(detect_in(root.path(), &own, "jobfleet").name(), "rlimit");
        assert_eq!(detect_in(root.path(), &[], "jobfleet").name(), "rlimit");
    }
}
