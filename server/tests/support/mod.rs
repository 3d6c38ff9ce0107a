//! Shared support of the server tests: the real `tollgate-server` binary started on free
//! loopback ports with a rules file written for the test, its addresses read from what it
//! prints; a gRPC client of Envoy's Rate Limit Service; a plain HTTP/1.1 client.

#![allow(dead_code)] // each test file uses its part

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

/// A running `tollgate-server`, stopped (SIGTERM, then waited for) when dropped.
pub(crate) struct Server {
    child: Option<Child>,
    pub(crate) grpc: SocketAddr,
    pub(crate) http: SocketAddr,
    pub(crate) admin: Option<SocketAddr>,
    /// The rules file it reads.
    pub(crate) rules: PathBuf,
    /// What it wrote on stderr, once stopped.
    stderr: PathBuf,
}

/// A fresh temporary directory.
pub(crate) fn temp_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tollgate-server-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Server {
    /// Starts the server on `yaml` with `args` and `env` added.
    pub(crate) fn start(yaml: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let dir = temp_dir();
        let rules = dir.join("rules.yaml");
        std::fs::write(&rules, yaml).unwrap();
        Server::start_on(&rules, args, env)
    }

    /// Starts the server on the rules at `rules`.
    pub(crate) fn start_on(rules: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        // In a directory of the test's own, never beside a rules file of the repository.
        let stderr = temp_dir().join("stderr");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate-server"));
        command
            .arg("--config")
            .arg(rules)
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("tollgate-server starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let (mut grpc, mut http, mut admin) = (None, None, None);
        let wants_admin = args.contains(&"--admin");
        while grpc.is_none() || http.is_none() || (wants_admin && admin.is_none()) {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.wait();
                panic!(
                    "tollgate-server exited before listening: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                );
            };
            let address = |name: &str| -> Option<SocketAddr> {
                line.strip_prefix(&format!("tollgate-server: {name} listening on "))
                    .map(|a| a.parse().unwrap())
            };
            grpc = grpc.or_else(|| address("grpc"));
            http = http.or_else(|| address("http"));
            admin = admin.or_else(|| address("admin"));
        }
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child: Some(child),
            grpc: grpc.unwrap(),
            http: http.unwrap(),
            admin,
            rules: rules.to_owned(),
            stderr,
        }
    }

    /// A gRPC client of its Rate Limit Service.
    pub(crate) async fn client(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("gRPC connects")
    }

    /// Sends `signal` (`kill -s`).
    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        let status = Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stops it with SIGTERM; its exit status and what it logged.
    pub(crate) fn stop(mut self) -> (std::process::ExitStatus, String) {
        self.signal("TERM");
        let status = self.child.take().unwrap().wait().unwrap();
        (
            status,
            std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }

    /// What it has logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A descriptor of `(key, value)` entries.
pub(crate) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A `ShouldRateLimit` request of `domain` with `descriptors` and `hits`.
pub(crate) fn request(
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
    hits: u32,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: hits,
    }
}

/// `(overall code, [(code, remaining, current limit's requests_per_unit)])`: what a test
/// pins of a response (codes: 1 OK, 2 OVER_LIMIT).
pub(crate) fn summary(response: &RateLimitResponse) -> (i32, Vec<(i32, u32, Option<u32>)>) {
    (
        response.overall_code,
        response
            .statuses
            .iter()
            .map(|s| {
                (
                    s.code,
                    s.limit_remaining,
                    s.current_limit.as_ref().map(|l| l.requests_per_unit),
                )
            })
            .collect(),
    )
}

/// An HTTP/1.1 answer: status, headers (names lower-cased), body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `method path` on `address`, with `headers` and `body`, over a fresh connection.
pub(crate) fn http(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    if !body.is_empty()
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("content-type: application/json\r\n");
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}
