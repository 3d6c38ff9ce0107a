//! `DelayProxy`: a TCP proxy of the test kit that adds latency where the kernel cannot (no
//! `netem` qdisc here). It listens on an address and connects each client to the
//! upstream; each direction of each connection is read by one thread and written by
//! another, every chunk held back by the one-way delay from the moment it was read, in
//! order (a channel between the two). When either side closes (or fails), the other side
//! is closed after the same delay: both sockets are shut down, and the four threads end.
//!
//! A round trip through it takes the upstream's time plus twice the one-way delay (plus
//! the sleeps' overshoot, some tens of µs on Linux). The delay can be changed while it
//! runs ([`DelayProxy::set_one_way`]): chunks read from then on are held back by the new
//! one.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A running proxy; dropping it stops accepting and closes every connection.
pub(crate) struct DelayProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// What the accept thread and the connections share with the handle.
struct Shared {
    stop: AtomicBool,
    /// Every socket the proxy opened (both ends of each connection), to shut down on drop.
    sockets: Mutex<Vec<TcpStream>>,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// The one-way delay, in ns.
    one_way_ns: AtomicU64,
}

impl DelayProxy {
    /// Listens on `listen` (port 0: any free port) and forwards to `upstream`, each
    /// direction delayed by `one_way`.
    pub(crate) fn start(
        listen: SocketAddr,
        upstream: SocketAddr,
        one_way: Duration,
    ) -> io::Result<DelayProxy> {
        let listener = TcpListener::bind(listen)?;
        // Polled, so a drop never waits on a blocked accept.
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            one_way_ns: AtomicU64::new(nanos(one_way)),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("delay-proxy".into())
                .spawn(move || accept_loop(&listener, upstream, &shared))?
        };
        Ok(DelayProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds every chunk read from now on (both directions, every connection) by
    /// `one_way`.
    pub(crate) fn set_one_way(&self, one_way: Duration) {
        // Relaxed: read per chunk; nothing else is published with it.
        self.shared
            .one_way_ns
            .store(nanos(one_way), Ordering::Relaxed);
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> u64 {
        // Relaxed: a statistic.
        self.shared.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // Relaxed: the accept thread polls it; the join orders the rest.
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for s in self
            .shared
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// `d` in ns (saturating).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn accept_loop(listener: &TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    // Relaxed: see `Drop`.
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(shared);
                // Connecting may take a while (an unreachable upstream): not on this thread.
                let _ = thread::Builder::new()
                    .name("delay-proxy-conn".into())
                    .spawn(move || connect(client, upstream, &shared));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Connects `client` to the upstream and starts its two directions.
fn connect(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) {
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nonblocking(false);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let clones = (|| {
        let mut sockets = shared
            .sockets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sockets.push(client.try_clone()?);
        sockets.push(server.try_clone()?);
        Ok::<_, io::Error>([
            (client.try_clone()?, server.try_clone()?),
            (server.try_clone()?, client.try_clone()?),
        ])
    })();
    let Ok(directions) = clones else {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
        return;
    };
    for (from, to) in directions {
        pump(from, to, Arc::clone(shared));
    }
}

/// One direction: a reader thread stamps each chunk with its due time and queues it; a
/// writer thread sends it when due. The end of the stream (or an error) is queued too:
/// when it is due, both sockets are shut down.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>) {
    let (tx, rx) = mpsc::channel::<(Instant, Option<Vec<u8>>)>();
    let _ = thread::Builder::new()
        .name("delay-proxy-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            // Relaxed: see `set_one_way`.
            let one_way = || Duration::from_nanos(shared.one_way_ns.load(Ordering::Relaxed));
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send((Instant::now() + one_way(), None));
                        return;
                    }
                    Ok(n) => {
                        if tx
                            .send((Instant::now() + one_way(), Some(buf[..n].to_vec())))
                            .is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
    let _ = thread::Builder::new()
        .name("delay-proxy-write".into())
        .spawn(move || {
            for (due, chunk) in rx {
                let wait = due.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    thread::sleep(wait);
                }
                let done = match chunk {
                    Some(bytes) => to.write_all(&bytes).is_err(),
                    None => true,
                };
                if done {
                    break;
                }
            }
            // Either side closed: close both (the other direction's reader then ends).
            let _ = to.shutdown(Shutdown::Both);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback: every connection gets back what it sends.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let _ = io::copy(&mut reader, &mut stream);
                });
            }
        });
        addr
    }

    fn proxy(one_way: Duration) -> DelayProxy {
        DelayProxy::start("127.0.0.1:0".parse().unwrap(), echo_server(), one_way).unwrap()
    }

    #[test]
    fn a_round_trip_takes_at_least_twice_the_one_way_delay() {
        let one_way = Duration::from_millis(15);
        let p = proxy(one_way);
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_nodelay(true).unwrap();
        let mut rtts = Vec::new();
        for i in 0..5u8 {
            let began = Instant::now();
            c.write_all(&[i; 3]).unwrap();
            let mut back = [0u8; 3];
            c.read_exact(&mut back).unwrap();
            rtts.push(began.elapsed());
            assert_eq!(back, [i; 3]);
        }
        println!("round trips through a 15 ms one-way proxy: {rtts:?}");
        // A lower bound only: the proxy never sends a chunk before it is due.
        assert!(rtts.iter().all(|&rtt| rtt >= 2 * one_way), "{rtts:?}");
        assert_eq!(p.accepted(), 1);
    }

    #[test]
    fn a_changed_delay_holds_back_what_is_read_from_then_on() {
        let p = proxy(Duration::ZERO);
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_nodelay(true).unwrap();
        let one_way = Duration::from_millis(25);
        p.set_one_way(one_way);
        let began = Instant::now();
        c.write_all(b"abc").unwrap();
        let mut back = [0u8; 3];
        c.read_exact(&mut back).unwrap();
        let rtt = began.elapsed();
        assert_eq!(&back, b"abc");
        // A lower bound only, as above.
        assert!(rtt >= 2 * one_way, "{rtt:?}");
    }

    #[test]
    fn bytes_arrive_intact_and_in_order() {
        let p = proxy(Duration::from_micros(300));
        let c = TcpStream::connect(p.addr()).unwrap();
        let total = 2 * 1024 * 1024;
        let data: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
        let mut writer = c.try_clone().unwrap();
        let sent = data.clone();
        let w = thread::spawn(move || {
            // Uneven chunks, so chunk and read boundaries never line up.
            let mut at = 0;
            let mut size = 1;
            while at < sent.len() {
                let end = (at + size).min(sent.len());
                writer.write_all(&sent[at..end]).unwrap();
                at = end;
                size = size * 7 % 65_521 + 1;
            }
        });
        let mut back = vec![0u8; total];
        (&c).read_exact(&mut back).unwrap();
        w.join().unwrap();
        assert!(back == data, "the bytes came back changed or reordered");
    }

    #[test]
    fn a_side_that_closes_closes_the_other() {
        // Upstream accepts and closes at once: the client reads the end of the stream.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = listener.local_addr().unwrap();
        let closer = thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            drop(s);
        });
        let p = DelayProxy::start(
            "127.0.0.1:0".parse().unwrap(),
            upstream,
            Duration::from_millis(1),
        )
        .unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 8];
        let n = c.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the client should see the end of the stream");
        closer.join().unwrap();
    }
}
