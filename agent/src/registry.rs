//! Registration: a heartbeat to the admins every interval with host metrics, and a
//! deregistration on shutdown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::admin_client::AdminClient;
use crate::host::{Host, hostname};
use crate::protocol::{REGISTRY_GROUP_EXECUTOR, RegistryParam, admin_path};
use crate::runner::Runner;

pub struct Registration {
    pub client: Arc<AdminClient>,
    pub group: String,
    pub advertise: String,
    pub data_dir: PathBuf,
    pub runner: Arc<Runner>,
    /// This process's id: a new one tells the admin that the previous one's runs are gone.
    pub instance_id: String,
    /// `push`, `connect` or `auto`, told to the admin.
    pub mode: &'static str,
    pub labels: crate::protocol::labels::Labels,
}

impl Registration {
    fn param(&self, host: &mut Host) -> RegistryParam {
        let (held_runs, accepted_through) = self.runner.held();
        RegistryParam {
            registry_group: REGISTRY_GROUP_EXECUTOR.into(),
            registry_key: self.group.clone(),
            registry_value: self.advertise.clone(),
            agent_version: Some(env!("CARGO_PKG_VERSION").into()),
            hostname: Some(hostname()),
            metrics: Some(host.sample(&self.data_dir, self.runner.running() as u32)),
            labels: Some(self.labels.clone()),
            limits_mode: Some(self.runner.limits_mode().into()),
            instance_id: Some(self.instance_id.clone()),
            held_runs: Some(held_runs),
            accepted_through: Some(accepted_through),
            run_as: Some(self.runner.jobs_user().to_owned()),
            mode: Some(self.mode.to_owned()),
        }
    }

    /// Beats until the task is dropped.
    pub async fn beat_forever(self: Arc<Self>, interval: Duration) {
        let mut host = Host::new();
        let mut failing = false;
        loop {
            let param = self.param(&mut host);
            match self.client.post(admin_path::REGISTRY, &param).await {
                Ok(admin) if failing => {
                    tracing::info!(%admin, "Registered again");
                    failing = false;
                }
                Ok(_) => {}
                Err(e) if !failing => {
                    tracing::warn!(error = %e, "No admin accepted the heartbeat");
                    failing = true;
                }
                Err(_) => {}
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// One heartbeat by HTTP to the admin `base` (before connecting to it).
    pub async fn beat_at(&self, base: &str) -> Result<(), String> {
        let param = self.param(&mut Host::new());
        self.client
            .post_to(base, admin_path::REGISTRY, &param)
            .await
    }

    pub async fn deregister(&self) {
        let param = self.param(&mut Host::new());
        if let Err(e) = self.client.post(admin_path::REGISTRY_REMOVE, &param).await {
            tracing::warn!(error = %e, "Could not deregister");
        }
    }
}
