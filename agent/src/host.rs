//! Host metrics for heartbeats, from sysinfo.

use std::path::Path;

use crate::protocol::HostMetrics;

pub struct Host {
    /// `None` when sysinfo cannot read this host; heartbeats then carry zeros.
    system: Option<sysinfo::System>,
}

impl Default for Host {
    fn default() -> Self {
        Self::new()
    }
}

impl Host {
    pub fn new() -> Self {
        Self {
            system: sysinfo::System::new().ok(),
        }
    }

    /// Samples CPU, memory, load and the free space of the disk holding `data_dir`.
    pub fn sample(&mut self, data_dir: &Path, running: u32) -> HostMetrics {
        let load1 = sysinfo::System::load_average().map_or(0.0, |l| l.one);
        let mut metrics = HostMetrics {
            load1,
            disk_free_mb: disk_free_mb(data_dir),
            running,
            ..HostMetrics::default()
        };
        if let Some(system) = &mut self.system {
            system.refresh_cpu_usage();
            system.refresh_memory();
            metrics.cpu_pct = f64::from(system.global_cpu_usage());
            metrics.mem_used_mb = system.used_memory() / 1024 / 1024;
            metrics.mem_total_mb = system.total_memory() / 1024 / 1024;
        }
        metrics
    }
}

fn disk_free_mb(path: &Path) -> u64 {
    nix::sys::statvfs::statvfs(path).map_or(0, |s| {
        s.blocks_available() * s.fragment_size() / 1024 / 1024
    })
}

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}
