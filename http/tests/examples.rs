//! The copyable examples (`examples/axum_service.rs`, `hyper_service.rs`,
//! `tonic_service.rs`), run as a user runs them: each is started as its own process on
//! 127.0.0.1:0 and called over loopback by a real client until it refuses; the burst of
//! 10 is admitted first, and the refusal is the layer's (a 429 with `Retry-After`, or
//! gRPC's `RESOURCE_EXHAUSTED`). No timing is asserted: the rules refill 5 a second, so the
//! loop only stops at a refusal, however slow the machine.

mod http_support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use http_support::{send, BoxError};

/// A started example, killed when dropped.
struct Running {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the example `name` (built by `cargo test` next to this test's binary) on
/// 127.0.0.1:0 and reads the address it prints.
fn start(name: &str) -> Result<Running, BoxError> {
    let mut path: PathBuf = std::env::current_exe()?;
    path.pop(); // the test binary
    path.pop(); // deps/
    path.push("examples");
    path.push(name);
    let mut child = Command::new(&path)
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "{}: {e} (a whole `cargo test` builds the examples; with a test filter, \
                 `cargo build -p tollgate-http --examples` first)",
                path.display()
            )
        })?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let running = Running {
        addr: line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("{name} printed {line:?}"))?
            .parse()?,
        child,
    };
    Ok(running)
}

/// The most requests a test sends waiting for a refusal.
const MAX: usize = 10_000;

/// Sends GET / to `addr` until it is refused, checking every answer on the way.
async fn http_until_refused(addr: SocketAddr) -> Result<(), BoxError> {
    for i in 0..MAX {
        let reply = send(addr, "/", &[]).await?;
        if reply.status == 429 {
            assert!(
                i >= 10,
                "refused after {i} requests, inside the burst of 10"
            );
            let retry: u64 = reply.header("retry-after").parse()?;
            assert_eq!(retry, 1);
            assert!(reply
                .header("ratelimit")
                .starts_with("\"per-client\";r=0;t="));
            return Ok(());
        }
        assert_eq!((reply.status.as_u16(), reply.body.as_str()), (200, "hello"));
        assert!(reply.header("ratelimit").starts_with("\"per-client\";r="));
    }
    Err(format!("{MAX} requests, none refused").into())
}

#[tokio::test]
async fn axum_service_example() -> Result<(), BoxError> {
    let running = start("axum_service")?;
    http_until_refused(running.addr).await
}

#[tokio::test]
async fn hyper_service_example() -> Result<(), BoxError> {
    let running = start("hyper_service")?;
    http_until_refused(running.addr).await
}

#[cfg(feature = "tonic")]
#[tokio::test]
async fn tonic_service_example() -> Result<(), BoxError> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let running = start("tonic_service")?;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", running.addr))?
        .connect()
        .await?;
    let mut health = HealthClient::new(channel);
    for i in 0..MAX {
        let call = HealthCheckRequest {
            service: String::new(),
        };
        match health.check(call).await {
            Ok(reply) => assert_eq!(reply.into_inner().status(), ServingStatus::Serving),
            Err(status) => {
                assert!(i >= 10, "refused after {i} calls, inside the burst of 10");
                assert_eq!(status.code(), tonic::Code::ResourceExhausted);
                assert_eq!(
                    status.metadata().get("retry-after").map(|v| v.as_bytes()),
                    Some(&b"1"[..])
                );
                return Ok(());
            }
        }
    }
    Err(format!("{MAX} calls, none refused").into())
}
