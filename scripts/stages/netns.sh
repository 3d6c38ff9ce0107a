#!/usr/bin/env bash
# A fleet on a real network (issue 31): processes in their own network namespaces reach a
# redis-server in the root namespace across veth pairs, through the test kit's delaying TCP
# proxy (redis/tests/redis_support/delay_proxy.rs; the kernel here has no netem), at round
# trips of 0.5 ms and 2 ms. Runs the ignored test `netns_fleet` of
# redis/tests/redis_netns.rs: decisions per second of the plain and the leased store, the
# admission bound (fixed window and GCRA), then a partition (`ip link set … down`) and a
# heal; see that file's docs for what is asserted. Counts only, the table is printed
# (docs/benchmarks.md, "A fleet on a real network"). About 2 minutes with the defaults.
#
# Needs root and network namespaces (iproute2 comes with Debian); where `ip netns add` is
# refused (a container without CAP_NET_ADMIN, not root) it says why and passes. Sizes:
# TOLLGATE_NETNS_PROCESSES (3), TOLLGATE_NETNS_SECS (3 per run), TOLLGATE_NETNS_RTTS_US
# (500,2000), TOLLGATE_NETNS_PARTITION_SECS (3), TOLLGATE_NETNS_HEAL_SECS (5).
set -euo pipefail
cd "$(dirname "$0")/../.."

skip() {
  echo "netns stage skipped: $*"
  exit 0
}
[ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
command -v ip >/dev/null || skip "no \`ip\` (iproute2)"

# Every namespace and link of this run carries the tag; whatever a killed run leaves is
# removed on exit (the test removes its own on drop, also when it fails).
tag="tgs$$"
export TOLLGATE_NETNS_TAG="$tag"
cleanup() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$tag" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$tag" || true); do
    ip link del "$link" 2>/dev/null || true
  done
}
trap cleanup EXIT
if ! err=$(ip netns add "${tag}probe" 2>&1); then
  skip "\`ip netns add\` fails here: $err"
fi
ip netns del "${tag}probe"

start=$(date +%s)
# timeout signals its whole process group: cargo, the test and the fleet's processes.
timeout -k 10 600 cargo test -p tollgate-redis --test redis_netns -- \
  --ignored --exact netns_fleet --nocapture --test-threads 1
echo "netns: passed in $(( $(date +%s) - start )) s"
