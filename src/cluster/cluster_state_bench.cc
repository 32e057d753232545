// What a new leader's etcd writes cost on its failover path: the takeover record (final
// watermark, floor, FVW) in one txn (ClusterStateStore::publish_takeover) against the three
// written-once calls it replaced, on a real etcd started in a temporary directory. Each
// iteration first moves the epoch (untimed), since the record's keys are written once per epoch.
#include <benchmark/benchmark.h>
#include <memory>
#include <string>

#include "src/base/temp_dir.h"
#include "src/cluster/cluster_state.h"
#include "src/cluster/etcd_config_manager.h"
#include "src/cluster/etcd_process.h"

namespace shoal::cluster {
namespace {

// One etcd for the whole binary (starting one takes about a second); it stops, and its
// directory goes, when the binary exits.
struct Etcd {
  TempDir dir{"shoal-cluster-bench"};
  std::unique_ptr<EtcdProcess> process;
  std::unique_ptr<EtcdConfigManager> manager;

  Etcd() {
    EtcdProcessOptions po;
    po.data_dir = dir.path() + "/etcd";
    auto p = EtcdProcess::start(po);
    SHOAL_ASSERT(p.ok(), "etcd: %s", p.status().to_string().c_str());
    process = std::move(*p);
    auto m = EtcdConfigManager::create(EtcdOptions{{process->endpoint()}, 5000, 10});
    SHOAL_ASSERT(m.ok(), "etcd client: %s", m.status().to_string().c_str());
    manager = std::move(*m);
  }
};

Etcd& etcd() {
  static Etcd e;
  return e;
}

// Shard 0 changes leader every iteration (replica 1 <-> 2); returns the new leader.
uint32_t next_epoch(ClusterStateStore& store, uint64_t* epoch) {
  auto state = store.load_state();
  SHOAL_ASSERT(state.ok(), "load_state: %s", state.status().to_string().c_str());
  const uint32_t leader = state->shards[0].leader_replica == 1 ? 2 : 1;
  auto change = store.begin_epoch_change(state->epoch, 0, leader);
  SHOAL_ASSERT(change.ok() && change->won, "epoch change");
  *epoch = state->epoch + 1;
  return leader;
}

ClusterStateStore fresh_store(const char* name) {
  ClusterStateStore store(*etcd().manager, name);
  std::vector<ShardState> shards(2, ShardState{0, {0, 1, 2}, 0, 0});
  auto init = store.initialize(shards);
  SHOAL_ASSERT(init.ok(), "initialize: %s", init.status().to_string().c_str());
  return store;
}

// Times `record(store, epoch, leader)` for the failover that ended epoch - 1, each iteration on
// an epoch moved first (untimed).
template <typename Record>
void time_takeover_records(benchmark::State& state, const char* name, Record record) {
  ClusterStateStore store = fresh_store(name);
  for (auto _ : state) {
    state.PauseTiming();
    uint64_t epoch = 0;
    const uint32_t leader = next_epoch(store, &epoch);
    state.ResumeTiming();
    record(store, epoch, leader);
  }
}

void BM_TakeoverRecordOneTxn(benchmark::State& state) {
  time_takeover_records(
      state, "one", [](ClusterStateStore& store, uint64_t epoch, uint32_t leader) {
        auto r = store.publish_takeover(epoch - 1, 0, 1000 + epoch, 2000 + epoch, leader, epoch);
        SHOAL_ASSERT(r.ok(), "publish_takeover: %s", r.status().to_string().c_str());
      });
}
BENCHMARK(BM_TakeoverRecordOneTxn)->Unit(benchmark::kMillisecond)->Iterations(60);

void BM_TakeoverRecordThreeWrites(benchmark::State& state) {
  time_takeover_records(
      state, "three", [](ClusterStateStore& store, uint64_t epoch, uint32_t leader) {
        auto fw =
            store.publish_final_watermark_as_leader(epoch - 1, 0, 1000 + epoch, leader, epoch);
        SHOAL_ASSERT(fw.ok(), "final watermark: %s", fw.status().to_string().c_str());
        auto fl = store.publish_epoch_floor(epoch - 1, 0, 2000 + epoch);
        SHOAL_ASSERT(fl.ok(), "floor: %s", fl.status().to_string().c_str());
        auto fvw = store.publish_fvw(epoch - 1, {*fw, kInfiniteWatermark});
        SHOAL_ASSERT(fvw.ok(), "fvw: %s", fvw.status().to_string().c_str());
      });
}
BENCHMARK(BM_TakeoverRecordThreeWrites)->Unit(benchmark::kMillisecond)->Iterations(60);

}  // namespace
}  // namespace shoal::cluster
