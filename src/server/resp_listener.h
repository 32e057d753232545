// The client ports of `shoal server`: the Redis protocol (docs/RESP.md, "In the shard server")
// and the Shoal client protocol (docs/CLIENT.md), served by one piece of machinery.
//
// StreamListener: a listening socket and its accept thread. Each accepted client socket is
// handed to a worker (a StreamAcceptor: that port's StreamWorker on each worker loop), round
// robin, through a bounded hand-off queue and a post to that worker's loop. At most
// max_connections clients at once on the port: the next is answered the protocol's "too
// many" reply ("-ERR max number of clients reached", as Redis does; an error frame) and closed.
//
// StreamWorker<P>: one per worker loop and port. A loop poller drains an epoll set (edge
// triggered) of its clients; the loop sleeps in ppoll on the epoll fd like on its other
// sockets (a worker without clients makes no epoll_wait: its loop spins between requests, and
// a port nobody uses would cost a system call on every pass). Each client is a P::Connection
// (resp::Connection, or ClientConnection for the client protocol) whose requests run as coroutines
// on this loop over the worker's DistKvBackend: a request that waits for another shard suspends,
// and a small task resumes the connection when it ends, so one loop serves many clients and its 2PC
// traffic. Per poll, at most kActivePerPoll clients are served, each for at most one read and one
// process() turn (max_requests_per_turn), so nobody holds the loop. An epoll_wait that found
// nothing is not repeated for kEmptyPollGapNs (system calls, not work, were the spinning loop's
// cost).
// Back-pressure: a client's socket is read only while its connection wants input (its output
// under the soft limit, no request in flight); output beyond the hard limit closes it.
// Durability: replies leave when their token is durable (dist_kv.h KvAcks); a client whose
// output waits on one is re-checked whenever an acknowledgement arrives.
// Malformed input: the connection answers the protocol error and closes; others go on.
// A client that goes away with a transaction open (P::take_open_txn) has it aborted by a task.
// Memory per idle client: sizeof(Client) plus the connection's and session's small state
// (the connection's buffers are released once it has been quiet for kQuietNs).
// Threads: StreamListener's accept thread; each StreamWorker belongs to its loop's thread,
// except hand_off() (any thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shoal/status.h"
#include "src/base/env.h"
#include "src/resp/connection.h"
#include "src/runtime/event_loop.h"
#include "src/server/client_connection.h"
#include "src/server/dist_kv.h"

namespace shoal::server {

struct StreamWorkerStats {
  uint64_t accepted = 0;
  uint64_t closed = 0;
  uint64_t protocol_errors = 0;  // closed after a protocol error or an output overflow
  uint64_t suspensions = 0;      // requests that waited on another shard (or an ack slot)
  uint64_t orphans_aborted = 0;  // transactions left open by a client that went away
};

// What a protocol plugs into StreamWorker: its connection type, the options of a new one,
// the reply refusing a client over the limit, and the transaction a closing client left open.
struct RespProtocol {
  using Connection = resp::Connection;
  using Options = resp::ConnectionOptions;
  static Options options(uint64_t client_id, bool durable_acks, std::string_view password);
  static std::string_view too_many();
  static std::unique_ptr<resp::KvTxn> take_open_txn(Connection&) { return nullptr; }
};

struct ClientProtocol {
  using Connection = ClientConnection;
  using Options = ClientConnectionOptions;
  static Options options(uint64_t client_id, bool durable_acks, std::string_view password);
  static std::string_view too_many();
  static std::unique_ptr<resp::KvTxn> take_open_txn(Connection& c) { return c.take_open_txn(); }
};

// The listener's side of a worker: where accepted sockets go.
class StreamAcceptor {
 public:
  virtual ~StreamAcceptor() = default;
  // Any thread: queues an accepted socket for this worker (false: queue full, caller closes).
  virtual bool hand_off(int fd) = 0;
  // Called by each client when it closes (the listener's connection count).
  virtual void set_on_close(void (*fn)(void* ctx), void* ctx) = 0;
};

template <typename P>
class StreamWorker final : public StreamAcceptor {
 public:
  // REQUIRES: backend, acks (nullptr: replies at the speculative commit), loop and the bytes of
  // password (empty: none) outlive it. Both ports ask the same one, [cluster]
  // resp_password_file's: Redis's requirepass, the client protocol's hello.
  StreamWorker(rt::EventLoop& loop, resp::KvBackend& backend, KvAcks* acks, Env& env,
               uint32_t max_clients, std::string_view password = {});
  ~StreamWorker() override;
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // Loop thread: registers the poller. IOError when epoll cannot be created.
  [[nodiscard]] Status start();
  // Loop thread, at the loop's end: closes every socket and removes the poller. Clients with a
  // request in flight keep their coroutine frames until the destructor, which must then run
  // after the loop is gone (nothing may resume them in between).
  void shutdown();
  bool hand_off(int fd) override;
  // Loop thread: live clients now.
  size_t clients() const { return live_; }
  const StreamWorkerStats& stats() const { return stats_; }
  void set_on_close(void (*fn)(void* ctx), void* ctx) override {
    on_close_ = fn;
    on_close_ctx_ = ctx;
  }

 private:
  struct Client;
  static constexpr size_t kActivePerPoll = 64;
  static constexpr uint64_t kQuietNs = 100'000'000;  // idle this long: buffers released
  static constexpr size_t kHandOffMax = 1024;
  // After an epoll_wait that found nothing, the next one waits this long (the loop's other
  // work goes on meanwhile). A system call costs 1-2 us on a VM, and a spinning loop made one
  // every pass: 2.6 per pipelined batch under redis-benchmark -P 16, most of them empty (a
  // sixth of the server's CPU). Waiting lets several clients' requests gather, as Redis's
  // blocking epoll_wait does; a loop that goes to sleep blocks on the epoll fd itself, so
  // nothing waits longer than this.
  static constexpr uint64_t kEmptyPollGapNs = 10'000;

  static bool poll_thunk(void* self) { return static_cast<StreamWorker*>(self)->poll(); }
  static bool prepare_wake(void* self, int fds[rt::kMaxPollerFds]);
  static void drain_hand_offs(void* self);
  bool poll();
  void adopt(int fd);
  void activate(Client* c);
  // Reads, processes and writes what it can; false when the client is gone (closed).
  bool serve(Client* c);
  bool read_some(Client* c);
  void write_some(Client* c);
  void close_client(Client* c);
  // Every kQuietNs: frees the buffers of clients quiet for that long.
  void release_quiet_buffers();
  static rt::Task<void> resume(StreamWorker* w, Client* c);
  static rt::Task<void> abort_orphan(std::unique_ptr<resp::KvTxn> txn);

  rt::EventLoop& loop_;
  resp::KvBackend& backend_;
  KvAcks* acks_;
  Env& env_;
  uint32_t max_clients_;
  std::string_view password_;
  int epoll_fd_ = -1;
  std::vector<std::unique_ptr<Client>> clients_;  // by slot; null: free
  std::vector<uint32_t> free_slots_;
  size_t live_ = 0;
  std::vector<Client*> active_;  // clients that can make progress without a new event
  std::vector<Client*> gated_;   // clients whose output waits for an acknowledgement
  std::vector<Client*> quiet_;   // clients with nothing to do, buffers still held
  uint64_t next_sweep_ns_ = 0;
  uint64_t next_epoll_ns_ = 0;  // no epoll_wait before (after an empty one)
  uint64_t acks_seen_ = 0;
  uint64_t next_client_id_ = 1;
  StreamWorkerStats stats_;
  void (*on_close_)(void*) = nullptr;
  void* on_close_ctx_ = nullptr;
  std::mutex hand_off_mu_;
  std::vector<int> hand_offs_;  // guarded by hand_off_mu_
  std::atomic<bool> hand_offs_waiting_{false};
};

using RespWorker = StreamWorker<RespProtocol>;
using ClientWorker = StreamWorker<ClientProtocol>;
extern template class StreamWorker<RespProtocol>;
extern template class StreamWorker<ClientProtocol>;

class StreamListener {
 public:
  // Listens on host:port (0: a free port, see port()); `what` names the port in errors and
  // too_many is the reply refusing a client over max_connections (it must outlive the
  // listener). REQUIRES: workers outlive it.
  [[nodiscard]] static Result<std::unique_ptr<StreamListener>> listen(
      const std::string& what, const std::string& host, uint16_t port,
      std::vector<StreamAcceptor*> workers, uint32_t max_connections, std::string_view too_many);
  ~StreamListener();  // stops the accept thread and closes the socket
  StreamListener(const StreamListener&) = delete;
  StreamListener& operator=(const StreamListener&) = delete;

  uint16_t port() const { return port_; }
  // Starts accepting on a thread of its own.
  void start();
  void stop();
  uint32_t connections() const { return connections_.load(); }

 private:
  StreamListener() = default;
  void accept_loop();
  static void on_client_closed(void* self) {
    static_cast<StreamListener*>(self)->connections_.fetch_sub(1);
  }

  int fd_ = -1;
  uint16_t port_ = 0;
  uint32_t max_connections_ = 0;
  std::vector<StreamAcceptor*> workers_;
  std::string_view too_many_;
  std::atomic<uint32_t> connections_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shoal::server
