//! A real `jobfleet-agent` process on loopback, and fake executors that answer like one.

use super::free_port;

/// A real `jobfleet-agent` process on loopback.
pub struct AgentProc {
    child: Option<std::process::Child>,
    pub port: u16,
    pub address: String,
    pub data_dir: std::path::PathBuf,
    admins: String,
    group: String,
    extra_env: Vec<(String, String)>,
    /// What it logged (warnings and worse), over every start.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// A file that gets a copy of its log and its stderr (start-up failures), when asked for.
    log_file: Option<std::path::PathBuf>,
}

/// The agent binary next to this test binary; `cargo build --workspace --bins` puts it there.
pub fn agent_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(std::path::Path::parent).unwrap();
    let bin = dir.join("jobfleet-agent");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests",
        bin.display()
    );
    bin
}

impl AgentProc {
    pub fn start(admins: &str, group: &str, data_dir: &std::path::Path) -> Self {
        Self::start_with(admins, group, data_dir, &[])
    }

    /// Starts with extra `JOBFLEET_AGENT_*` settings.
    pub fn start_with(
        admins: &str,
        group: &str,
        data_dir: &std::path::Path,
        extra: &[(&str, &str)],
    ) -> Self {
        Self::start_logged(admins, group, data_dir, extra, None)
    }

    /// Starts with extra settings, its log and stderr also appended to `log_file` when given.
    pub fn start_logged(
        admins: &str,
        group: &str,
        data_dir: &std::path::Path,
        extra: &[(&str, &str)],
        log_file: Option<&std::path::Path>,
    ) -> Self {
        let port = free_port();
        let mut agent = Self {
            child: None,
            port,
            address: format!("http://127.0.0.1:{port}/"),
            data_dir: data_dir.to_owned(),
            admins: admins.to_owned(),
            group: group.to_owned(),
            extra_env: extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            log: std::sync::Arc::default(),
            log_file: log_file.map(std::path::Path::to_owned),
        };
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let open = |path: &std::path::Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap()
        };
        let stderr = match &self.log_file {
            Some(path) => std::process::Stdio::from(open(path)),
            None => std::process::Stdio::inherit(),
        };
        let mut copy = self.log_file.as_deref().map(open);
        let mut child = std::process::Command::new(agent_binary())
            .arg("--allow-root")
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("JOBFLEET_AGENT_ADMINS", &self.admins)
            .env("JOBFLEET_AGENT_GROUP", &self.group)
            .env("JOBFLEET_AGENT_LISTEN", format!("127.0.0.1:{}", self.port))
            .env("JOBFLEET_AGENT_TOKEN", "test-agent-token")
            .env("JOBFLEET_AGENT_DATA_DIR", &self.data_dir)
            .env("JOBFLEET_AGENT_HEARTBEAT_INTERVAL_S", "1")
            .env("JOBFLEET_AGENT_KILL_GRACE_MS", "500")
            .env("JOBFLEET_AGENT_SHUTDOWN_GRACE_S", "10")
            .env("RUST_LOG", "warn")
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // The agent logs to stdout; keep the lines (drained to the end, so it never blocks).
        let stdout = child.stdout.take().unwrap();
        let log = self.log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(file) = copy.as_mut() {
                    use std::io::Write;
                    let _ = writeln!(file, "{line}");
                }
                log.lock().unwrap().push(line);
            }
        });
        self.child = Some(child);
    }

    /// How many lines the agent has logged that contain `text`.
    pub fn logged(&self, text: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(text))
            .count()
    }

    /// Starts the agent again with the same port and data folder.
    pub fn restart(&mut self) {
        self.spawn();
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// SIGTERM and wait for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = nix_pid(child.id());
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        child.wait().unwrap()
    }

    /// The agent process's pid (for reading its /proc figures).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Results durably spooled: whole `.json` files, not a `.tmp` still being written (which a
    /// kill -9 leaves half-done and the agent's restart rightly discards).
    pub fn spool_files(&self) -> usize {
        std::fs::read_dir(self.data_dir.join("spool")).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
    }
}

fn nix_pid(pid: u32) -> String {
    pid.to_string()
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Whether `pid` is a process that has not ended (a zombie has).
pub fn pid_alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// How a fake executor answers a trigger.
#[derive(Debug, Clone, Copy)]
pub enum Executor {
    /// Accepts every trigger, as an XXL-Job executor does.
    Accepting,
    /// Answers with an executor's refusal.
    Refusing,
    /// Answers something that is no executor's answer.
    Garbage,
    /// Never answers.
    Silent,
}

/// Reads one whole HTTP request (head and `content-length` bytes of body): its request line
/// (`POST /run HTTP/1.1`) and its body; `None` when the peer closes or fails first.
pub async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<(String, String)> {
    use tokio::io::AsyncReadExt;
    let mut request = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let text = String::from_utf8_lossy(&request);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|h| {
                    let (name, value) = h.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if body.len() >= length {
                return Some((
                    head.lines().next().unwrap_or_default().to_owned(),
                    body.to_owned(),
                ));
            }
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A fake executor on loopback answering every request as `kind` says; returns its address.
pub async fn fake_executor(kind: Executor) -> String {
    fake_executor_heard(kind).await.0
}

/// A request a fake executor got: when (ms since the epoch), its request line
/// (`POST /run HTTP/1.1`) and its body.
#[derive(Debug, Clone)]
pub struct Heard {
    pub at_ms: i64,
    pub line: String,
    pub body: String,
}

/// `fake_executor`, with every request it got.
pub async fn fake_executor_heard(
    kind: Executor,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Heard>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}/", listener.local_addr().unwrap());
    let heard = std::sync::Arc::<std::sync::Mutex<Vec<Heard>>>::default();
    let log = heard.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let Some((line, body)) = read_request(&mut socket).await else {
                    return;
                };
                let at_ms = i64::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_millis(),
                )
                .unwrap();
                log.lock().unwrap().push(Heard { at_ms, line, body });
                let body = match kind {
                    Executor::Accepting => r#"{"code":200,"msg":null}"#,
                    Executor::Refusing => r#"{"code":500,"msg":"refused by test"}"#,
                    Executor::Garbage => "<html>not an executor</html>",
                    Executor::Silent => {
                        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                        return;
                    }
                };
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (address, heard)
}
