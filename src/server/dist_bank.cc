#include "src/server/dist_bank.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "src/check/serializability.h"

namespace shoal::server {

void pick_bank_txn(const KeyLayout& layout, uint32_t home, bool cross, Rng& rng, BankArgs* out) {
  MicroArgs m;
  pick_keys(layout, home, cross, rng, &m);  // cross: 2 from home, then 2 from another shard
  out->audit = rng.uniform(0, 99) < kBankAuditPct;
  for (uint32_t i = 0; i < kBankAuditKeys; ++i) {
    out->keys[i] = m.keys[i];
    out->shards[i] = m.shards[i];
  }
  out->count = out->audit ? kBankAuditKeys : 2;
  out->amount = static_cast<int64_t>(rng.uniform(1, 20));
  if (out->audit) return;
  if (cross) {  // one account here, one there
    out->keys[1] = m.keys[2];
    out->shards[1] = m.shards[2];
  }
  if (rng.uniform(0, 1) == 1) {  // either direction
    std::swap(out->keys[0], out->keys[1]);
    std::swap(out->shards[0], out->shards[1]);
  }
}

rt::Task<Status> dist_bank(dist::DistTxn& txn, const void* raw_args, void* result) {
  const auto& a = *static_cast<const BankArgs*>(raw_args);
  auto& rec = *static_cast<BankTxnRecord*>(result);
  rec.id = txn.id();
  rec.reads = rec.writes = 0;
  BankAccount acc[kBankAuditKeys];
  for (uint32_t i = 0; i < a.count; ++i) {
    SHOAL_CO_TRY(
        co_await txn.get(a.shards[i], kBankTableId, &a.keys[i], 1, &acc[i], sizeof(BankAccount)));
    rec.read_key[rec.reads] = a.keys[i];
    rec.read_seq[rec.reads] = acc[i].seq;
    rec.read_writer[rec.reads] = acc[i].writer;
    ++rec.reads;
  }
  if (a.audit) co_return Status::Ok();
  acc[0].balance -= a.amount;
  acc[1].balance += a.amount;
  for (uint32_t i = 0; i < 2; ++i) {
    acc[i].seq += 1;
    acc[i].writer = txn.id();
    SHOAL_CO_TRY(txn.put(a.shards[i], kBankTableId, &a.keys[i], 1, &acc[i], sizeof(BankAccount)));
    rec.write_key[rec.writes] = a.keys[i];
    rec.write_seq[rec.writes] = acc[i].seq;
    ++rec.writes;
  }
  co_return Status::Ok();
}

size_t BankHistory::page(size_t from, size_t max_bytes, std::string* out) const {
  fmt::memory_buffer one;
  size_t i = from;
  for (; i < txns_.size(); ++i) {
    const BankTxnRecord& t = txns_[i];
    one.clear();
    fmt::format_to(std::back_inserter(one), "{}[{},{}", out->empty() ? "" : ",", t.id, t.reads);
    for (uint32_t r = 0; r < t.reads; ++r) {
      fmt::format_to(std::back_inserter(one), ",{},{},{}", t.read_key[r], t.read_seq[r],
                     t.read_writer[r]);
    }
    fmt::format_to(std::back_inserter(one), ",{}", t.writes);
    for (uint32_t w = 0; w < t.writes; ++w) {
      fmt::format_to(std::back_inserter(one), ",{},{}", t.write_key[w], t.write_seq[w]);
    }
    one.push_back(']');
    if (out->size() + one.size() > max_bytes) break;
    out->append(one.data(), one.size());
  }
  return i;
}

Status parse_bank_page(const nlohmann::json& txns, std::vector<check::TxnRecord>* out) {
  if (!txns.is_array()) return Status::InvalidArgument("history.txns: not a list");
  for (const auto& t : txns) {
    const auto bad = [&t] {
      return Status::InvalidArgument(fmt::format("history.txns: bad entry {:.80}", t.dump()));
    };
    if (!t.is_array() || t.size() < 3) return bad();
    for (const auto& n : t) {
      if (!n.is_number_unsigned()) return bad();
    }
    check::TxnRecord rec;
    rec.id = t[0].get<uint64_t>();
    const size_t reads = t[1].get<size_t>();
    size_t at = 2;
    if (reads > kBankAuditKeys || t.size() < at + 3 * reads + 1) return bad();
    for (size_t r = 0; r < reads; ++r, at += 3) {
      rec.read(t[at].get<uint64_t>(), t[at + 1].get<uint64_t>(), t[at + 2].get<uint64_t>());
    }
    const size_t writes = t[at++].get<size_t>();
    if (writes > 2 || t.size() != at + 2 * writes) return bad();
    for (size_t w = 0; w < writes; ++w, at += 2) {
      rec.write(t[at].get<uint64_t>(), t[at + 1].get<uint64_t>());
    }
    out->push_back(std::move(rec));
  }
  return Status::Ok();
}

size_t drop_unrecorded_readers(check::History* history) {
  std::vector<check::TxnRecord>& txns = history->txns;
  std::unordered_set<check::TxnId> recorded;
  std::unordered_map<check::TxnId, std::vector<size_t>> readers;  // writer id -> reader indexes
  recorded.reserve(txns.size());
  for (const check::TxnRecord& t : txns) recorded.insert(t.id);
  std::vector<bool> drop(txns.size(), false);
  std::vector<size_t> work;
  for (size_t i = 0; i < txns.size(); ++i) {
    for (const check::Op& op : txns[i].ops) {
      if (op.kind != check::OpKind::kRead || op.writer == check::kInitialTxn) continue;
      readers[op.writer].push_back(i);
      if (!drop[i] && !recorded.contains(op.writer)) {
        drop[i] = true;
        work.push_back(i);
      }
    }
  }
  while (!work.empty()) {
    const size_t i = work.back();
    work.pop_back();
    auto it = readers.find(txns[i].id);
    if (it == readers.end()) continue;
    for (size_t r : it->second) {
      if (!drop[r]) {
        drop[r] = true;
        work.push_back(r);
      }
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < txns.size(); ++i) {
    if (drop[i]) continue;
    if (kept != i) txns[kept] = std::move(txns[i]);  // a self-move would empty the ops
    ++kept;
  }
  const size_t removed = txns.size() - kept;
  txns.resize(kept);
  return removed;
}

size_t add_stand_ins(check::History* history) {
  std::unordered_set<check::TxnId> recorded;
  recorded.reserve(history->txns.size());
  for (const check::TxnRecord& t : history->txns) recorded.insert(t.id);
  // Unrecorded writer -> the (key, version) pairs read from it, each once, in first-read order.
  std::unordered_map<check::TxnId, std::vector<std::pair<uint64_t, uint64_t>>> seen;
  std::vector<check::TxnId> order;
  for (const check::TxnRecord& t : history->txns) {
    for (const check::Op& op : t.ops) {
      if (op.kind != check::OpKind::kRead || op.writer == check::kInitialTxn ||
          op.writer == check::kUnknownWriter || recorded.contains(op.writer)) {
        continue;
      }
      auto [it, fresh] = seen.try_emplace(op.writer);
      if (fresh) order.push_back(op.writer);
      const std::pair<uint64_t, uint64_t> kv{op.key, op.version};
      if (std::find(it->second.begin(), it->second.end(), kv) == it->second.end()) {
        it->second.push_back(kv);
      }
    }
  }
  for (check::TxnId id : order) {
    check::TxnRecord stand_in;
    stand_in.id = id;
    for (const auto& [key, version] : seen[id]) stand_in.write(key, version);
    history->txns.push_back(std::move(stand_in));
  }
  return order.size();
}

void check_bank_history(check::History history, uint64_t unrecorded, const BankHistoryNotes& notes,
                        std::vector<std::string>* failures, std::string* text,
                        nlohmann::json* json) {
  const auto ids = [&notes](const std::string& t) {
    return notes.readable_ids != nullptr ? notes.readable_ids(t) : t;
  };
  const bool drop = unrecorded != 0 || notes.unrecorded_unknown;
  const size_t stand_ins = drop && notes.stand_in_unrecorded ? add_stand_ins(&history) : 0;
  const size_t left_out =
      drop && !notes.stand_in_unrecorded ? drop_unrecorded_readers(&history) : 0;
  const check::CheckReport report = check::check_report(history);
  (*json)["serializable"] = report.serializable();
  (*json)["history_txns"] = report.committed_txns;
  (*json)["history_edges"] = report.edges;
  (*json)["history_not_recorded"] = unrecorded;
  (*json)["history_left_out"] = left_out;
  (*json)["history_stand_ins"] = stand_ins;
  nlohmann::json anomalies = nlohmann::json::array();
  for (const check::Anomaly& a : report.anomalies) {
    anomalies.push_back(
        {{"kind", check::anomaly_kind_name(a.kind)}, {"witness", ids(a.explanation)}});
  }
  nlohmann::json counts = nlohmann::json::object();
  for (size_t k = 0; k < check::CheckReport::kKindCount; ++k) {
    if (report.counts[k] != 0) {
      counts[std::string(check::anomaly_kind_name(static_cast<check::AnomalyKind>(k)))] =
          report.counts[k];
    }
  }
  (*json)["anomalies"] = anomalies;
  (*json)["anomaly_counts"] = counts;
  if (drop && notes.stand_in_unrecorded) {
    *text += fmt::format(
        "history: {} transactions not recorded ({}); {} unrecorded writers that recorded "
        "transactions read from stand in the check by the versions read (their reads "
        "unknown; a failed attempt whose write was read counts too)\n",
        unrecorded, notes.unrecorded, stand_ins);
  } else if (drop) {
    *text += fmt::format(
        "history: {} transactions not recorded ({}); {} that read from them left out of the "
        "check\n",
        unrecorded, notes.unrecorded, left_out);
  }
  if (report.serializable()) {
    *text += fmt::format("serializability: ok ({} transactions, {} edges)\n", report.committed_txns,
                         report.edges);
    return;
  }
  *text += fmt::format("serializability: FAILED ({} transactions, {} edges); {}\n",
                       report.committed_txns, report.edges, notes.id_legend);
  for (size_t k = 0; k < check::CheckReport::kKindCount; ++k) {
    if (report.counts[k] == 0) continue;
    const auto kind = static_cast<check::AnomalyKind>(k);
    *text += fmt::format("  {}: {}\n", check::anomaly_kind_name(kind), report.counts[k]);
    for (const check::Anomaly& a : report.anomalies) {
      if (a.kind == kind) *text += fmt::format("    {}\n", ids(a.explanation));
    }
    failures->push_back(
        fmt::format("serializability: {} x {}", report.counts[k], check::anomaly_kind_name(kind)));
  }
}

std::string readable_txn_ids(const std::string& text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const bool starts =
        text[i] == 'T' && (i == 0 || !std::isalnum(static_cast<unsigned char>(text[i - 1])));
    size_t j = i + 1;
    while (starts && j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (!starts || j == i + 1 || j - i - 1 > 19) {
      out += text[i++];
      continue;
    }
    const uint64_t id = std::stoull(text.substr(i + 1, j - i - 1));
    out += fmt::format("T{}.{}.{}", id >> 48, (id >> 40) & 0xff, id & ((1ULL << 40) - 1));
    i = j;
  }
  return out;
}

}  // namespace shoal::server
