//! The real `jobfleet-admin` binary: config errors, subcommands, first start, serve and stop.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::admin_proc::admin_command;
use crate::support::free_port;

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Packages and images check which databases a binary speaks.
#[test]
fn version_names_the_databases_built_in() {
    let (code, out, err) = run(admin_command().arg("--version"));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("jobfleet-admin ") && out.contains("databases: sqlite"),
        "{out}"
    );
    let agent = crate::support::agent::agent_binary();
    let (code, out, _) = run(Command::new(agent).arg("--version"));
    assert_eq!(code, 0);
    assert!(out.contains("modes: push, connect, auto"), "{out}");
}

/// The mysql build says it speaks MySQL (CI's MariaDB step runs this; packages check it).
#[cfg(feature = "mysql")]
#[test]
fn a_mysql_build_names_mysql_in_its_version() {
    let (code, out, err) = run(admin_command().arg("--version"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("databases: sqlite, mysql;"), "{out}");
}

/// A build without the feature says it speaks SQLite alone.
#[cfg(not(feature = "mysql"))]
#[test]
fn a_sqlite_build_names_only_sqlite_in_its_version() {
    let (code, out, err) = run(admin_command().arg("--version"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("databases: sqlite;"), "{out}");
}

/// `check-config` with a MySQL URL: what the build can say about it.
fn check_config_of_a_mysql_url() -> String {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run(admin_command()
        .arg("check-config")
        .env(
            "JOBFLEET_DATABASE_URL",
            "mysql://jobfleet:pw@127.0.0.1:1/jobfleet",
        )
        .current_dir(dir.path()));
    assert_eq!(code, 2, "{err}");
    err
}

/// A MySQL cluster's admins need the shared secrets; the error names the key.
#[cfg(feature = "mysql")]
#[test]
fn check_config_of_a_mysql_cluster_asks_for_its_shared_secrets() {
    let err = check_config_of_a_mysql_url();
    assert!(err.contains("jwt_secret"), "{err}");
}

/// A build without MySQL says so instead of failing to connect.
#[cfg(not(feature = "mysql"))]
#[test]
fn check_config_of_a_mysql_url_without_mysql_support_says_so() {
    let err = check_config_of_a_mysql_url();
    assert!(err.contains("no MySQL support"), "{err}");
}

/// Operators and CI check a configuration before a start: nothing is created or connected.
#[test]
fn check_config_validates_without_touching_anything() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admin.toml");
    std::fs::write(
        &config,
        "listen = \"0.0.0.0:8080\"\ndatabase_url = \"sqlite://data/jobfleet.db\"\n",
    )
    .unwrap();
    let (code, out, err) = run(admin_command()
        .args(["check-config", "--config"])
        .arg(&config)
        .current_dir(dir.path()));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration is valid"), "{out}");
    assert!(
        !dir.path().join("data").exists(),
        "check-config created the data folder"
    );

    std::fs::write(&config, "listen = [1, 2]\n").unwrap();
    let (code, _, err) = run(admin_command()
        .args(["check-config", "--config"])
        .arg(&config)
        .current_dir(dir.path()));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("listen"), "{err}");
}

#[test]
fn invalid_config_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = run(admin_command()
        .arg("migrate")
        .env("JOBFLEET_LISTEN", "localhost:notaport")
        .current_dir(dir.path()));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`listen`") && err.contains("JOBFLEET_LISTEN"),
        "{err}"
    );

    let file = dir.path().join("admin.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:1\"\ndatabse_url = \"x\"\n").unwrap();
    let (code, _, err) = run(admin_command().args(["--config", file.to_str().unwrap(), "migrate"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("databse_url") && err.contains("unknown key"),
        "{err}"
    );

    let (code, _, err) =
        run(admin_command().args(["--database-url", "sqlite:///no/such/folder/x.db", "migrate"]));
    assert_eq!(code, 1);
    assert!(err.contains("does not exist"), "{err}");

    let (code, _, err) = run(admin_command().args(["--database-url", "oracle://x", "migrate"]));
    assert_eq!(code, 2);
    assert!(err.contains("database_url"), "{err}");
    assert!(
        !dir.path().join("data").exists(),
        "nothing was created on bad config"
    );
}

#[test]
fn migrate_and_user_commands_work_on_a_fresh_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/jf.db", dir.path().display());
    let (code, out, err) = run(admin_command().args(["--database-url", &url, "migrate"]));
    assert_eq!(code, 0, "{out}{err}");
    let mut child = admin_command()
        .args([
            "--database-url",
            &url,
            "user",
            "add",
            "bob",
            "--role",
            "operator",
            "--password-stdin",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"bob-password-1\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("created user `bob`"));

    let (code, _, err) = run(admin_command().args([
        "--database-url",
        &url,
        "user",
        "add",
        "eve",
        "--role",
        "god",
        "--password",
        "long-password",
    ]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(admin_command().args([
        "--database-url",
        &url,
        "user",
        "add",
        "bob",
        "--password",
        "long-password",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("already exists"), "{err}");
    let (code, _, err) = run(admin_command().args([
        "--database-url",
        &url,
        "user",
        "add",
        "weak",
        "--password",
        "short",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("at least 8"), "{err}");
    let (code, _, err) = run(admin_command().args([
        "--database-url",
        &url,
        "user",
        "passwd",
        "nobody",
        "--password",
        "long-password",
    ]));
    assert_eq!(code, 1, "{err}");
    let (code, _, _) = run(admin_command().args([
        "--database-url",
        &url,
        "user",
        "passwd",
        "bob",
        "--password",
        "bob-password-2",
    ]));
    assert_eq!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_prints_a_password_that_logs_in_and_sigterm_stops_cleanly() {
    crate::support::install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The default database URL: `data/` is created under the working directory.
    let mut child = admin_command()
        .arg("serve")
        .env("JOBFLEET_LISTEN", format!("127.0.0.1:{port}"))
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let password = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut reader = std::io::BufReader::new(&mut stdout);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 {
                panic!("the admin exited before printing a password");
            }
            if let Some(p) = line
                .trim()
                .strip_prefix("jobfleet: created user `admin` with password: ")
            {
                return p.to_owned();
            }
        }
    })
    .await
    .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, _, _) = run(admin_command().args(["healthcheck", "--url", &base]));
        if code == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the admin never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{base}/api/v1/auth/token"))
        .json(&json!({"username": "admin", "password": password}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(dir.path().join("data/jobfleet.db").exists());

    nix_kill(child.id(), "TERM");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit after SIGTERM: {status:?}");
    let (code, _, _) = run(admin_command().args(["healthcheck", "--url", &base]));
    assert_eq!(code, 1, "healthcheck fails once the admin is gone");
}

fn nix_kill(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
