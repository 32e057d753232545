#include "src/repl/compaction.h"

#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "src/repl/acceptor_log.h"
#include "src/repl/checkpoint.h"
#include "src/repl/replay.h"

namespace shoal::repl {
namespace {

std::unique_ptr<txn::Engine> fresh_engine(const CompactionInput& in, Status* created) {
  txn::EngineOptions eo;
  eo.epoch_ticker = false;  // replay installs the log's TIDs; it never makes its own
  eo.shard_id = in.shard;
  // The live engine runs beside it: its versions stay EBR's to free (engine.h).
  eo.drain_reclamation_on_destroy = false;
  auto engine = std::make_unique<txn::Engine>(eo);
  *created = in.schema.create_tables(*engine);
  return engine;
}

}  // namespace

Result<CompactionResult> compact_replica_dir(const CompactionInput& in) {
  SHOAL_ASSERT(in.through_segment.size() == in.streams, "%zu segment bounds for %u streams",
               in.through_segment.size(), in.streams);
  CompactionResult out;
  Status created;
  std::unique_ptr<txn::Engine> engine = fresh_engine(in, &created);
  SHOAL_TRY(created);
  // The newest checkpoint that loads, as a restart picks it (Follower::load_newest_checkpoint):
  // one refused is said on stderr and the one before it tried.
  std::optional<ReplayCut> cut;
  auto seqs = list_checkpoints(in.dir);
  if (!seqs.ok()) return seqs.status();
  for (auto it = seqs->rbegin(); it != seqs->rend() && !cut; ++it) {  // bounded: the files
    if (*it >= in.seq) continue;
    auto loaded = load_checkpoint(checkpoint_path(in.dir, *it), *engine, in.streams);
    if (loaded.ok()) {
      cut = std::move(*loaded);
      out.base_seq = *it;
      continue;
    }
    std::fprintf(stderr, "replication: compaction: %s; trying the previous checkpoint\n",
                 loaded.status().to_string().c_str());
    engine = fresh_engine(in, &created);  // a refused file may have installed some rows
    SHOAL_TRY(created);
  }
  ReplayApplier applier(*engine, in.streams);
  if (cut) applier.restore(*cut);
  // Each stream's chosen slots above the cut, as Follower::open replays a recovered WAL; the
  // applier holds back what the shard watermark does not cover yet, so its cut is exact.
  for (uint32_t s = 0; s < in.streams; ++s) {
    const uint64_t covered = cut ? cut->streams[s].next_slot - 1 : 0;
    PaxosAcceptorStore store;
    auto rec = AcceptorLog::recover_closed(in.dir, s, in.through_segment[s], store, covered);
    if (!rec.ok()) return rec.status();
    const PaxosSlot* next = store.find(covered + 1);
    if (rec->slots > 0 && (next == nullptr || next->value.empty())) {
      return Status::Corruption(fmt::format(
          "compaction of {}: stream {} resumes at slot {}, which its WAL lacks (truncated "
          "behind a checkpoint that no longer loads)",
          in.dir, s, covered + 1));
    }
    for (uint64_t slot = covered + 1; slot <= rec->chosen_index; ++slot) {
      if ((slot & 63) == 0 && in.stop != nullptr && in.stop->load(std::memory_order_acquire)) {
        return Status::Aborted("compaction: stopped");
      }
      const PaxosSlot* p = store.find(slot);
      SHOAL_ASSERT(p != nullptr && !p->value.empty(), "recovered chosen slot %lu missing", slot);
      applier.on_chosen(s, p->value.span());
      ++out.slots;
    }
  }
  const ReplayCut at = applier.cut();
  for (const StreamCut& sc : at.streams) out.covered.push_back(sc.next_slot - 1);
  out.applied_tid = at.applied_tid;
  const std::string path = checkpoint_path(in.dir, in.seq);
  const std::string tmp = path + ".tmp";
  auto written = write_checkpoint(tmp, *engine, at);
  Status published = written.ok() ? publish_checkpoint(tmp, path) : written.status();
  if (!published.ok()) {
    std::remove(tmp.c_str());
    return published;
  }
  out.rows = written->rows;
  out.bytes = written->bytes;
  return out;
}

}  // namespace shoal::repl
