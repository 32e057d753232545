#include "sim/sim_network.h"

#include <cstring>

#include <fmt/format.h>

namespace shoal::sim {

namespace {
enum TraceTag : uint64_t {
  kTraceSend = 1,
  kTraceDeliver,
  kTraceLoss,
  kTraceDuplicate,
  kTracePartitionDrop,
  kTraceCrashDrop,
  kTraceCrash,
  kTraceRestart,
};

// Content digest for the trace (not cryptographic; catches any divergence in bytes).
uint64_t digest(std::span<const uint8_t> b) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ b.size();
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < b.size(); ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}
}  // namespace

// ---------------- SimEndpoint ----------------

SimEndpoint& SimEndpoint::operator=(SimEndpoint&& o) noexcept {
  if (this != &o) {
    close();
    net_ = std::exchange(o.net_, nullptr);
    link_ = o.link_;
    side_ = o.side_;
  }
  return *this;
}

Status SimEndpoint::send(uint32_t session, std::span<const uint8_t> bytes) {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  if (bytes.size() > max_message_bytes()) {
    return Status::InvalidArgument(fmt::format("message of {} bytes > max_message_bytes {}",
                                               bytes.size(), max_message_bytes()));
  }
  return net_->transmit(
      link_, side_,
      {net::Completion::Kind::kRecv, session, 0, std::vector<uint8_t>(bytes.begin(), bytes.end())});
}

Status SimEndpoint::write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes) {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  if (bytes.size() > max_write_bytes()) {
    return Status::InvalidArgument(
        fmt::format("write of {} bytes > max_write_bytes {}", bytes.size(), max_write_bytes()));
  }
  // Like shm: the writer reads the peer's fence directly and learns of staleness at once.
  if (epoch < net_->side(link_, side_ ^ 1).fence_epoch) {
    return Status::Aborted(fmt::format("write epoch {} below the peer's fence", epoch));
  }
  return net_->transmit(link_, side_,
                        {net::Completion::Kind::kWrite, imm, epoch,
                         std::vector<uint8_t>(bytes.begin(), bytes.end())});
}

Status SimEndpoint::set_fence_epoch(uint64_t epoch) {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  auto& s = net_->side(link_, side_);
  if (epoch < s.fence_epoch) return Status::InvalidArgument("fence epochs only move forward");
  s.fence_epoch = epoch;
  return s.failed;
}

Status SimEndpoint::flush() {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  return net_->side(link_, side_).failed;
}

Result<size_t> SimEndpoint::poll(net::Completion* out, size_t max) {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  auto& s = net_->side(link_, side_);
  SHOAL_ASSERT(s.batch.empty(), "%s", "SimEndpoint::poll without release() of the last batch");
  if (!s.failed.ok()) return s.failed;
  if (s.inbox.empty()) {
    if (!s.pending_failure.ok() && s.in_flight == 0) {
      s.failed = s.pending_failure;  // the peer closed and everything it sent has arrived
      return s.failed;
    }
    return size_t{0};
  }
  size_t n = 0;
  while (n < max && !s.inbox.empty()) {
    s.batch.push_back(std::move(s.inbox.front()));
    s.inbox.pop_front();
    ++n;
  }
  for (size_t i = 0; i < n; ++i) {
    const auto& m = s.batch[i];
    out[i] = {m.kind, m.imm, m.epoch, {m.bytes.data(), m.bytes.size()}};
  }
  return n;
}

void SimEndpoint::release() {
  if (net_ != nullptr) net_->side(link_, side_).batch.clear();
}

Status SimEndpoint::wait(uint64_t) {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  auto& s = net_->side(link_, side_);
  if (!s.inbox.empty()) return Status::Ok();
  if (!s.failed.ok()) return s.failed;
  if (!s.pending_failure.ok() && s.in_flight == 0) return Status::Ok();  // poll() reports it
  return Status::Timeout("sim endpoint: nothing pending (virtual time moves in the scheduler)");
}

Status SimEndpoint::inject_raw_for_test(std::span<const uint8_t> bytes) {
  if (net_ == nullptr) return Status::Unavailable("sim endpoint closed");
  auto& peer = net_->side(link_, side_ ^ 1);
  peer.inbox.push_back(
      {net::Completion::Kind::kRecv, 0, 0, std::vector<uint8_t>(bytes.begin(), bytes.end())});
  return Status::Ok();
}

size_t SimEndpoint::max_message_bytes() const {
  return net_ == nullptr ? 0 : net_->options_.max_message_bytes;
}
size_t SimEndpoint::max_write_bytes() const {
  return net_ == nullptr ? 0 : net_->options_.max_write_bytes;
}
NodeId SimEndpoint::node() const {
  return net_->side(link_, side_).node;
}
NodeId SimEndpoint::peer() const {
  return net_->side(link_, side_ ^ 1).node;
}

void SimEndpoint::close() {
  if (net_ == nullptr) return;
  net_->close_side(link_, side_);
  net_ = nullptr;
}

// ---------------- SimNetwork ----------------

SimNetwork::SimNetwork(SimEnv& env, uint32_t nodes, NetworkOptions options)
    : env_(env),
      options_(options),
      rng_(env.seed()),
      nodes_(nodes),
      faults_(size_t{nodes} * nodes, options.faults),
      cut_(size_t{nodes} * nodes, false) {
  SHOAL_ASSERT(nodes > 0, "%s", "SimNetwork needs nodes");
}

Result<std::pair<SimEndpoint, SimEndpoint>> SimNetwork::connect(NodeId a, NodeId b) {
  if (a >= nodes() || b >= nodes() || a == b) {
    return Status::InvalidArgument(fmt::format("connect({}, {}) with {} nodes", a, b, nodes()));
  }
  if (!nodes_[a].alive || !nodes_[b].alive) {
    return Status::Unavailable(fmt::format("connect({}, {}): a node is down", a, b));
  }
  auto link = std::make_unique<Link>();
  link->side[0].node = a;
  link->side[1].node = b;
  links_.push_back(std::move(link));
  const auto id = static_cast<uint32_t>(links_.size() - 1);
  return std::make_pair(SimEndpoint(this, id, 0), SimEndpoint(this, id, 1));
}

void SimNetwork::set_faults(NodeId from, NodeId to, const LinkFaults& f) {
  faults_[from * nodes() + to] = f;
}
void SimNetwork::set_all_faults(const LinkFaults& f) {
  for (auto& x : faults_) x = f;
}
void SimNetwork::partition(NodeId a, NodeId b) {
  cut_[a * nodes() + b] = true;
  cut_[b * nodes() + a] = true;
  env_.trace(100, a, b);
}
void SimNetwork::heal(NodeId a, NodeId b) {
  cut_[a * nodes() + b] = false;
  cut_[b * nodes() + a] = false;
  env_.trace(101, a, b);
}
void SimNetwork::isolate(const std::vector<NodeId>& group) {
  std::vector<bool> in(nodes(), false);
  for (NodeId n : group) in[n] = true;
  for (NodeId a = 0; a < nodes(); ++a) {
    for (NodeId b = 0; b < nodes(); ++b) {
      if (in[a] != in[b]) cut_[a * nodes() + b] = true;
    }
  }
  env_.trace(102, group.size());
}
void SimNetwork::heal_all() {
  std::fill(cut_.begin(), cut_.end(), false);
  env_.trace(103);
}

Status SimNetwork::transmit(uint32_t link, uint8_t from_side, Msg msg) {
  Link& l = *links_[link];
  Side& from = l.side[from_side];
  if (!from.failed.ok()) return from.failed;
  const NodeId src = from.node;
  const NodeId dst = l.side[from_side ^ 1].node;
  ++stats_.sent;
  env_.trace(kTraceSend, (uint64_t{src} << 32) | dst, digest(msg.bytes) ^ msg.imm);
  if (!l.side[from_side ^ 1].open) return Status::Ok();  // peer closed: bytes go nowhere
  const LinkFaults& f = faults(src, dst);
  if (cut_[src * nodes() + dst]) {
    ++stats_.partition_drops;
    env_.trace(kTracePartitionDrop, link);
    return Status::Ok();
  }
  if (f.loss > 0 && rng_.uniform01() < f.loss) {
    ++stats_.lost;
    env_.trace(kTraceLoss, link);
    return Status::Ok();
  }
  if (f.duplicate > 0 && rng_.uniform01() < f.duplicate) {
    ++stats_.duplicated;
    env_.trace(kTraceDuplicate, link);
    schedule_copy(link, from_side ^ 1, msg, /*reorder=*/true);
  }
  const bool reorder = f.reorder > 0 && rng_.uniform01() < f.reorder;
  if (reorder) ++stats_.reordered;
  schedule_copy(link, from_side ^ 1, std::move(msg), reorder);
  return Status::Ok();
}

void SimNetwork::schedule_copy(uint32_t link, uint8_t to_side, Msg msg, bool reorder) {
  if (in_flight_count_ >= options_.max_in_flight) {
    ++stats_.overflow_drops;
    return;
  }
  Side& to = side(link, to_side);
  const LinkFaults& f = faults(side(link, to_side ^ 1).node, to.node);
  uint64_t delay = rng_.uniform(f.min_delay_ns, std::max(f.min_delay_ns, f.max_delay_ns));
  uint64_t arrival = env_.now_ns() + delay;
  if (reorder) {
    arrival += rng_.uniform(0, f.reorder_delay_ns);
  } else {
    arrival = std::max(arrival, to.last_arrival_ns);  // FIFO per direction
    to.last_arrival_ns = arrival;
  }
  uint64_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = in_flight_.size();
    in_flight_.emplace_back();
  }
  in_flight_[slot] = {link, to_side, true, std::move(msg)};
  ++in_flight_count_;
  ++to.in_flight;
  env_.at(arrival, &SimNetwork::on_arrival, this, slot);
}

void SimNetwork::on_arrival(void* self_ptr, uint64_t slot) {
  auto* self = static_cast<SimNetwork*>(self_ptr);
  InFlight f = std::move(self->in_flight_[slot]);
  self->in_flight_[slot].live = false;
  self->free_slots_.push_back(slot);
  --self->in_flight_count_;
  Link& l = *self->links_[f.link];
  Side& to = l.side[f.to_side];
  --to.in_flight;
  const NodeId src = l.side[f.to_side ^ 1].node;
  if (l.dead || !to.open || !to.failed.ok()) {
    ++self->stats_.crash_drops;
    self->env_.trace(kTraceCrashDrop, f.link);
    return;
  }
  if (self->cut_[src * self->nodes() + to.node]) {
    ++self->stats_.partition_drops;
    self->env_.trace(kTracePartitionDrop, f.link);
    return;
  }
  if (f.msg.kind == net::Completion::Kind::kWrite && f.msg.epoch < to.fence_epoch) {
    ++self->stats_.fenced_drops;  // the fence rose while the write was in flight
    return;
  }
  if (to.inbox.size() >= self->options_.max_inbox) {
    ++self->stats_.overflow_drops;
    return;
  }
  ++self->stats_.delivered;
  self->env_.trace(kTraceDeliver, (uint64_t{src} << 32) | to.node, digest(f.msg.bytes));
  to.inbox.push_back(std::move(f.msg));
}

void SimNetwork::close_side(uint32_t link, uint8_t s) {
  Link& l = *links_[link];
  l.side[s].open = false;
  l.side[s].inbox.clear();
  l.side[s].batch.clear();
  Side& peer = l.side[s ^ 1];
  if (peer.pending_failure.ok()) peer.pending_failure = Status::Unavailable("peer closed the link");
}

void SimNetwork::on_peer_failure(void* self_ptr, uint64_t link_side) {
  auto* self = static_cast<SimNetwork*>(self_ptr);
  Side& s = self->side(static_cast<uint32_t>(link_side >> 1), link_side & 1);
  if (s.failed.ok()) {
    s.failed = Status::Unavailable(
        fmt::format("peer node {} crashed", self->side(link_side >> 1, (link_side & 1) ^ 1).node));
  }
}

void SimNetwork::crash(NodeId n) {
  SHOAL_ASSERT(n < nodes(), "crash(%u) out of range", n);
  nodes_[n].alive = false;
  env_.trace(kTraceCrash, n);
  for (uint32_t id = 0; id < links_.size(); ++id) {
    Link& l = *links_[id];
    if (l.dead) continue;
    for (uint8_t s = 0; s < 2; ++s) {
      if (l.side[s].node != n) continue;
      l.dead = true;
      l.side[s].inbox.clear();
      if (l.side[s].failed.ok()) l.side[s].failed = Status::Unavailable("this node crashed");
      // The peer notices after detect_ns, as a transport notices a hang-up.
      env_.after(options_.detect_ns, &SimNetwork::on_peer_failure, this,
                 (uint64_t{id} << 1) | static_cast<uint64_t>(s ^ 1));
    }
  }
}

void SimNetwork::restart(NodeId n) {
  SHOAL_ASSERT(n < nodes(), "restart(%u) out of range", n);
  nodes_[n].alive = true;
  ++nodes_[n].incarnation;
  env_.trace(kTraceRestart, n, nodes_[n].incarnation);
}

}  // namespace shoal::sim
