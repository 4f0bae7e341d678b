//! Agents behind a real network boundary (issue 14): the test makes a network namespace joined
//! to the host by a veth pair only, starts the admin on the host side of the pair and agents
//! inside the namespace (`ip netns exec`), and shows that agents which dial out get their runs
//! although the admin cannot reach them.
//!
//! Needs root (`CAP_NET_ADMIN`): without it the test says so and skips; any other failure to
//! build the namespace fails the test.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::agent_connect::{connected_row, listening_sockets};
use crate::support::admin_proc::{AdminProc, call, http_client};
use crate::support::{agent_binary, both_backends, free_port, test_db, wait_for};

const RUN_WITHIN: Duration = Duration::from_secs(30);

/// Runs `ip ARGS`; returns its output whatever the status.
fn ip(args: &[&str]) -> Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running `ip {}`: {e}", args.join(" ")))
}

/// Runs `ip ARGS` and fails the test unless it succeeds.
fn ip_ok(args: &[&str]) {
    let out = ip(args);
    assert!(
        out.status.success(),
        "`ip {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace and the veth pair joining it to the host, both removed on drop (also
/// when the test fails). The host side is `10.213.N.1/30`, the namespace side `10.213.N.2/30`
/// with a default route via the host side: the namespace reaches the host and nothing else.
struct Netns {
    name: String,
    host_if: String,
    ns_if: String,
    subnet: u8,
}

impl Netns {
    /// Makes the namespace, or `None` when this process may not (not root).
    fn create() -> Option<Self> {
        // The pid keeps names apart from other test processes, the counter from other tests
        // of this one.
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let name = format!("jfns{tag}");
        let out = ip(&["netns", "add", &name]);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if err.contains("Operation not permitted") || err.contains("Permission denied") {
                return None;
            }
            panic!("`ip netns add {name}` failed: {err}");
        }
        let mut ns = Self {
            name,
            // Interface names have at most 15 bytes: "jf" + pid (7) + "x" + seq + side.
            host_if: format!("jf{tag}h"),
            ns_if: format!("jf{tag}n"),
            subnet: 0,
        };
        // From here on a failure panics and `Drop` removes what was made.
        ip_ok(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns.ns_if,
        ]);
        ip_ok(&["link", "set", &ns.ns_if, "netns", &ns.name]);
        {
            // Tests of this process pick and take a subnet one at a time.
            static PICKING: Mutex<()> = Mutex::new(());
            let _picking = PICKING
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ns.subnet = free_subnet();
            let host_cidr = format!("{}/30", ns.host_ip());
            ip_ok(&["addr", "add", &host_cidr, "dev", &ns.host_if]);
        }
        let ns_cidr = format!("{}/30", ns.ns_ip());
        let host_ip = ns.host_ip().to_string();
        ip_ok(&["link", "set", &ns.host_if, "up"]);
        ip_ok(&["-n", &ns.name, "addr", "add", &ns_cidr, "dev", &ns.ns_if]);
        ip_ok(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ip_ok(&["-n", &ns.name, "link", "set", &ns.ns_if, "up"]);
        ip_ok(&["-n", &ns.name, "route", "add", "default", "via", &host_ip]);
        Some(ns)
    }

    fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 1)
    }

    fn ns_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, 2)
    }

    /// `ip netns exec NAME <agent binary> --allow-root` with the settings of a test agent of
    /// `group` dialling `admin`, plus `extra`; it execs, so the child is the agent itself.
    fn agent(
        &self,
        admin: &str,
        group: &str,
        data_dir: &std::path::Path,
        extra: &[(&str, &str)],
    ) -> NsAgent {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .arg(agent_binary())
            .arg("--allow-root")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("JOBFLEET_AGENT_ADMINS", admin)
            .env("JOBFLEET_AGENT_GROUP", group)
            .env("JOBFLEET_AGENT_TOKEN", "test-agent-token")
            .env("JOBFLEET_AGENT_DATA_DIR", data_dir)
            .env("JOBFLEET_AGENT_HEARTBEAT_INTERVAL_S", "1")
            .env("RUST_LOG", "warn")
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        NsAgent(child)
    }
}

/// The first `N` (from one derived from the pid) no host address of `10.213.N.0/30` uses, so
/// neither a concurrent run nor one killed before its clean-up is in the way.
fn free_subnet() -> u8 {
    let out = ip(&["-o", "-4", "addr", "show"]);
    let used = String::from_utf8_lossy(&out.stdout).into_owned();
    let start = std::process::id() % 256;
    (0..256)
        .map(|i| u8::try_from((start + i) % 256).unwrap())
        .find(|n| !used.contains(&format!("10.213.{n}.")))
        .expect("a free 10.213.N.0/30")
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace destroys its end of the pair and with it the host end; the
        // explicit delete covers a pair whose end never moved into the namespace.
        let _ = ip(&["netns", "del", &self.name]);
        let _ = ip(&["link", "del", &self.host_if]);
    }
}

/// An agent process inside the namespace, killed on drop.
struct NsAgent(Child);

impl Drop for NsAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for the live agent of `app_name` in `mode` holding a connection to `admin`.
async fn connected_agent(
    client: &reqwest::Client,
    admin: &AdminProc,
    token: &str,
    app_name: &str,
    mode: &str,
) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("a {mode} agent of {app_name} to connect"),
        || async {
            let agents = call(
                client,
                "GET",
                format!("{}/api/v1/agents", admin.base),
                token,
                Value::Null,
            )
            .await;
            connected_row(&agents, app_name, mode)
        },
    )
    .await
}

/// Creates a shell job in `group` running `command`, triggers it and waits for its end;
/// returns the finished run and its log as the admin reads it from the agent.
async fn run_shell(
    client: &reqwest::Client,
    admin: &AdminProc,
    token: &str,
    group: i64,
    command: &str,
) -> (Value, String) {
    let api = |path: String| format!("{}/api/v1/{path}", admin.base);
    let job = call(
        client,
        "POST",
        api("jobs".into()),
        token,
        json!({"group_id": group, "name": "netns", "schedule": {"type": "none"},
               "handler": {"type": "shell", "command": command}}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let run = call(
        client,
        "POST",
        api(format!("jobs/{job}/trigger")),
        token,
        json!({}),
    )
    .await;
    let id = run["id"].as_i64().unwrap_or_else(|| panic!("{run}"));
    let done = wait_for(RUN_WITHIN, &format!("run {id} to finish"), || async {
        let run = call(client, "GET", api(format!("runs/{id}")), token, Value::Null).await;
        let status = run["status"].as_str().unwrap_or_default();
        (status != "pending" && status != "running").then_some(run)
    })
    .await;
    let log = call(
        client,
        "GET",
        api(format!("runs/{id}/log?from_line=1")),
        token,
        Value::Null,
    )
    .await;
    assert_eq!(log["is_end"], true, "a short log fits one page: {log}");
    (done, log["content"].as_str().unwrap().to_owned())
}

async fn agents_in_a_namespace_get_their_runs_over_their_connections(mysql: bool) {
    let Some(ns) = Netns::create() else {
        eprintln!(
            "SKIPPED agents_in_a_namespace_get_their_runs_over_their_connections: \
             `ip netns add` needs root (CAP_NET_ADMIN), which this process lacks"
        );
        return;
    };
    let db = test_db(mysql).await;
    // The admin listens on the host end of the pair only: the namespace's one way out.
    let base = format!("http://{}:{}", ns.host_ip(), free_port());
    let admin = AdminProc::start_on(&db.url_string(), &base, &[]);
    let client = http_client();
    admin.ready(&client).await;
    let token = admin.login(&client).await;
    let dir = tempfile::tempdir().unwrap();

    // A connect agent: listens on nothing, dials the admin across the boundary.
    let g_connect = admin.group(&client, &token, "ns-connect").await;
    let connect = ns.agent(
        &admin.base,
        "ns-connect",
        &dir.path().join("connect"),
        &[("JOBFLEET_AGENT_MODE", "connect")],
    );
    let row = connected_agent(&client, &admin, &token, "ns-connect", "connect").await;
    assert!(
        row["address"].as_str().unwrap().starts_with("conn://"),
        "{row}"
    );
    // The agent's own view of its namespace's sockets: it listens on nothing.
    assert!(
        listening_sockets(connect.0.id()).is_empty(),
        "a connect agent listens on nothing"
    );

    // An auto agent that advertises its namespace address but listens only on the
    // namespace's loopback: the admin cannot dial it (no firewall tool on this machine, so
    // the boundary is "nothing listens there" rather than dropped packets).
    let g_auto = admin.group(&client, &token, "ns-auto").await;
    let port = free_port();
    let advertised = format!("http://{}:{port}/", ns.ns_ip());
    let _auto = ns.agent(
        &admin.base,
        "ns-auto",
        &dir.path().join("auto"),
        &[
            ("JOBFLEET_AGENT_MODE", "auto"),
            ("JOBFLEET_AGENT_LISTEN", &format!("127.0.0.1:{port}")),
            ("JOBFLEET_AGENT_ADVERTISE", &advertised),
        ],
    );
    let row = connected_agent(&client, &admin, &token, "ns-auto", "auto").await;
    assert_eq!(row["address"], advertised.as_str(), "{row}");
    // The veth routes to the namespace, whose kernel answers that nothing listens at the
    // advertised address (refused, not timed out: the boundary is crossed, the port is shut).
    let dial = TcpStream::connect_timeout(
        &SocketAddr::from((ns.ns_ip(), port)),
        Duration::from_secs(5),
    );
    assert_eq!(
        dial.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "the host cannot reach the auto agent's advertised address"
    );

    // A shell job on each agent runs inside the namespace, and its log comes back through
    // the admin: the namespace's address, not the host's, is the job's only global one.
    let show_ip = "ip -o -4 addr show scope global | awk '{print $4}'";
    let ns_cidr = format!("{}/30\n", ns.ns_ip());
    for (group, what) in [(g_connect, "connect"), (g_auto, "auto")] {
        let (run, log) = run_shell(&client, &admin, &token, group, show_ip).await;
        assert_eq!(run["status"], "succeeded", "{what} agent: {run}");
        assert_eq!(log, ns_cidr, "{what} agent's job ran inside the namespace");
    }
}
both_backends!(agents_in_a_namespace_get_their_runs_over_their_connections);
