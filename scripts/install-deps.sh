#!/usr/bin/env bash
# Installs every Debian 12 package Shoal needs to build, test and benchmark. Idempotent: does
# nothing when all are present. Needs root (or sudo) only when something is missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libcli11-dev libtomlplusplus-dev
  libabsl-dev libxxhash-dev libmimalloc-dev liburing-dev nlohmann-json3-dev
  # The fabric transport (src/net/fabric_transport.h) links libfabric (1.17: net, tcp;ofi_rxm,
  # sockets, udp;ofi_rxd and shm providers, no NIC needed); libfabric-bin has fi_info.
  libfabric-dev libfabric-bin
  # The configuration manager (src/cluster/config_manager.h): etcd 3.4 as the server and
  # etcdctl to inspect it; libcurl for EtcdConfigManager's requests to its JSON gateway.
  etcd-server etcd-client libcurl4-openssl-dev
  # Cluster authentication (src/net/auth.h): HMAC-SHA256 from OpenSSL's libcrypto.
  libssl-dev
  # The Redis protocol layer (src/resp) is tested against the real thing: redis-server (its
  # replies, byte for byte), redis-cli and the hiredis client library.
  redis-server redis-tools libhiredis-dev
  # Metrics (src/ops): libmicrohttpd serves /metrics; prometheus ships promtool, which the
  # tests run on the exposition text.
  libmicrohttpd-dev prometheus
  # Plots of bench runs (scripts/plot-bench.py).
  python3-matplotlib
  # The libFuzzer targets (src/net/fuzz, src/repl/fuzz, src/resp/fuzz) build with clang and its runtime.
  clang libclang-rt-14-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -q
$sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
