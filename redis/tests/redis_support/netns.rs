//! `Netns`: network namespaces for a fleet on a real network. Each process gets its own
//! namespace, joined to the root namespace by a veth pair with a /30 of 198.18.0.0/15 (the
//! range set aside for benchmarks, RFC 2544); the root side's address is where the
//! process reaches Redis (through a `DelayProxy` listening there). Names carry a tag
//! unique to the run (`TOLLGATE_NETNS_TAG`, default `tg` and the process id), so runs on
//! one machine do not collide and a script can remove what a killed run left; `Drop`
//! removes every namespace and link, also when a test panics.
//!
//! A partition is the root side of a link set down (`ip link set … down`): the process's
//! packets are dropped without an answer, as on a cut cable, until it is set up again.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// One process's namespace and link.
pub(crate) struct Link {
    /// The namespace's name.
    pub(crate) ns: String,
    /// The veth end in the root namespace.
    pub(crate) host_if: String,
    /// The veth end in the namespace.
    pub(crate) ns_if: String,
    /// The root side's address (where the process reaches the proxy).
    pub(crate) host_addr: Ipv4Addr,
    /// The namespace side's address.
    pub(crate) ns_addr: Ipv4Addr,
}

/// Namespaces and links of one run; removed on drop.
pub(crate) struct Netns {
    links: Vec<Link>,
}

/// Runs `ip` with `args`: its error output if it fails.
pub(crate) fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The run's tag: `TOLLGATE_NETNS_TAG` or `tg<pid>` (at most 10 characters, so
/// interface names stay within the kernel's 15).
pub(crate) fn tag() -> String {
    std::env::var("TOLLGATE_NETNS_TAG").unwrap_or_else(|_| format!("tg{}", std::process::id()))
}

/// Why namespaces cannot be used here, if they cannot: not root, no `ip`, or `ip netns
/// add` refused (a container without the capability).
pub(crate) fn unavailable() -> Option<String> {
    let probe = format!("{}probe", tag());
    if let Err(e) = ip(&["netns", "add", &probe]) {
        return Some(format!("`ip netns add` fails here ({e})"));
    }
    let link = format!("{}pv", tag());
    let veth = ip(&[
        "link",
        "add",
        &link,
        "type",
        "veth",
        "peer",
        "name",
        &format!("{link}x"),
        "netns",
        &probe,
    ]);
    let _ = ip(&["link", "del", &link]);
    let _ = ip(&["netns", "del", &probe]);
    veth.err()
        .map(|e| format!("veth pairs cannot be made here ({e})"))
}

impl Netns {
    /// `n` namespaces, each linked to the root namespace and up.
    pub(crate) fn create(n: usize) -> Result<Netns, String> {
        assert!((1..=16).contains(&n), "1 to 16 namespaces");
        let tag = tag();
        assert!(tag.len() <= 10, "TOLLGATE_NETNS_TAG longer than 10: {tag}");
        // 64 addresses per run, placed by the process id.
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (std::process::id() % 2048) * 64;
        let mut net = Netns { links: Vec::new() };
        for i in 0..n {
            let at = base + 4 * i as u32;
            let link = Link {
                ns: format!("{tag}n{i}"),
                host_if: format!("{tag}h{i}"),
                ns_if: format!("{tag}p{i}"),
                host_addr: Ipv4Addr::from(at + 1),
                ns_addr: Ipv4Addr::from(at + 2),
            };
            ip(&["netns", "add", &link.ns])?;
            let ns = link.ns.clone();
            let host_if = link.host_if.clone();
            // Pushed now, so a failure below still removes it.
            net.links.push(link);
            let link = net.links.last().expect("just pushed");
            ip(&[
                "link",
                "add",
                &host_if,
                "type",
                "veth",
                "peer",
                "name",
                &link.ns_if,
                "netns",
                &ns,
            ])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/30", link.host_addr),
                "dev",
                &host_if,
            ])?;
            ip(&["link", "set", &host_if, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/30", link.ns_addr),
                "dev",
                &link.ns_if,
            ])?;
            ip(&["-n", &ns, "link", "set", &link.ns_if, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    pub(crate) fn links(&self) -> &[Link] {
        &self.links
    }

    /// Cuts (`up == false`) or heals link `i`: its root side set down or up.
    pub(crate) fn set_link(&self, i: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        ip(&["link", "set", &self.links[i].host_if, state]).expect("ip link set");
    }

    /// A command running `program` in namespace `i` (`ip netns exec`, which keeps the
    /// environment).
    pub(crate) fn command(&self, i: usize, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.links[i].ns]).arg(program);
        cmd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for link in &self.links {
            // Deleting one end of a veth pair deletes both.
            let _ = ip(&["link", "del", &link.host_if]);
            let _ = ip(&["netns", "del", &link.ns]);
        }
    }
}
