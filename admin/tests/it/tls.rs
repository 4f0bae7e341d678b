//! HTTPS served by the admin and verified by real agents, with a CA made by each test: an agent
//! trusting the CA registers and runs a job, one trusting another CA is refused and its log
//! says why; the admin's certificate is replaced on SIGHUP and when its files change, without a
//! restart; mutual TLS keeps agents without a client certificate out; unusable files stop the
//! start with an error naming the key and the file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use jobfleet_admin::testing::TestDb;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

use crate::support::admin_proc::AdminProc;
use crate::support::{AgentProc, TestApp, install_crypto, wait_for};

const RUN_WITHIN: Duration = Duration::from_secs(30);

/// A certificate authority made for one test.
struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A certificate issued by a [`TestCa`], in PEM, with its key.
struct Issued {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
}

impl TestCa {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for 127.0.0.1 and localhost, good for a server and for a client.
    fn issue(&self, name: &str) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Writes `issued` as `<name>.crt` and `<name>.key`.
fn write_pair(dir: &Path, name: &str, issued: &Issued) -> (String, String) {
    let cert = write(dir, &format!("{name}.crt"), &issued.cert_pem);
    let key = write(dir, &format!("{name}.key"), &issued.key_pem);
    (cert.display().to_string(), key.display().to_string())
}

/// A client trusting only `ca_pem`'s CA, presenting `identity` when given.
fn client_config(ca_pem: &str, identity: Option<&Issued>) -> rustls::ClientConfig {
    install_crypto();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    match identity {
        None => builder.with_no_client_auth(),
        Some(issued) => builder
            .with_client_auth_cert(
                vec![issued.der.clone().into()],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes())
                    .unwrap(),
            )
            .unwrap(),
    }
}

fn http_client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_backend_preconfigured(client_config(ca_pem, None))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// The leaf certificate the server at `base` (https://127.0.0.1:PORT) presents now, read
/// from a fresh handshake verified against `ca_pem`.
async fn served_certificate(base: &str, ca_pem: &str) -> Vec<u8> {
    let config = Arc::new(client_config(ca_pem, None));
    let addr = base.trim_start_matches("https://").to_owned();
    tokio::task::spawn_blocking(move || {
        let mut socket = std::net::TcpStream::connect(addr).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls = rustls::ClientConnection::new(config, name).unwrap();
        while tls.is_handshaking() {
            tls.complete_io(&mut socket).unwrap();
        }
        tls.peer_certificates().unwrap()[0].to_vec()
    })
    .await
    .unwrap()
}

/// Waits until `path` holds `needle`, returning the whole text.
async fn log_saying(path: &Path, needle: &str) -> String {
    wait_for(
        Duration::from_secs(20),
        &format!("{} to say {needle:?}", path.display()),
        || async {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            text.contains(needle).then_some(text)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_trusting_the_admins_ca_runs_jobs_and_one_trusting_another_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("jobfleet test CA");
    let (cert, key) = write_pair(dir.path(), "admin", &ca.issue("admin"));
    let ca_file = write(dir.path(), "ca.crt", &ca.pem);
    let other_ca_file = write(dir.path(), "other-ca.crt", &TestCa::new("another CA").pem);
    let app = TestApp::start_with(
        TestDb::sqlite(),
        &[("JOBFLEET_TLS_CERT", &cert), ("JOBFLEET_TLS_KEY", &key)],
    )
    .await;
    assert!(app.base.starts_with("https://"), "{}", app.base);
    let group = app.group("tls-agents").await;
    let admins = format!("{}/", app.base);

    let stranger_log = dir.path().join("stranger.log");
    let stranger = AgentProc::start_logged(
        &admins,
        "tls-agents",
        &dir.path().join("stranger"),
        &[(
            "JOBFLEET_AGENT_ADMIN_CA_FILE",
            other_ca_file.to_str().unwrap(),
        )],
        Some(&stranger_log),
    );
    let agent = AgentProc::start_with(
        &admins,
        "tls-agents",
        &dir.path().join("agent"),
        &[("JOBFLEET_AGENT_ADMIN_CA_FILE", ca_file.to_str().unwrap())],
    );
    app.wait_for_agent(&agent.address).await;

    let job = app
        .job_from(
            group,
            json!({"name": "over-tls", "handler": {"type": "shell", "command": "echo over tls"}}),
        )
        .await;
    let run = app.trigger(job, json!({})).await;
    assert_eq!(run["agent"], agent.address.as_str(), "{run}");
    let done = app
        .finished_run(run["id"].as_i64().unwrap(), RUN_WITHIN)
        .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        app.full_log(run["id"].as_i64().unwrap()).await,
        "over tls\n",
        "the log is read through the admin as usual"
    );

    // The stranger tried (its log says the admin's certificate has an unknown issuer) and
    // never got in.
    let said = log_saying(&stranger_log, "No admin accepted the heartbeat").await;
    assert!(said.contains("UnknownIssuer"), "{said}");
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    let addresses: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, [agent.address.as_str()], "{agents}");
    drop(stranger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_keeps_agents_without_a_client_certificate_out() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("jobfleet test CA");
    let (cert, key) = write_pair(dir.path(), "admin", &ca.issue("admin"));
    let ca_file = write(dir.path(), "ca.crt", &ca.pem);
    let ca_path = ca_file.display().to_string();
    let (agent_cert, agent_key) = write_pair(dir.path(), "agent", &ca.issue("agent-1"));
    // A client certificate from another CA is refused too, even though it is well formed.
    let (rogue_cert, rogue_key) = write_pair(
        dir.path(),
        "rogue",
        &TestCa::new("another CA").issue("rogue"),
    );
    let app = TestApp::start_with(
        TestDb::sqlite(),
        &[
            ("JOBFLEET_TLS_CERT", &cert),
            ("JOBFLEET_TLS_KEY", &key),
            ("JOBFLEET_TLS_CLIENT_CA", &ca_path),
            ("JOBFLEET_TLS_CLIENT_AUTH", "required"),
        ],
    )
    .await;
    app.group("mtls").await;
    let admins = format!("{}/", app.base);

    // A client that verifies the admin but presents nothing does not get an answer.
    let anonymous = http_client(&ca.pem)
        .get(format!("{}/readyz", app.base))
        .send()
        .await;
    assert!(anonymous.is_err(), "{anonymous:?}");

    let bare_log = dir.path().join("bare.log");
    let bare = AgentProc::start_logged(
        &admins,
        "mtls",
        &dir.path().join("bare"),
        &[("JOBFLEET_AGENT_ADMIN_CA_FILE", &ca_path)],
        Some(&bare_log),
    );
    let rogue_log = dir.path().join("rogue.log");
    let rogue = AgentProc::start_logged(
        &admins,
        "mtls",
        &dir.path().join("rogue"),
        &[
            ("JOBFLEET_AGENT_ADMIN_CA_FILE", &ca_path),
            ("JOBFLEET_AGENT_CLIENT_CERT", &rogue_cert),
            ("JOBFLEET_AGENT_CLIENT_KEY", &rogue_key),
        ],
        Some(&rogue_log),
    );
    let agent = AgentProc::start_with(
        &admins,
        "mtls",
        &dir.path().join("agent"),
        &[
            ("JOBFLEET_AGENT_ADMIN_CA_FILE", &ca_path),
            ("JOBFLEET_AGENT_CLIENT_CERT", &agent_cert),
            ("JOBFLEET_AGENT_CLIENT_KEY", &agent_key),
        ],
    );
    app.wait_for_agent(&agent.address).await;
    for log in [&bare_log, &rogue_log] {
        log_saying(log, "No admin accepted the heartbeat").await;
    }
    let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
    let addresses: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["address"].as_str().unwrap())
        .collect();
    assert_eq!(addresses, [agent.address.as_str()], "{agents}");
    drop((bare, rogue));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_client_auth_lets_clients_without_a_certificate_in_but_not_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("jobfleet test CA");
    let (cert, key) = write_pair(dir.path(), "admin", &ca.issue("admin"));
    let ca_path = write(dir.path(), "ca.crt", &ca.pem).display().to_string();
    let app = TestApp::start_with(
        TestDb::sqlite(),
        &[
            ("JOBFLEET_TLS_CERT", &cert),
            ("JOBFLEET_TLS_KEY", &key),
            ("JOBFLEET_TLS_CLIENT_CA", &ca_path),
            ("JOBFLEET_TLS_CLIENT_AUTH", "optional"),
        ],
    )
    .await;
    let readyz = |config: rustls::ClientConfig| {
        let url = format!("{}/readyz", app.base);
        async move {
            reqwest::Client::builder()
                .tls_backend_preconfigured(config)
                .build()
                .unwrap()
                .get(url)
                .send()
                .await
        }
    };
    // A browser-like client without a certificate, and an agent with one of the CA, get in.
    let anonymous = readyz(client_config(&ca.pem, None)).await.unwrap();
    assert!(anonymous.status().is_success());
    let member = readyz(client_config(&ca.pem, Some(&ca.issue("agent")))).await;
    assert!(member.unwrap().status().is_success());
    // A certificate another CA signed is refused, optional or not.
    let stranger = readyz(client_config(
        &ca.pem,
        Some(&TestCa::new("another CA").issue("rogue")),
    ))
    .await;
    assert!(stranger.is_err(), "{stranger:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_reloads_its_certificate_on_sighup_and_when_the_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("jobfleet test CA");
    let first = ca.issue("admin-first");
    let (cert, key) = write_pair(dir.path(), "admin", &first);
    let db = format!("sqlite://{}/jf.db", dir.path().display());
    let mut admin = AdminProc::start_with(
        &db,
        &[("JOBFLEET_TLS_CERT", &cert), ("JOBFLEET_TLS_KEY", &key)],
    );
    assert!(admin.base.starts_with("https://"), "{}", admin.base);
    let client = http_client(&ca.pem);
    admin.ready(&client).await;
    assert_eq!(served_certificate(&admin.base, &ca.pem).await, first.der);

    // A connection opened before the change keeps working across it.
    let kept = http_client(&ca.pem);
    let r = kept.get(format!("{}/healthz", admin.base)).send().await;
    assert!(r.unwrap().status().is_success());

    // Replaced files with SIGHUP: the next handshake gets the new certificate.
    let second = ca.issue("admin-second");
    let (staged_cert, staged_key) = write_pair(dir.path(), "staged", &second);
    std::fs::rename(&staged_key, &key).unwrap();
    std::fs::rename(&staged_cert, &cert).unwrap();
    admin.signal("HUP");
    wait_for(
        Duration::from_secs(10),
        "the second certificate",
        || async { (served_certificate(&admin.base, &ca.pem).await == second.der).then_some(()) },
    )
    .await;
    assert!(
        admin.running(),
        "SIGHUP reloads, it does not stop the admin"
    );
    let r = kept.get(format!("{}/healthz", admin.base)).send().await;
    assert!(r.unwrap().status().is_success());

    // A broken file keeps the current certificate (and the admin up)...
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    admin.signal("HUP");
    // ...then a good one arrives without any signal: the changed files are noticed.
    let third = ca.issue("admin-third");
    assert_eq!(served_certificate(&admin.base, &ca.pem).await, second.der);
    std::fs::write(&key, &third.key_pem).unwrap();
    std::fs::write(&cert, &third.cert_pem).unwrap();
    wait_for(
        Duration::from_secs(15),
        "the third certificate, from the changed files",
        || async { (served_certificate(&admin.base, &ca.pem).await == third.der).then_some(()) },
    )
    .await;
    assert!(admin.running());

    // `healthcheck` checks this HTTPS admin with the same config.
    let out = Command::new(env!("CARGO_BIN_EXE_jobfleet-admin"))
        .arg("healthcheck")
        .env_clear()
        .env("JOBFLEET_LISTEN", admin.base.trim_start_matches("https://"))
        .env("JOBFLEET_TLS_CERT", &cert)
        .env("JOBFLEET_TLS_KEY", &key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Given another certificate than the one served, it says the admin is not ready.
    let (other_cert, other_key) = write_pair(dir.path(), "other", &ca.issue("not-served"));
    let out = Command::new(env!("CARGO_BIN_EXE_jobfleet-admin"))
        .arg("healthcheck")
        .env_clear()
        .env("JOBFLEET_LISTEN", admin.base.trim_start_matches("https://"))
        .env("JOBFLEET_TLS_CERT", &other_cert)
        .env("JOBFLEET_TLS_KEY", &other_key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another certificate"), "{err}");
}

#[test]
fn unusable_tls_settings_stop_the_start_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("jobfleet test CA");
    let (cert, key) = write_pair(dir.path(), "admin", &ca.issue("admin"));
    let garbage = write(dir.path(), "garbage.pem", "this is no certificate\n")
        .display()
        .to_string();
    let missing = dir.path().join("missing.pem").display().to_string();
    let (other_cert, _) = write_pair(dir.path(), "other", &ca.issue("other"));
    let db = format!("sqlite://{}/jf.db", dir.path().display());
    for (settings, code, key_named, file_named, says) in [
        (
            vec![("JOBFLEET_TLS_CERT", cert.as_str())],
            2,
            "tls_key",
            None,
            "required",
        ),
        (
            vec![("JOBFLEET_TLS_CERT", &missing), ("JOBFLEET_TLS_KEY", &key)],
            1,
            "tls_cert",
            Some(&missing),
            "cannot read",
        ),
        (
            vec![("JOBFLEET_TLS_CERT", &garbage), ("JOBFLEET_TLS_KEY", &key)],
            1,
            "tls_cert",
            Some(&garbage),
            "no PEM certificate",
        ),
        (
            vec![("JOBFLEET_TLS_CERT", &cert), ("JOBFLEET_TLS_KEY", &garbage)],
            1,
            "tls_key",
            Some(&garbage),
            "no usable PEM private key",
        ),
        (
            vec![
                ("JOBFLEET_TLS_CERT", &other_cert),
                ("JOBFLEET_TLS_KEY", &key),
            ],
            1,
            "tls_key",
            Some(&key),
            "cannot be used with the certificate",
        ),
        (
            vec![
                ("JOBFLEET_TLS_CERT", &cert),
                ("JOBFLEET_TLS_KEY", &key),
                ("JOBFLEET_TLS_CLIENT_CA", &garbage),
            ],
            1,
            "tls_client_ca",
            Some(&garbage),
            "no PEM certificate",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_jobfleet-admin"))
            .arg("serve")
            .env_clear()
            .env("JOBFLEET_LISTEN", "127.0.0.1:0")
            .env("JOBFLEET_DATABASE_URL", &db)
            .env("JOBFLEET_LOG", "warn")
            .envs(settings.iter().copied())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{settings:?}: {err}");
        assert!(
            err.contains(&format!("`{key_named}`")),
            "{settings:?}: {err}"
        );
        if let Some(file) = file_named {
            assert!(err.contains(file.as_str()), "{settings:?}: {err}");
        }
        assert!(err.contains(says), "{settings:?}: {err}");
    }
    assert!(
        !dir.path().join("jf.db").exists(),
        "unusable certificates stop the start before the database is touched"
    );
}

#[test]
fn an_agent_with_unusable_tls_files_exits_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = write(dir.path(), "garbage.pem", "no PEM here\n");
    for (var, says) in [
        ("JOBFLEET_AGENT_ADMIN_CA_FILE", "admin_ca_file"),
        ("JOBFLEET_AGENT_CLIENT_CERT", "client_key"),
    ] {
        let out = Command::new(crate::support::agent_binary())
            .arg("--allow-root")
            .env_clear()
            .env("JOBFLEET_AGENT_GROUP", "g")
            .env("JOBFLEET_AGENT_TOKEN", "test-agent-token")
            .env("JOBFLEET_AGENT_LISTEN", "127.0.0.1:0")
            .env("JOBFLEET_AGENT_DATA_DIR", dir.path().join("agent"))
            .env(var, &garbage)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {err}");
        assert!(err.contains(&format!("`{says}`")), "{var}: {err}");
    }
    let out = Command::new(crate::support::agent_binary())
        .arg("--allow-root")
        .env_clear()
        .env("JOBFLEET_AGENT_GROUP", "g")
        .env("JOBFLEET_AGENT_TOKEN", "test-agent-token")
        .env("JOBFLEET_AGENT_LISTEN", "127.0.0.1:0")
        .env("JOBFLEET_AGENT_DATA_DIR", dir.path().join("agent"))
        .env("JOBFLEET_AGENT_ADMIN_CA_FILE", &garbage)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(garbage.to_str().unwrap()) && err.contains("no PEM certificate"),
        "{err}"
    );
}

/// A `connect` agent reaches an HTTPS admin that requires client certificates over `wss://`,
/// verified with the same CA file and presenting the same certificate as its HTTP calls, and
/// runs a job through the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_agent_runs_jobs_over_wss_with_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("jobfleet test CA");
    let (cert, key) = write_pair(dir.path(), "admin", &ca.issue("admin"));
    let ca_path = write(dir.path(), "ca.crt", &ca.pem).display().to_string();
    let (agent_cert, agent_key) = write_pair(dir.path(), "agent", &ca.issue("agent-1"));
    let app = TestApp::start_with(
        TestDb::sqlite(),
        &[
            ("JOBFLEET_TLS_CERT", &cert),
            ("JOBFLEET_TLS_KEY", &key),
            ("JOBFLEET_TLS_CLIENT_CA", &ca_path),
            ("JOBFLEET_TLS_CLIENT_AUTH", "required"),
        ],
    )
    .await;
    let group = app.group("wss").await;
    let _agent = AgentProc::start_with(
        &format!("{}/", app.base),
        "wss",
        &dir.path().join("agent"),
        &[
            ("JOBFLEET_AGENT_MODE", "connect"),
            ("JOBFLEET_AGENT_ADMIN_CA_FILE", &ca_path),
            ("JOBFLEET_AGENT_CLIENT_CERT", &agent_cert),
            ("JOBFLEET_AGENT_CLIENT_KEY", &agent_key),
        ],
    );
    let row = wait_for(
        Duration::from_secs(20),
        "the agent's connection",
        || async {
            let agents = app.get("/api/v1/agents", &app.admin).await.body["items"].clone();
            agents
                .as_array()?
                .iter()
                .find(|a| a["mode"] == "connect" && a["connection"].is_object())
                .cloned()
        },
    )
    .await;
    let address = row["address"].as_str().unwrap();
    assert!(address.starts_with("conn://"), "{row}");
    let job = app
        .job_from(
            group,
            json!({"name": "over-wss", "handler": {"type": "shell", "command": "echo over wss"}}),
        )
        .await;
    let run = app.trigger(job, json!({})).await;
    assert_eq!(run["agent"], address, "{run}");
    let id = run["id"].as_i64().unwrap();
    let done = app.finished_run(id, RUN_WITHIN).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(app.full_log(id).await, "over wss\n");
}
