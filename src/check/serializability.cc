#include "src/check/serializability.h"

#include <algorithm>
#include <optional>
#include <tuple>

namespace shoal::check {

namespace {

constexpr uint32_t kNone = ~uint32_t{0};
constexpr size_t kKinds = CheckReport::kKindCount;

enum class EdgeKind : uint8_t { kWw, kWr, kRw };
using EdgeMask = uint8_t;
constexpr EdgeMask kWw = 1;
constexpr EdgeMask kWr = 2;
constexpr EdgeMask kRw = 4;
constexpr EdgeMask kAll = kWw | kWr | kRw;

constexpr EdgeMask bit(EdgeKind kind) {
  return static_cast<EdgeMask>(1u << static_cast<int>(kind));
}

const char* edge_name(EdgeKind kind) {
  switch (kind) {
    case EdgeKind::kWw:
      return "ww";
    case EdgeKind::kWr:
      return "wr";
    case EdgeKind::kRw:
      return "rw";
  }
  return "?";
}

struct Edge {
  uint32_t from;
  uint32_t to;
  uint64_t key;
  uint64_t version;  // the version linking the ends: read (wr, rw) or overwritten (ww)
  EdgeKind kind;
};

// One write of a key version. `owner` is a node (committed) or a history index (aborted).
struct WriteRef {
  uint64_t key;
  uint64_t version;
  uint32_t owner;
  bool final_in_txn;  // the owner wrote no later version of this key

  friend bool operator<(const WriteRef& a, const WriteRef& b) {
    return std::tie(a.key, a.version, a.owner) < std::tie(b.key, b.version, b.owner);
  }
};

// Strongly connected components of the graph restricted to an edge mask.
struct Components {
  std::vector<uint32_t> of_node;               // component id per node
  std::vector<std::vector<uint32_t>> members;  // only components with two or more nodes
  std::vector<uint32_t> member_slot;           // component id -> index in members, or kNone
};

class Checker {
 public:
  Checker(const History& history, const CheckOptions& options)
      : history_(history), options_(options) {}

  CheckReport run();

 private:
  void index_nodes();
  void collect_writes();
  void add_ww_edges();
  void add_read_edges(uint32_t node);
  void resolve_read(uint32_t node, const Op& op);
  void report_unwritten_read(uint32_t node, const Op& op, TxnId committed_writer);
  void build_adjacency();
  Components tarjan(EdgeMask mask) const;
  void bfs(uint32_t source, EdgeMask path_mask, const Components& comps);
  uint32_t candidate_edge(uint32_t tail, uint32_t head, EdgeMask mask) const;
  void search_cycles(EdgeMask component_mask, EdgeMask candidate_mask, AnomalyKind kind);
  void search_anti_dependency_cycles();
  std::optional<std::vector<uint32_t>> shortest_cycle(const Components& comps, uint32_t comp,
                                                      EdgeMask candidate_mask, EdgeMask path_mask);

  TxnId id_of(uint32_t node) const { return history_.txns[nodes_[node]].id; }
  std::string describe_cycle(const std::vector<uint32_t>& cycle_edges) const;
  void report(AnomalyKind kind, std::vector<TxnId> txns, std::string explanation);
  void report_cycle(AnomalyKind kind, const std::vector<uint32_t>& cycle_edges);

  const History& history_;
  const CheckOptions& options_;
  CheckReport report_;

  std::vector<uint32_t> nodes_;             // node -> index of a committed txn in history_.txns
  std::vector<WriteRef> committed_writes_;  // sorted
  std::vector<WriteRef> aborted_writes_;    // sorted; owner is a history index
  std::vector<Edge> edges_;
  std::vector<uint32_t> adj_start_;  // node -> first slot in adj_ (size nodes + 1)
  std::vector<uint32_t> adj_;        // edge ids grouped by source node

  // BFS scratch, reused across searches: a node is visited iff visit_stamp_ == stamp_.
  std::vector<uint32_t> visit_stamp_;
  std::vector<uint32_t> parent_edge_;
  std::vector<uint32_t> queue_;
  uint32_t stamp_ = 0;
};

void Checker::report(AnomalyKind kind, std::vector<TxnId> txns, std::string explanation) {
  const auto k = static_cast<size_t>(kind);
  if (report_.counts[k]++ >= options_.witnesses_per_kind_max) return;
  report_.anomalies.push_back(Anomaly{kind, std::move(txns), std::move(explanation)});
}

std::string txn_name(TxnId id) {
  return "T" + std::to_string(id);
}

std::string key_version(uint64_t key, uint64_t version) {
  return "k=" + std::to_string(key) + ",v=" + std::to_string(version);
}

// Committed transactions become nodes; ids must be unique and not reserved.
void Checker::index_nodes() {
  std::vector<TxnId> ids;
  ids.reserve(history_.txns.size());
  for (uint32_t i = 0; i < history_.txns.size(); ++i) {
    const TxnRecord& t = history_.txns[i];
    ids.push_back(t.id);
    if (t.id == kInitialTxn || t.id == kUnknownWriter) {
      report(AnomalyKind::kImpossible, {t.id}, txn_name(t.id) + " uses a reserved id");
    }
    if (t.committed) nodes_.push_back(i);
  }
  report_.committed_txns = nodes_.size();
  std::sort(ids.begin(), ids.end());
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] == ids[i - 1] && (i + 1 == ids.size() || ids[i + 1] != ids[i])) {
      report(AnomalyKind::kImpossible, {ids[i]}, txn_name(ids[i]) + " appears more than once");
    }
  }
}

// Appends the writes of one transaction, marking for each key which write was its last.
void append_writes(const TxnRecord& t, uint32_t owner, std::vector<WriteRef>* out) {
  const size_t first = out->size();
  for (const Op& op : t.ops) {
    if (op.kind == OpKind::kWrite) out->push_back(WriteRef{op.key, op.version, owner, false});
  }
  // Sorting this txn's slice by (key, version) puts its final write of each key last.
  std::sort(out->begin() + static_cast<ptrdiff_t>(first), out->end());
  for (size_t i = first; i < out->size(); ++i) {
    (*out)[i].final_in_txn = i + 1 == out->size() || (*out)[i + 1].key != (*out)[i].key;
  }
}

void Checker::collect_writes() {
  for (uint32_t node = 0; node < nodes_.size(); ++node) {
    append_writes(history_.txns[nodes_[node]], node, &committed_writes_);
  }
  for (uint32_t i = 0; i < history_.txns.size(); ++i) {
    if (!history_.txns[i].committed) append_writes(history_.txns[i], i, &aborted_writes_);
  }
  std::sort(committed_writes_.begin(), committed_writes_.end());
  std::sort(aborted_writes_.begin(), aborted_writes_.end());
}

// Consecutive committed versions of a key are linked writer to writer. Several committed
// writers of one version are impossible; each still gets the edges so cycles stay visible.
void Checker::add_ww_edges() {
  const std::vector<WriteRef>& w = committed_writes_;
  size_t prev_begin = 0;
  size_t prev_end = 0;  // the previous version group of the same key; empty at a key's start
  for (size_t begin = 0; begin < w.size();) {
    size_t end = begin + 1;
    while (end < w.size() && w[end].key == w[begin].key && w[end].version == w[begin].version) {
      ++end;
    }
    if (w[begin].version == 0) {
      report(AnomalyKind::kImpossible, {id_of(w[begin].owner)},
             txn_name(id_of(w[begin].owner)) + " wrote " + key_version(w[begin].key, 0) +
                 ", the initial version");
    }
    if (w[end - 1].owner != w[begin].owner) {  // sorted by owner within a version
      report(AnomalyKind::kImpossible, {id_of(w[begin].owner), id_of(w[end - 1].owner)},
             txn_name(id_of(w[begin].owner)) + " and " + txn_name(id_of(w[end - 1].owner)) +
                 " both committed a write of " + key_version(w[begin].key, w[begin].version));
    }
    if (prev_end > prev_begin && w[prev_begin].key == w[begin].key) {
      for (size_t a = prev_begin; a < prev_end; ++a) {
        for (size_t b = begin; b < end; ++b) {
          if (w[a].owner == w[b].owner) continue;
          edges_.push_back(Edge{w[a].owner, w[b].owner, w[a].key, w[a].version, EdgeKind::kWw});
        }
      }
    }
    prev_begin = begin;
    prev_end = end;
    begin = end;
  }
}

// The committed writers of exactly (key, version), as a range of committed_writes_.
std::pair<size_t, size_t> version_range(const std::vector<WriteRef>& w, uint64_t key,
                                        uint64_t version) {
  const auto lo = std::lower_bound(w.begin(), w.end(), WriteRef{key, version, 0, false});
  auto hi = lo;
  while (hi != w.end() && hi->key == key && hi->version == version) ++hi;
  return {static_cast<size_t>(lo - w.begin()), static_cast<size_t>(hi - w.begin())};
}

// The edges a committed transaction's read implies: wr from whoever wrote the version it saw,
// rw to whoever wrote the next version; plus the per-read anomalies.
void Checker::resolve_read(uint32_t node, const Op& op) {
  const TxnId reader = id_of(node);
  const std::string what = txn_name(reader) + " read " + key_version(op.key, op.version);
  const auto [lo, hi] = version_range(committed_writes_, op.key, op.version);
  if (op.version == 0) {
    if (op.writer != kUnknownWriter && op.writer != kInitialTxn) {
      report(AnomalyKind::kImpossible, {op.writer, reader},
             what + " (the initial version) but saw writer " + txn_name(op.writer));
    }
  } else {
    bool seen_writer = false;
    for (size_t i = lo; i < hi; ++i) {
      const uint32_t writer = committed_writes_[i].owner;
      if (op.writer != kUnknownWriter && id_of(writer) != op.writer) continue;
      seen_writer = true;
      if (writer == node) continue;  // reading one's own write orders nothing
      edges_.push_back(Edge{writer, node, op.key, op.version, EdgeKind::kWr});
      if (!committed_writes_[i].final_in_txn) {
        report(AnomalyKind::kG1b, {id_of(writer), reader},
               what + ", an intermediate version: its writer " + txn_name(id_of(writer)) +
                   " wrote k=" + std::to_string(op.key) + " again later");
      }
    }
    if (!seen_writer)
      report_unwritten_read(node, op,
                            lo < hi ? id_of(committed_writes_[lo].owner) : kUnknownWriter);
  }
  // The next committed version after the one read: (key, version, kNone) sorts after every
  // writer of (key, version).
  const auto next = std::upper_bound(committed_writes_.begin(), committed_writes_.end(),
                                     WriteRef{op.key, op.version, kNone, false});
  for (auto it = next;
       it != committed_writes_.end() && it->key == op.key && it->version == next->version; ++it) {
    if (it->owner != node) {
      edges_.push_back(Edge{node, it->owner, op.key, op.version, EdgeKind::kRw});
    }
  }
}

// A read with no committed writer to match: an aborted writer (G1a) or nobody (impossible).
// `committed_writer` is a committed writer of the version whose id the read did not match.
void Checker::report_unwritten_read(uint32_t node, const Op& op, TxnId committed_writer) {
  const TxnId reader = id_of(node);
  const std::string what = txn_name(reader) + " read " + key_version(op.key, op.version);
  const auto lo = std::lower_bound(aborted_writes_.begin(), aborted_writes_.end(),
                                   WriteRef{op.key, op.version, 0, false});
  for (auto it = lo; it != aborted_writes_.end() && it->key == op.key && it->version == op.version;
       ++it) {
    const TxnId aborted = history_.txns[it->owner].id;
    if (op.writer != kUnknownWriter && aborted != op.writer) continue;
    report(AnomalyKind::kG1a, {aborted, reader}, what + " written by aborted " + txn_name(aborted));
    return;
  }
  const std::string claimed =
      op.writer == kUnknownWriter ? "" : " (claiming writer " + txn_name(op.writer) + ")";
  if (committed_writer != kUnknownWriter) {
    report(AnomalyKind::kImpossible, {committed_writer, reader},
           what + claimed + " but that version was written by " + txn_name(committed_writer));
  } else {
    report(AnomalyKind::kImpossible, {reader}, what + claimed + ", a version nobody wrote");
  }
}

void Checker::add_read_edges(uint32_t node) {
  for (const Op& op : history_.txns[nodes_[node]].ops) {
    if (op.kind == OpKind::kRead) resolve_read(node, op);
  }
}

// Groups edge ids by source node (counting sort).
void Checker::build_adjacency() {
  const size_t n = nodes_.size();
  adj_start_.assign(n + 1, 0);
  for (const Edge& e : edges_) ++adj_start_[e.from + 1];
  for (size_t i = 0; i < n; ++i) adj_start_[i + 1] += adj_start_[i];
  adj_.resize(edges_.size());
  std::vector<uint32_t> fill(adj_start_.begin(), adj_start_.end() - 1);
  for (uint32_t id = 0; id < edges_.size(); ++id) adj_[fill[edges_[id].from]++] = id;
  visit_stamp_.assign(n, 0);
  parent_edge_.assign(n, kNone);
}

// Iterative Tarjan (histories can hold long dependency chains; recursion could overflow).
Components Checker::tarjan(EdgeMask mask) const {
  const uint32_t n = static_cast<uint32_t>(nodes_.size());
  Components c;
  c.of_node.assign(n, kNone);
  std::vector<uint32_t> index(n, kNone);
  std::vector<uint32_t> low(n, 0);
  std::vector<uint32_t> stack;
  std::vector<std::pair<uint32_t, uint32_t>> frames;  // (node, next adjacency slot)
  uint32_t next_index = 0;
  uint32_t next_comp = 0;
  auto enter = [&](uint32_t v) {
    index[v] = low[v] = next_index++;
    stack.push_back(v);
    frames.emplace_back(v, adj_start_[v]);
  };
  for (uint32_t root = 0; root < n; ++root) {
    if (index[root] != kNone) continue;
    enter(root);
    while (!frames.empty()) {
      const uint32_t v = frames.back().first;
      const uint32_t slot = frames.back().second;
      if (slot < adj_start_[v + 1]) {
        frames.back().second = slot + 1;
        const Edge& e = edges_[adj_[slot]];
        if ((bit(e.kind) & mask) == 0) continue;
        if (index[e.to] == kNone) {
          enter(e.to);
        } else if (c.of_node[e.to] == kNone) {  // still on the stack
          low[v] = std::min(low[v], index[e.to]);
        }
        continue;
      }
      frames.pop_back();
      if (!frames.empty()) low[frames.back().first] = std::min(low[frames.back().first], low[v]);
      if (low[v] != index[v]) continue;
      std::vector<uint32_t> members;
      uint32_t w = kNone;
      do {
        w = stack.back();
        stack.pop_back();
        c.of_node[w] = next_comp;
        members.push_back(w);
      } while (w != v);
      c.member_slot.push_back(members.size() > 1 ? static_cast<uint32_t>(c.members.size()) : kNone);
      if (members.size() > 1) c.members.push_back(std::move(members));
      ++next_comp;
    }
  }
  return c;
}

// Breadth-first search from `source` over `path_mask` edges that stay in component `comp`.
// Leaves the visited nodes in queue_ in order of distance, with their tree edges in
// parent_edge_.
void Checker::bfs(uint32_t source, EdgeMask path_mask, const Components& comps) {
  const uint32_t comp = comps.of_node[source];
  ++stamp_;
  queue_.clear();
  queue_.push_back(source);
  visit_stamp_[source] = stamp_;
  parent_edge_[source] = kNone;
  for (size_t qi = 0; qi < queue_.size(); ++qi) {
    const uint32_t v = queue_[qi];
    for (uint32_t s = adj_start_[v]; s < adj_start_[v + 1]; ++s) {
      const Edge& e = edges_[adj_[s]];
      if ((bit(e.kind) & path_mask) == 0 || comps.of_node[e.to] != comp) continue;
      if (visit_stamp_[e.to] == stamp_) continue;
      visit_stamp_[e.to] = stamp_;
      parent_edge_[e.to] = adj_[s];
      queue_.push_back(e.to);
    }
  }
}

// A short cycle inside component `comp` (a slot of comps.members) that closes with one
// `candidate_mask` edge and otherwise uses `path_mask` edges, as edge ids starting at the
// candidate's head. Candidates are grouped by head: one BFS from a head finds the nearest tail
// of any candidate edge into it. Tries at most cycle_searches_per_component_max heads and keeps
// the shortest cycle found.
std::optional<std::vector<uint32_t>> Checker::shortest_cycle(const Components& comps, uint32_t comp,
                                                             EdgeMask candidate_mask,
                                                             EdgeMask path_mask) {
  const uint32_t comp_id = comps.of_node[comps.members[comp].front()];
  std::vector<uint32_t> heads;
  for (uint32_t v : comps.members[comp]) {
    for (uint32_t s = adj_start_[v]; s < adj_start_[v + 1]; ++s) {
      const Edge& e = edges_[adj_[s]];
      if ((bit(e.kind) & candidate_mask) != 0 && comps.of_node[e.to] == comp_id)
        heads.push_back(e.to);
    }
  }
  std::sort(heads.begin(), heads.end());
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  if (heads.size() > options_.cycle_searches_per_component_max) {
    heads.resize(options_.cycle_searches_per_component_max);
  }
  std::optional<std::vector<uint32_t>> best;
  for (uint32_t head : heads) {
    bfs(head, path_mask, comps);
    // queue_ is in distance order: the first tail found closes the shortest cycle via head.
    for (uint32_t tail : queue_) {
      const uint32_t closing = candidate_edge(tail, head, candidate_mask);
      if (closing == kNone) continue;
      std::vector<uint32_t> cycle;
      for (uint32_t v = tail; v != head; v = edges_[parent_edge_[v]].from) {
        cycle.push_back(parent_edge_[v]);
      }
      std::reverse(cycle.begin(), cycle.end());
      cycle.push_back(closing);
      if (!best || cycle.size() < best->size()) best = std::move(cycle);
      break;
    }
    if (best && best->size() == 2) break;  // nothing shorter exists
  }
  return best;
}

// An edge tail -> head of a kind in `mask`, or kNone.
uint32_t Checker::candidate_edge(uint32_t tail, uint32_t head, EdgeMask mask) const {
  for (uint32_t s = adj_start_[tail]; s < adj_start_[tail + 1]; ++s) {
    const Edge& e = edges_[adj_[s]];
    if (e.to == head && (bit(e.kind) & mask) != 0) return adj_[s];
  }
  return kNone;
}

bool has_inner_edge(const Components& comps, uint32_t comp, EdgeMask mask,
                    const std::vector<uint32_t>& adj_start, const std::vector<uint32_t>& adj,
                    const std::vector<Edge>& edges) {
  for (uint32_t v : comps.members[comp]) {
    for (uint32_t s = adj_start[v]; s < adj_start[v + 1]; ++s) {
      const Edge& e = edges[adj[s]];
      if ((bit(e.kind) & mask) != 0 && comps.of_node[e.to] == comps.of_node[v]) return true;
    }
  }
  return false;
}

// One anomaly per component of the `component_mask` graph that holds a `candidate_mask` edge
// (every edge inside a component lies on a cycle of that graph).
void Checker::search_cycles(EdgeMask component_mask, EdgeMask candidate_mask, AnomalyKind kind) {
  const Components comps = tarjan(component_mask);
  for (uint32_t c = 0; c < comps.members.size(); ++c) {
    if (report_.counts[static_cast<size_t>(kind)] >= options_.witnesses_per_kind_max) {
      // Witness quota full: count without searching.
      if (has_inner_edge(comps, c, candidate_mask, adj_start_, adj_, edges_)) {
        ++report_.counts[static_cast<size_t>(kind)];
      }
      continue;
    }
    auto cycle = shortest_cycle(comps, c, candidate_mask, component_mask);
    if (cycle) report_cycle(kind, *cycle);
  }
}

// Components of the full graph that need an rw edge to close: G-single if some cycle has
// exactly one rw edge (an rw edge whose head reaches its tail over ww/wr), else G2.
void Checker::search_anti_dependency_cycles() {
  const Components comps = tarjan(kAll);
  for (uint32_t c = 0; c < comps.members.size(); ++c) {
    if (!has_inner_edge(comps, c, kRw, adj_start_, adj_, edges_)) continue;
    auto cycle = shortest_cycle(comps, c, kRw, kWw | kWr);
    if (!cycle) cycle = shortest_cycle(comps, c, kRw, kAll);
    SHOAL_ASSERT(cycle.has_value(), "an rw edge inside a component lies on a cycle");
    const auto rw_edges = std::count_if(
        cycle->begin(), cycle->end(), [&](uint32_t e) { return edges_[e].kind == EdgeKind::kRw; });
    report_cycle(rw_edges == 1 ? AnomalyKind::kGSingle : AnomalyKind::kG2, *cycle);
  }
}

std::string Checker::describe_cycle(const std::vector<uint32_t>& cycle_edges) const {
  std::string out = txn_name(id_of(edges_[cycle_edges.front()].from));
  for (uint32_t id : cycle_edges) {
    const Edge& e = edges_[id];
    out += " -";
    out += edge_name(e.kind);
    out += "(" + key_version(e.key, e.version) + ")-> " + txn_name(id_of(e.to));
  }
  return out;
}

void Checker::report_cycle(AnomalyKind kind, const std::vector<uint32_t>& cycle_edges) {
  if (report_.counts[static_cast<size_t>(kind)] >= options_.witnesses_per_kind_max) {
    ++report_.counts[static_cast<size_t>(kind)];  // skip building the text
    return;
  }
  // Start at the smallest id so that a cycle always reads the same way.
  std::vector<uint32_t> rotated = cycle_edges;
  const auto first = std::min_element(rotated.begin(), rotated.end(), [&](uint32_t a, uint32_t b) {
    return id_of(edges_[a].from) < id_of(edges_[b].from);
  });
  std::rotate(rotated.begin(), first, rotated.end());
  std::vector<TxnId> txns;
  txns.reserve(rotated.size());
  for (uint32_t id : rotated) txns.push_back(id_of(edges_[id].from));
  report(kind, std::move(txns), describe_cycle(rotated));
}

CheckReport Checker::run() {
  index_nodes();
  collect_writes();
  add_ww_edges();
  for (uint32_t node = 0; node < nodes_.size(); ++node) add_read_edges(node);
  build_adjacency();
  report_.edges = edges_.size();
  search_cycles(kWw, kWw, AnomalyKind::kG0);
  search_cycles(kWw | kWr, kWr, AnomalyKind::kG1c);
  search_anti_dependency_cycles();
  std::stable_sort(report_.anomalies.begin(), report_.anomalies.end(),
                   [](const Anomaly& a, const Anomaly& b) { return a.kind < b.kind; });
  return std::move(report_);
}

}  // namespace

std::string_view anomaly_kind_name(AnomalyKind kind) {
  switch (kind) {
    case AnomalyKind::kG0:
      return "G0";
    case AnomalyKind::kG1a:
      return "G1a";
    case AnomalyKind::kG1b:
      return "G1b";
    case AnomalyKind::kG1c:
      return "G1c";
    case AnomalyKind::kGSingle:
      return "G-single";
    case AnomalyKind::kG2:
      return "G2";
    case AnomalyKind::kImpossible:
      return "Impossible";
  }
  return "?";
}

std::string CheckReport::to_string() const {
  if (serializable()) {
    return "serializable (" + std::to_string(committed_txns) + " committed txns, " +
           std::to_string(edges) + " edges)";
  }
  std::string out;
  for (size_t k = 0; k < kKinds; ++k) {
    if (counts[k] == 0) continue;
    const auto kind = static_cast<AnomalyKind>(k);
    out += std::string(anomaly_kind_name(kind)) + ": " + std::to_string(counts[k]) + "\n";
    for (const Anomaly& a : anomalies) {
      if (a.kind == kind) out += "  " + a.explanation + "\n";
    }
  }
  return out;
}

CheckReport check_report(const History& history, const CheckOptions& options) {
  return Checker(history, options).run();
}

std::vector<Anomaly> check(const History& history, const CheckOptions& options) {
  return check_report(history, options).anomalies;
}

}  // namespace shoal::check
