// A serializability checker over recorded histories (src/check/history.h), after Adya's
// direct serialization graph.
//
// Nodes are the committed transactions; edges are the dependencies between them:
//   ww  writer of version v of a key -> writer of the next version of that key
//   wr  writer of version v          -> a reader of v
//   rw  a reader of v                -> writer of the next version (anti-dependency)
// ("next" is the smallest committed version above v, so histories may skip numbers.)
// A history of committed transactions is serializable iff this graph is acyclic. check() finds
// strongly connected components (Tarjan) and, inside each, a short cycle by BFS as a witness,
// and classifies it:
//   G0       cycle of ww edges only (dirty write)
//   G1c      cycle of ww/wr edges with at least one wr (circular information flow)
//   G-single cycle with exactly one rw edge (read skew, lost update)
//            (a lost update in a seq+1 workload shows instead as two committed writers of one
//            version, Impossible, plus a G2 cycle between them)
//   G2       cycle with two or more rw edges (write skew)
// Besides cycles it reports per-read anomalies:
//   G1a      a committed transaction read a version written by an aborted one
//   G1b      a transaction read a version that its writer later overwrote itself (an
//            intermediate version; the writer wrote the key twice)
//   Impossible  the history cannot come from any execution: two committed writers of one
//            (key, version), a read of a version nobody wrote, a read whose recorded writer did
//            not write it, a write of version 0, or a duplicate transaction id
//
// Cost: sorting the writes and one binary search per read, then linear graph passes:
// O((V + E) log E). Witness searches run only inside cyclic components and are bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/check/history.h"

namespace shoal::check {

enum class AnomalyKind : uint8_t { kG0, kG1a, kG1b, kG1c, kGSingle, kG2, kImpossible };

std::string_view anomaly_kind_name(AnomalyKind kind);

struct Anomaly {
  AnomalyKind kind;
  // The transactions of the witness. Cycles list each member once, in edge order (the edge from
  // the last back to the first closes the cycle); per-read anomalies list writer then reader.
  std::vector<TxnId> cycle;
  // For people, naming every edge: "T12 -rw(k=5,v=3)-> T15 -wr(k=9,v=2)-> T12". The version of
  // an edge is the one that links its ends: the version read (wr, rw) or overwritten (ww).
  std::string explanation;
};

struct CheckOptions {
  // Witnesses kept per anomaly kind; later ones are counted in CheckReport but not described.
  size_t witnesses_per_kind_max = 3;
  // Breadth-first searches per component when looking for a short cycle of a given class (one
  // per distinct head of a candidate edge). The G-single/G2 split is exact when a component has
  // at most this many rw-edge heads; beyond that a G-single cycle may be reported as G2.
  size_t cycle_searches_per_component_max = 32;
};

struct CheckReport {
  static constexpr size_t kKindCount = static_cast<size_t>(AnomalyKind::kImpossible) + 1;
  std::vector<Anomaly> anomalies;  // grouped by kind, at most witnesses_per_kind_max each
  // Occurrences per kind (indexed by AnomalyKind), including the ones without a witness. For
  // cycle kinds this counts components, not cycles.
  size_t counts[kKindCount] = {};
  size_t committed_txns = 0;
  size_t edges = 0;

  bool serializable() const {
    for (size_t c : counts) {
      if (c > 0) return false;
    }
    return true;
  }
  bool has(AnomalyKind kind) const { return counts[static_cast<size_t>(kind)] > 0; }
  // One line per anomaly kind with its count and witnesses.
  std::string to_string() const;
};

// Checks `history` and returns every anomaly kind found; empty anomalies iff the committed
// transactions are serializable and the history is well-formed.
[[nodiscard]] CheckReport check_report(const History& history, const CheckOptions& options = {});

// The anomalies alone (empty if serializable).
[[nodiscard]] std::vector<Anomaly> check(const History& history, const CheckOptions& options = {});

}  // namespace shoal::check
