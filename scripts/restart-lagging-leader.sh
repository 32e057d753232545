#!/usr/bin/env bash
# Reproduces a restart from disk whose etcd names a replica that lags (docs/RESULTS.md, "A
# restart whose etcd names a lagging replica"), and runs `cluster up` over it with two
# binaries from the same state: 1 shard x 3 replicas (tcp, 1 worker) on ports from $RANDOM,
# 20 SETs through replica 0's Redis port (redis-cli), kill -9 of replica 2, SETs until replica
# 0's journal holds 600 records more than replica 2's (one 48-byte chosen hint per chosen
# slot), `cluster down`, etcd made to name replica 2 in a new epoch (etcdctl, as a failed
# restart left it). The run directory is copied; `up` with BASE over one copy, with NEW over
# the other, each followed (when it serves) by a GET of every acknowledged key through the
# leader's Redis port and `cluster digest`. A binary without the fix fails after about 145 s.
# usage: scripts/restart-lagging-leader.sh BASE_SHOAL NEW_SHOAL WORKDIR  (needs etcd, etcdctl,
# redis-cli; WORKDIR is deleted first)
set -u
BASE=$(realpath "$1"); NEW=$(realpath "$2"); W=$3  # absolute: the script works in W
scripts="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$W"; mkdir -p "$W"; cd "$W"
P=$((20000 + RANDOM % 5000))
RESP_EVERY=1 "$scripts/one-shard-config.sh" pick "$P" $((P + 10)) > c.toml
echo "+ shoal cluster up --config c.toml --run-dir run --workload micro --keys-per-partition 20000"
$NEW cluster up --config c.toml --run-dir run --workload micro --keys-per-partition 20000 | grep -E "loaded|cluster '"
for i in $(seq 1 20); do redis-cli -p $((P+10)) SET before-$i v$i >/dev/null; done
echo "+ 20 SETs (before-1..20) through replica 0's Redis port; kill -9 replica 2"
kill -9 "$(cat run/shard-0-replica-2.pid)"; sleep 0.5
n=0
while [ $(( ($(stat -c %s run/shard-0-replica-0/stream-0.acc) - $(stat -c %s run/shard-0-replica-2/stream-0.acc)) / 48 )) -lt 600 ]; do
  n=$((n+1)); redis-cli -p $((P+10)) SET after-$n w$n >/dev/null
done
echo "+ $n more SETs (after-1..$n) until replica 0's journal holds 600 records more than replica 2's"
echo "+ shoal cluster down"
$NEW cluster down --config c.toml --run-dir run | tail -1
EP=127.0.0.1:$((P+20))
etcd --name=pick --data-dir=run/etcd --listen-client-urls=http://$EP --advertise-client-urls=http://$EP \
  --listen-peer-urls=http://127.0.0.1:$((P+21)) --initial-advertise-peer-urls=http://127.0.0.1:$((P+21)) \
  --initial-cluster=pick=http://127.0.0.1:$((P+21)) --initial-cluster-state=new > etcd-by-hand.log 2>&1 &
EPID=$!
sleep 2
E=$(ETCDCTL_API=3 etcdctl --endpoints=$EP get /shoal/pick/epoch --print-value-only | sed 's/[^0-9]//g')
E=$((E+1))
ETCDCTL_API=3 etcdctl --endpoints=$EP put /shoal/pick/epoch "{\"epoch\":$E}" >/dev/null
ETCDCTL_API=3 etcdctl --endpoints=$EP put /shoal/pick/shards/0 "{\"leader_replica\":2,\"members\":[0,1,2],\"since_epoch\":$E}" >/dev/null
echo "+ etcd (etcdctl put): $(ETCDCTL_API=3 etcdctl --endpoints=$EP get /shoal/pick/epoch --print-value-only) $(ETCDCTL_API=3 etcdctl --endpoints=$EP get /shoal/pick/shards/0 --print-value-only)"
kill $EPID; wait $EPID
cp -a run run-copy
for which in base new; do
  if [ $which = base ]; then B=$BASE; D=run; else B=$NEW; D=run-copy; fi
  echo "+ [$which] time shoal cluster up --config c.toml --run-dir $D    (load: $(cut -d' ' -f1-3 /proc/loadavg))"
  start=$(date +%s.%N)
  $B cluster up --config c.toml --run-dir $D > up-$which.out 2>&1
  rc=$?
  end=$(date +%s.%N)
  sed 's/^/  /' up-$which.out | cut -c1-400
  echo "  rc=$rc after $(echo "$end - $start" | bc | cut -c1-5) s"
  if [ $rc = 0 ]; then
    L=$($B cluster status --config c.toml --run-dir $D | grep -o 'leaders: shard 0 replica [0-9]' | tail -c 2)
    echo "+ [$which] cluster status: leader replica $L"
    missing=0
    for i in $(seq 1 20); do [ "$(redis-cli -p $((P+10+L)) GET before-$i)" = v$i ] || missing=$((missing+1)); done
    for i in $(seq 1 $n); do [ "$(redis-cli -p $((P+10+L)) GET after-$i)" = w$i ] || missing=$((missing+1)); done
    echo "+ [$which] GET of all $((20+n)) acknowledged keys through replica $L's Redis port: $missing missing"
    sleep 1; echo "+ [$which] shoal cluster digest"; $B cluster digest --config c.toml --run-dir $D | sed 's/^/  /' | tail -4
  fi
  $B cluster down --config c.toml --run-dir $D | tail -1
done
