// SimNetwork: a simulated network of any number of nodes in one process, driven by SimEnv.
//
// connect(a, b) makes a link between two nodes and returns its two SimEndpoints, which satisfy
// shoal::net::TransportEndpoint (static_assert below), so code written against shm/tcp runs
// here unchanged. Every message is copied at send() and delivered by a SimEnv event after a
// delay drawn from the link's LinkFaults; faults are per directed node pair:
//   - delay: uniform in [min_delay_ns, max_delay_ns]; FIFO per direction (a message never
//     overtakes an earlier one) unless the reorder fault fires for it.
//   - loss, duplicate (a second copy with its own delay), reorder (extra delay up to
//     reorder_delay_ns, exempt from FIFO): independent probabilities per message.
//   - partition(a, b) / heal: messages sent or arriving while partitioned are dropped; the
//     link stays up (like TCP during a partition, minus the retransmission).
//   - crash(n): every link of node n dies at once; messages in flight to or from n are dropped;
//     n's own endpoints fail at once and peers see Unavailable after detect_ns (the time a
//     real transport needs to notice a hang-up). restart(n) lets n connect() again; links
//     that died stay dead (a restarted process reconnects, as with tcp).
//   - closing/destroying an endpoint: the peer receives what was already sent, then
//     Unavailable.
// Deliberately not reliable: the layer above (RPC) must handle loss, duplication and reorder.
//
// Owned by the simulator thread. Allocation: one std::vector per message in flight (simulation
// only; not a hot path of the real system). Bounds: max_in_flight messages (beyond it a send
// is dropped and counted), max_inbox per endpoint (beyond it a delivery is dropped).
#pragma once

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "sim/sim_env.h"
#include "src/net/transport.h"

namespace shoal::sim {

using NodeId = uint32_t;

struct LinkFaults {
  uint64_t min_delay_ns = 20'000;
  uint64_t max_delay_ns = 80'000;
  double loss = 0;       // probability a message is dropped
  double duplicate = 0;  // probability a second copy is delivered
  double reorder = 0;    // probability a message gets extra delay and may overtake
  uint64_t reorder_delay_ns = 500'000;
};

struct NetworkOptions {
  LinkFaults faults;               // default for every directed pair
  uint64_t detect_ns = 1'000'000;  // crash -> peers see Unavailable
  size_t max_in_flight = 1 << 20;
  size_t max_inbox = 1 << 16;
  size_t max_message_bytes = size_t{8} << 20;
  size_t max_write_bytes = 256 * 1024;
};

struct NetworkStats {
  uint64_t sent = 0, delivered = 0, lost = 0, duplicated = 0, reordered = 0;
  uint64_t partition_drops = 0, crash_drops = 0, overflow_drops = 0, fenced_drops = 0;
};

class SimNetwork;

class SimEndpoint {
 public:
  SimEndpoint() = default;
  SimEndpoint(SimEndpoint&& o) noexcept { *this = std::move(o); }
  SimEndpoint& operator=(SimEndpoint&& o) noexcept;
  ~SimEndpoint() { close(); }

  [[nodiscard]] Status send(uint32_t session, std::span<const uint8_t> bytes);
  [[nodiscard]] Status write_with_imm(uint64_t epoch, uint32_t imm, std::span<const uint8_t> bytes);
  [[nodiscard]] Status set_fence_epoch(uint64_t epoch);
  [[nodiscard]] Status flush();
  [[nodiscard]] Result<size_t> poll(net::Completion* out, size_t max);
  void release();
  // Never blocks (virtual time moves only in the scheduler): Ok when data is pending, the
  // failure status when the link is dead, else Timeout.
  [[nodiscard]] Status wait(uint64_t timeout_ns);
  // Delivers bytes to the peer's inbox as a kRecv on session 0, bypassing faults and delay.
  [[nodiscard]] Status inject_raw_for_test(std::span<const uint8_t> bytes);
  size_t max_message_bytes() const;
  size_t max_write_bytes() const;

  bool is_open() const { return net_ != nullptr; }
  NodeId node() const;
  NodeId peer() const;
  // Closes this end; the peer drains what was sent and then sees Unavailable.
  void close();

 private:
  friend class SimNetwork;
  SimEndpoint(SimNetwork* net, uint32_t link, uint8_t side) : net_(net), link_(link), side_(side) {}
  SimNetwork* net_ = nullptr;
  uint32_t link_ = 0;
  uint8_t side_ = 0;
};

static_assert(net::TransportEndpoint<SimEndpoint>);

class SimNetwork {
 public:
  SimNetwork(SimEnv& env, uint32_t nodes, NetworkOptions options = {});
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  uint32_t nodes() const { return static_cast<uint32_t>(nodes_.size()); }
  SimEnv& env() { return env_; }
  const NetworkStats& stats() const { return stats_; }

  // A new link between live nodes a != b. Unavailable if either is crashed.
  [[nodiscard]] Result<std::pair<SimEndpoint, SimEndpoint>> connect(NodeId a, NodeId b);

  void set_faults(NodeId from, NodeId to, const LinkFaults& f);
  void set_faults_both(NodeId a, NodeId b, const LinkFaults& f) {
    set_faults(a, b, f);
    set_faults(b, a, f);
  }
  void set_all_faults(const LinkFaults& f);
  void partition(NodeId a, NodeId b);  // both directions
  void heal(NodeId a, NodeId b);
  // Cuts every pair across {group, rest}.
  void isolate(const std::vector<NodeId>& group);
  void heal_all();
  bool partitioned(NodeId a, NodeId b) const { return cut_[a * nodes() + b]; }

  void crash(NodeId n);
  void restart(NodeId n);
  bool alive(NodeId n) const { return nodes_[n].alive; }

 private:
  friend class SimEndpoint;
  struct Msg {
    net::Completion::Kind kind;
    uint32_t imm;
    uint64_t epoch;
    std::vector<uint8_t> bytes;
  };
  struct Side {
    NodeId node = 0;
    bool open = true;
    Status failed;           // sticky once set
    Status pending_failure;  // reported once the inbox drains (peer closed)
    bool peer_closed = false;
    std::deque<Msg> inbox;
    std::vector<Msg> batch;  // polled, owned by the caller until release()
    uint64_t fence_epoch = 0;
    uint64_t last_arrival_ns = 0;  // FIFO clamp for messages from the other side
    uint32_t in_flight = 0;        // messages on the wire towards this side
  };
  struct Link {
    Side side[2];
    bool dead = false;
  };
  struct InFlight {
    uint32_t link;
    uint8_t to_side;
    bool live;
    Msg msg;
  };
  struct Node {
    bool alive = true;
    uint32_t incarnation = 0;
  };

  [[nodiscard]] Status transmit(uint32_t link, uint8_t from_side, Msg msg);
  void schedule_copy(uint32_t link, uint8_t to_side, Msg msg, bool reorder);
  static void on_arrival(void* self, uint64_t slot);
  static void on_peer_failure(void* self, uint64_t link_side);
  void close_side(uint32_t link, uint8_t side);
  Side& side(uint32_t link, uint8_t s) { return links_[link]->side[s]; }
  const LinkFaults& faults(NodeId from, NodeId to) const { return faults_[from * nodes() + to]; }

  SimEnv& env_;
  NetworkOptions options_;
  Rng rng_;
  std::vector<Node> nodes_;
  std::vector<LinkFaults> faults_;  // [from * n + to]
  std::vector<bool> cut_;           // [a * n + b]
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<InFlight> in_flight_;
  std::vector<uint64_t> free_slots_;
  size_t in_flight_count_ = 0;
  NetworkStats stats_;
};

}  // namespace shoal::sim
