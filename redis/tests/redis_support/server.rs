//! `RedisServer` / `RedisCluster`: real `redis-server` processes for tests and benchmarks,
//! on loopback, on free ports, in temporary directories, without persistence.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// Path of `redis-server`, or a panic telling how to install it.
pub(crate) fn redis_server_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("redis-server");
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("redis-server not found on PATH: run `bash scripts/setup.d/redis.sh` (apt-get install -y redis-server)");
}

/// A port `p` with `p` and `p + 10000` (cluster bus) both free right now.
fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        if port > 55_000 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// A server's writes held ([`RedisServer::pause_writes`]), through the connection that
/// paused them.
pub(crate) struct WritesPaused {
    connection: redis::Connection,
}

impl WritesPaused {
    /// Lets the held writes run, in the order they came.
    pub(crate) fn unpause(mut self) -> redis::RedisResult<()> {
        let _: String = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(&mut self.connection)?;
        Ok(())
    }
}

/// One `redis-server` child process.
pub(crate) struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    cluster: bool,
    /// Extra command-line configuration (`--name value` pairs).
    extra: Vec<String>,
}

impl RedisServer {
    /// A standalone server.
    pub(crate) fn start() -> RedisServer {
        RedisServer::spawn(false, Vec::new())
    }

    /// A standalone server with extra configuration, e.g. `["--rename-command", "FCALL",
    /// ""]` to look like a server without Redis Functions.
    pub(crate) fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::spawn(false, extra.iter().map(|s| (*s).to_owned()).collect())
    }

    /// A cluster-enabled node without slots.
    pub(crate) fn start_cluster_node() -> RedisServer {
        RedisServer::spawn(true, Vec::new())
    }

    fn spawn(cluster: bool, extra: Vec<String>) -> RedisServer {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "tollgate-redis-{}-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed),
            port
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            cluster,
            extra,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(redis_server_binary());
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "yes"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra);
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .arg("--cluster-config-file")
                .arg(self.dir.join("nodes.conf"));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(cmd.spawn().expect("spawn redis-server"));
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut con) = self.try_connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A fresh synchronous connection for inspection and fault injection.
    pub(crate) fn connection(&self) -> redis::Connection {
        self.try_connection().expect("connect to test redis")
    }

    /// Holds every write command sent to the server from now on (a script's included)
    /// until [`WritesPaused::unpause`]; reads are answered meanwhile. The pause lasts a
    /// minute at most, should the test fail before it unpauses.
    pub(crate) fn pause_writes(&self) -> redis::RedisResult<WritesPaused> {
        let mut connection = self.try_connection()?;
        let _: String = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(60_000)
            .arg("WRITE")
            .query(&mut connection)?;
        Ok(WritesPaused { connection })
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TCP port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `kill -9`: SIGKILL, no shutdown, no save.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `kill -STOP`: freezes the server (a stall: its sockets stay open and what clients
    /// send waits in the kernel's buffers until [`sigcont`](Self::sigcont)).
    pub(crate) fn sigstop(&self) {
        self.signal("-STOP");
    }

    /// `kill -CONT`: resumes a server frozen by [`sigstop`](Self::sigstop).
    pub(crate) fn sigcont(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts again on the same port (empty: no persistence).
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.launch();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three cluster-enabled masters, slots assigned by hand (`CLUSTER ADDSLOTSRANGE`), joined
/// with `CLUSTER MEET`.
pub(crate) struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// The slot ranges of the three masters.
pub(crate) const SLOT_RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

impl RedisCluster {
    pub(crate) fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_cluster_node()).collect();
        for (node, (from, to)) in nodes.iter().zip(SLOT_RANGES) {
            let mut con = node.connection();
            let _: String = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(from)
                .arg(to)
                .query(&mut con)
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        let mut first = nodes[0].connection();
        for node in &nodes[1..] {
            let _: String = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .query(&mut first)
                .expect("CLUSTER MEET");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            let mut con = node.connection();
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .expect("CLUSTER INFO");
                let nodes_seen: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut con)
                    .expect("CLUSTER NODES");
                let masters_with_slots = nodes_seen
                    .lines()
                    .filter(|l| l.contains("master") && l.split(' ').count() > 8)
                    .count();
                if info.contains("cluster_state:ok") && masters_with_slots == 3 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "cluster did not converge: {info}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        RedisCluster { nodes }
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub(crate) fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The hash slot of `key`.
    pub(crate) fn slot(&self, key: &str) -> u16 {
        let mut con = self.nodes[0].connection();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut con)
            .expect("CLUSTER KEYSLOT")
    }

    /// Index of the master owning `key`.
    pub(crate) fn owner(&self, key: &str) -> usize {
        let slot = self.slot(key);
        SLOT_RANGES
            .iter()
            .position(|&(from, to)| (from..=to).contains(&slot))
            .expect("slot in a range")
    }
}
