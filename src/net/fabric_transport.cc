#include "src/net/fabric_transport.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "src/net/ring_holds.h"
#include "src/net/socket_util.h"

#if defined(__SANITIZE_ADDRESS__)
// libfabric 1.17's net provider leaks about 1.5 KiB per endpoint it opens (fi_info copies it
// never frees: xnet_init_rdm's msg_info once fi_passive_ep has duplicated it, an accepted
// connection's cm_entry info, and smaller pieces), bounded by the links a process opens.
// LeakSanitizer would fail every test that opens an endpoint for the library's leaks; ours
// are still reported (nothing of ours is allocated inside libfabric).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libfabric.so\n";
}
#endif

namespace shoal::net {

namespace {

// Remote CQ data: [31..30] kind, [29..0] value (see the header).
constexpr uint32_t kKindShift = 30;
constexpr uint32_t kValueMask = (1u << kKindShift) - 1;
enum Kind : uint32_t { kFrames = 0, kCredit = 1, kFence = 2, kSignal = 3 };
// kSignal values: the writer ran out of credit; the peer is closing (its last write).
enum Signal : uint32_t { kSignalCreditRequest = 0, kSignalClose = 1 };

constexpr size_t kPageBytes = 4096;
constexpr size_t kMaxRingBytes = size_t{1} << 30;
constexpr size_t kCqEntries = 8192;  // the provider queues overflow; this is the fast part
constexpr size_t kCqBatch = 32;
constexpr size_t kMaxTxInflight = 256;  // fi_writedata calls without a local completion
constexpr size_t kRxQueueEntries = 64;
constexpr int kMaxCqReadsPerProgress = 8;  // bounds one progress() call
constexpr uint64_t kMaxSleepSliceNs = 10'000'000;
constexpr uint64_t kLivenessCheckNs = 1'000'000;
constexpr uint64_t kNoWaitFdNapUs = 50;  // providers without FI_WAIT_FD nap this long when idle
constexpr uint64_t kCloseDrainNs = 1'000'000'000;
constexpr uint64_t kRxRequestedKey = 1;  // keys we ask for when the provider does not pick them
constexpr uint64_t kTxRequestedKey = 2;

// Registered words after the send mirror: the sources of control writes (never injected, see
// post_control), which must stay untouched until the write completes.
struct ControlSource {
  uint64_t fence_epoch;  // kFence: the epoch the peer copies into its mailbox
  uint64_t zero;         // every other control write (the receiver reads only the CQ data)
};
constexpr size_t kControlSourceBytes = 64;
static_assert(sizeof(ControlSource) <= kControlSourceBytes);

// Words at the start of a region that the peer writes with control messages.
struct Mailbox {
  uint64_t scratch;      // target of kCredit / kSignal / kFrames-announcement writes
  uint64_t fence_epoch;  // kFence: the peer's new fence
};
static_assert(sizeof(Mailbox) <= kFabricMailboxBytes);
constexpr size_t kRingOffset = kFabricMailboxBytes + sizeof(RingControl);

// libfabric, opened on first use. Linked at build time, it made every process that links the
// net module (every `shoal` command, every server, most test binaries) pay about 0.22 s before
// main: the PSM provider libfabric links pulls in libinfinipath, whose constructor calibrates
// the CPU clock with ~470 sleeps of 125 us. Only the functions libfabric exports are looked up;
// the rest of its API is inline, through the ops tables of the objects these return.
struct FabricLib {
  decltype(&fi_getinfo) getinfo = nullptr;
  decltype(&fi_freeinfo) freeinfo = nullptr;
  decltype(&fi_dupinfo) dupinfo = nullptr;
  decltype(&fi_fabric) fabric = nullptr;
  decltype(&fi_strerror) strerror = nullptr;
  std::string error;  // why it could not be opened (empty once it is)
};

const FabricLib& fabric_lib() {
  static const FabricLib* lib = [] {
    auto* l = new FabricLib();  // lives until exit, like the providers it loads
    // RTLD_GLOBAL: providers libfabric loads itself resolve its symbols against it.
    void* h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (h == nullptr) {
      const char* why = dlerror();
      l->error = why != nullptr ? why : "dlopen failed";
      return l;
    }
    l->getinfo = reinterpret_cast<decltype(&fi_getinfo)>(dlsym(h, "fi_getinfo"));
    l->freeinfo = reinterpret_cast<decltype(&fi_freeinfo)>(dlsym(h, "fi_freeinfo"));
    l->dupinfo = reinterpret_cast<decltype(&fi_dupinfo)>(dlsym(h, "fi_dupinfo"));
    l->fabric = reinterpret_cast<decltype(&fi_fabric)>(dlsym(h, "fi_fabric"));
    l->strerror = reinterpret_cast<decltype(&fi_strerror)>(dlsym(h, "fi_strerror"));
    if (!l->getinfo || !l->freeinfo || !l->dupinfo || !l->fabric || !l->strerror) {
      l->error =
          "libfabric.so.1 lacks fi_getinfo, fi_freeinfo, fi_dupinfo, fi_fabric or fi_strerror";
      *l = FabricLib{.error = l->error};
    }
    return l;
  }();
  return *lib;
}

std::string fabric_strerror(int err) {
  const FabricLib& lib = fabric_lib();
  return lib.strerror != nullptr ? lib.strerror(err) : fmt::format("error {}", err);
}

Status fi_status(const char* what, ssize_t rc) {
  return Status::IOError(
      fmt::format("fabric: {}: {}", what, fabric_strerror(static_cast<int>(-rc))));
}

uint32_t cq_data(Kind kind, uint64_t value) {
  return (uint32_t{kind} << kKindShift) | static_cast<uint32_t>(value & kValueMask);
}

// The position whose low 30 bits (in units of 8 bytes) are `value`, at or after `known`.
uint64_t extend_position(uint64_t known, uint32_t value) {
  const uint64_t delta = (uint64_t{value} - (known >> 3)) & kValueMask;
  return known + (delta << 3);
}

size_t round_to_pages(size_t bytes) {
  return (bytes + kPageBytes - 1) & ~(kPageBytes - 1);
}

uint32_t max_payload_for(size_t ring_bytes) {
  return static_cast<uint32_t>(
      std::min<uint64_t>(ring_bytes / 4 - kFrameHeaderBytes - kFrameCanaryBytes, kLengthMask));
}

std::string resolve_provider(const FabricOptions& o) {
  if (!o.provider.empty()) return o.provider;
  const char* env = std::getenv("SHOAL_FABRIC_PROVIDER");
  return env != nullptr && env[0] != '\0' ? env : kDefaultFabricProvider;
}

Status check_ring_bytes(uint64_t ring_bytes, const char* whose) {
  if (!std::has_single_bit(ring_bytes) || ring_bytes < kRingMinDataBytes ||
      ring_bytes > kMaxRingBytes) {
    return Status::InvalidArgument(
        fmt::format("fabric: {} receive ring of {} bytes: must be a power of two in [4 KiB, 1 GiB]",
                    whose, ring_bytes));
  }
  return Status::Ok();
}

Status check_hello(const FabricHello& h, const std::string& provider) {
  if (h.magic != FabricHello::kMagic || h.version != FabricHello::kVersion ||
      h.address_bytes == 0 || h.address_bytes > sizeof(h.address)) {
    return Status::Corruption("fabric rendezvous: malformed hello");
  }
  const std::string theirs(h.provider, strnlen(h.provider, sizeof(h.provider)));
  if (theirs != provider) {
    return Status::InvalidArgument(
        fmt::format("fabric rendezvous: peer uses provider '{}', we use '{}'", theirs, provider));
  }
  SHOAL_TRY(check_ring_bytes(h.ring_bytes, "peer's"));
  if (h.region_bytes < fabric_region_bytes(h.ring_bytes)) {
    return Status::InvalidArgument(fmt::format(
        "fabric rendezvous: peer registered {} bytes, too small for its ring of {} bytes "
        "(needs {})",
        h.region_bytes, h.ring_bytes, fabric_region_bytes(h.ring_bytes)));
  }
  return Status::Ok();
}

// fi_getinfo per provider, once per process (loading providers costs tens of ms). The fi_info
// objects live until exit; after fork() the child's copy is plain memory and stays valid.
Result<fi_info*> provider_info(const std::string& provider) {
  static std::mutex mu;
  static std::map<std::string, fi_info*>* cache = new std::map<std::string, fi_info*>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(provider); it != cache->end()) return it->second;
  // tcp;ofi_rxm posts 128 receive bounce buffers of 16 KiB per connection and memsets them:
  // ~400 ms in fi_enable on this VM (page faults). We post no receives (everything is RMA), so
  // 16 do; the environment's own setting wins (overwrite = 0). Read at provider load.
  setenv("FI_OFI_RXM_MSG_RX_SIZE", "16", 0);
  const FabricLib& lib = fabric_lib();
  if (!lib.error.empty()) {
    return Status::NotSupported(fmt::format("fabric: cannot open libfabric: {}", lib.error));
  }
  fi_info* hints = lib.dupinfo(nullptr);  // fi_allocinfo()
  if (hints == nullptr) return Status::IOError("fabric: fi_allocinfo failed");
  const bool shm = provider == "shm";  // names, not IP addresses
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
  hints->mode = 0;  // we support neither FI_CONTEXT nor FI_RX_CQ_DATA
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // one domain per endpoint, one thread
  hints->tx_attr->msg_order = FI_ORDER_RMA_WAW;      // the receiver trusts the latest end
  // Small queues: we post no receives, and at most kMaxTxInflight writes. tcp;ofi_rxm's
  // defaults (2048 each, 16 KiB bounce buffers) memset ~64 MiB per endpoint: 1.8 s per pair
  // on this VM, most of it page faults.
  hints->tx_attr->size = kMaxTxInflight;
  // A write completes locally once the provider has taken its bytes, not when the peer
  // acknowledges it: a full send queue never waits for the peer's progress, and the round
  // trip carries no acknowledgements. (tcp;ofi_rxm implements FI_TRANSMIT_COMPLETE as an
  // acknowledgement from the peer's provider: one more message each way per write, sent
  // before the write's completion is reported; 64 B RPC p50 38.5 us against 20.7 us with
  // FI_INJECT_COMPLETE, RESULTS.md.) Only close()'s goodbye asks for the acknowledgement.
  hints->tx_attr->op_flags = FI_INJECT_COMPLETE;
  hints->rx_attr->size = kRxQueueEntries;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  if (!shm) hints->addr_format = FI_SOCKADDR_IN;
  fi_info* info = nullptr;
  // Loopback only: the endpoint binds to 127.0.0.1 (FI_SOURCE).
  const int rc = lib.getinfo(FI_VERSION(1, 17), shm ? nullptr : "127.0.0.1", nullptr,
                             shm ? 0 : FI_SOURCE, hints, &info);
  lib.freeinfo(hints);
  if (rc != 0 || info == nullptr) {
    return Status::NotSupported(
        fmt::format("fabric: provider '{}' with FI_EP_RDM+FI_RMA on "
                    "127.0.0.1: fi_getinfo: {}",
                    provider, fabric_strerror(-rc)));
  }
  if (info->domain_attr->cq_data_size < 4 || info->tx_attr->inject_size < sizeof(uint64_t) ||
      (info->tx_attr->msg_order & FI_ORDER_RMA_WAW) == 0) {
    lib.freeinfo(info);
    return Status::NotSupported(fmt::format(
        "fabric: provider '{}' lacks 4 B of remote CQ data, 8 B inject or RMA WAW order",
        provider));
  }
  (*cache)[provider] = info;
  return info;
}

// Zeroed pages, every one faulted in before traffic (MAP_POPULATE). Mapped, not allocated: a
// receive region with kept regions in it is unmapped by its RingHolds table (ring_holds.h).
Result<uint8_t*> map_region(size_t bytes) {
  void* p = mmap(nullptr, round_to_pages(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) {
    return Status::IOError(fmt::format("fabric: cannot map {} bytes: {}", bytes, strerror(errno)));
  }
  return static_cast<uint8_t*>(p);
}

template <typename Fid>
void close_fid(Fid*& obj) {
  if (obj != nullptr) fi_close(&obj->fid);
  obj = nullptr;
}

void unmap_region(uint8_t* p, size_t bytes) {
  if (p != nullptr) munmap(p, round_to_pages(bytes));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// State

struct FabricEndpoint::State {
  enum class Phase : uint8_t { kIdle, kOpen, kReady };

  EndpointOptions options;
  FabricOptions fabric_options;
  std::string provider;
  int sock = -1;  // rendezvous, then liveness
  // The other end while both live in the creating process (pair()): its first use starts both.
  State* twin = nullptr;
  pid_t owner_pid = 0;
  Phase phase = Phase::kIdle;
  Status failed;

  // Handshake.
  FabricHello hello_in{};
  size_t hello_in_bytes = 0;
  bool peer_known = false;
  bool connect_write_posted = false;
  bool connect_write_seen = false;
  uint64_t expected_peer_ring_bytes = 0;  // before the hello: for max_write_bytes()

  // libfabric objects (owned; closed in close_fabric()).
  fi_info* info = nullptr;  // not owned (provider_info's cache)
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_wait* waitset = nullptr;  // the CQ's (open_cq())
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* rx_mr = nullptr;
  fid_mr* tx_mr = nullptr;
  void* tx_desc = nullptr;
  int wait_fd = -1;
  fi_addr_t peer_addr = FI_ADDR_UNSPEC;

  // Receive side: our region, read up to the announced end only.
  uint8_t* region = nullptr;
  size_t region_bytes = 0;
  uint8_t* rx_data = nullptr;
  uint64_t rx_ring_bytes = 0;
  uint64_t rx_cursor = 0;    // next frame to decode
  uint64_t rx_end = 0;       // bytes announced by kFrames completions
  uint64_t rx_released = 0;  // returned to us by release()
  uint64_t head_sent = 0;    // last credit sent to the writer
  uint64_t fence_epoch = 0;
  uint64_t drops = 0;
  uint32_t rx_max_payload = 0;
  bool peer_wants_credit = false;
  // Created by the first keep(); from then on it owns `region` (close_fabric() drops our
  // reference, the last held region unmaps it).
  RingHolds* holds = nullptr;
  Status rx_error;  // a bad announcement: reported after the frames announced before it

  // Send side: the mirror of the peer's ring, and what of it the peer has.
  uint8_t* mirror = nullptr;
  size_t mirror_bytes = 0;
  RingControl* mirror_ctl = nullptr;
  RingProducer tx;
  uint64_t sent = 0;
  uint64_t peer_ring_bytes = 0;
  uint64_t peer_region_address = 0;
  uint64_t peer_key = 0;
  ControlSource* control_src = nullptr;  // just after the mirror, in the same registration
  uint64_t tx_inflight = 0;              // fi_writedata calls without their local completion yet
  uint64_t tx_inflight_limit = 0;
  bool credit_requested = false;

  // Closing (see the header). peer_closed: its goodbye (kSignal close) arrived, its last
  // write: it writes nothing more and reads nothing we send; goodbye_due: we owe it ours in
  // return; goodbye_sent: ours is posted, our last write; link_down: a write of ours failed,
  // the provider dropped the connection.
  bool peer_closed = false;
  bool goodbye_due = false;
  bool goodbye_sent = false;
  bool link_down = false;

  // Polling.
  MessageAssembler assembler{0};
  bool batch_outstanding = false;
  bool reserved = false;
  uint32_t empty_polls = 0;
  uint64_t last_liveness_check_ns = 0;
  uint64_t sent_copied = 0;  // payload bytes copied into the mirror

  ~State() { close(); }

  // Nothing more is written to the peer: it will not read it, or cannot.
  bool quiet() const { return peer_closed || link_down; }
  Status quiet_status() const {
    return peer_closed ? Status::Unavailable("fabric peer closed the link")
                       : Status::Unavailable("fabric: the provider dropped the connection");
  }

  Status fail(Status status) {
    if (failed.ok()) failed = std::move(status);
    return failed;
  }

  // ---- setup

  Status open_fabric();
  Status open_cq();
  bool may_sleep_on_wait_fd();
  Status send_hello();
  Status take_hello();
  Status step_handshake();
  Status handshake();
  Status ensure_ready() {
    if (phase == Phase::kReady) [[likely]]
      return failed;
    if (!failed.ok()) return failed;
    Status s = handshake();
    return s.ok() ? failed : fail(std::move(s));
  }
  void close_fabric();
  void close();

  // ---- data path

  Status progress();
  Status progress_or_fail();
  Status on_completion(const fi_cq_data_entry& e);
  Status cq_error();
  Status post_write(uint64_t offset, uint64_t bytes, uint32_t data);
  Status post_control(Kind kind, uint64_t value, size_t mailbox_offset, uint64_t word);
  bool try_post_goodbye();
  void say_goodbye(uint64_t deadline);
  Status send_credit();
  Status sync_tx();
  Result<uint8_t*> reserve_blocking(uint32_t bytes);
  Status push(uint32_t flags, uint32_t imm, uint64_t epoch, std::span<const uint8_t> payload) {
    const std::span<const uint8_t> one[1] = {payload};
    GatherCursor cursor(one);
    return push(flags, imm, epoch, cursor, payload.size());
  }
  // One frame whose payload is the next `payload_bytes` bytes of `cursor`.
  Status push(uint32_t flags, uint32_t imm, uint64_t epoch, GatherCursor& cursor,
              size_t payload_bytes);
  // A message in frames of at most max_payload_bytes, from `cursor` ("bytes" in all).
  Status send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes);
  Status check_peer();
  Status check_peer_while_stuck(uint64_t start);
  Status peer_gone(Status why);
  void block_once(uint64_t timeout_ns);
  bool has_input() const { return rx_cursor != rx_end || !rx_error.ok(); }
  Result<size_t> poll(Completion* out, size_t max);
  Status wait(uint64_t timeout_ns);
  bool prepare_to_block();

  // poll_frames() source interface.
  bool next_frame(Frame* out, Status* error);
  void release_consumed();
  // Kept regions let go since (on any thread): their credit, unless a batch is out.
  void let_go_of_kept() {
    if (holds != nullptr && !batch_outstanding && phase == Phase::kReady) release_consumed();
  }
  std::shared_ptr<const uint64_t[]> keep(std::span<const uint8_t> bytes);
  // The stream position of a byte of [rx_released, rx_cursor) in the ring, or UINT64_MAX when
  // `p` is not in the ring's data area.
  uint64_t position_of(const uint8_t* p) const {
    if (rx_data == nullptr || p < rx_data || p >= rx_data + rx_ring_bytes) return UINT64_MAX;
    const uint64_t offset = static_cast<uint64_t>(p - rx_data);
    const uint64_t mask = rx_ring_bytes - 1;
    return rx_released + ((offset - (rx_released & mask)) & mask);
  }
  void on_control(const Frame&) {}
  void defer_error(Status status) { fail(std::move(status)).ignore(); }
};

// The CQ waits on a wait set of ours, not on the CQ's internal one: libfabric 1.17's net
// provider never resets an internal wait's signal (its fi_trywait returns 0 without running
// the wait's try), so after the first completion that fd stays readable and an idle endpoint
// spins. fi_wait(waitset, 0) runs the try (which resets the signal) for every provider.
// Providers without wait sets or fds fall back to the CQ's own fd, then to none (we spin).
Status FabricEndpoint::State::open_cq() {
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  cq_attr.size = kCqEntries;
  fi_wait_attr wait_attr{};
  wait_attr.wait_obj = FI_WAIT_FD;
  if (fi_wait_open(fabric, &wait_attr, &waitset) == 0) {
    cq_attr.wait_obj = FI_WAIT_SET;
    cq_attr.wait_set = waitset;
    if (fi_cq_open(domain, &cq_attr, &cq, nullptr) == 0 &&
        fi_control(&waitset->fid, FI_GETWAIT, &wait_fd) == 0) {
      return Status::Ok();
    }
    close_fid(cq);
    close_fid(waitset);
    wait_fd = -1;
  }
  cq_attr.wait_set = nullptr;
  cq_attr.wait_obj = FI_WAIT_FD;
  int rc = fi_cq_open(domain, &cq_attr, &cq, nullptr);
  if (rc == -FI_ENOSYS || rc == -FI_EINVAL) {  // no wait fd from this provider: we spin
    cq_attr.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain, &cq_attr, &cq, nullptr);
  }
  if (rc != 0) return fi_status("fi_cq_open", rc);
  if (cq_attr.wait_obj == FI_WAIT_FD && fi_control(&cq->fid, FI_GETWAIT, &wait_fd) != 0) {
    wait_fd = -1;
  }
  return Status::Ok();
}

// True when nothing is pending and the wait fd may be slept on (see open_cq()).
bool FabricEndpoint::State::may_sleep_on_wait_fd() {
  if (waitset != nullptr) return fi_wait(waitset, 0) == -FI_ETIMEDOUT;
  fid* fids[1] = {&cq->fid};
  return fi_trywait(fabric, fids, 1) == FI_SUCCESS;
}

Status FabricEndpoint::State::open_fabric() {
  auto got = provider_info(provider);
  if (!got.ok()) return got.status();
  info = *got;
  SHOAL_TRY(check_ring_bytes(options.ring_bytes, "our"));
  const uint64_t mr_mode = info->domain_attr->mr_mode;
  if (int rc = fabric_lib().fabric(info->fabric_attr, &fabric, nullptr)) {
    return fi_status("fi_fabric", rc);
  }
  if (int rc = fi_domain(fabric, info, &domain, nullptr)) return fi_status("fi_domain", rc);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = 1;
  if (int rc = fi_av_open(domain, &av_attr, &av, nullptr)) return fi_status("fi_av_open", rc);
  SHOAL_TRY(open_cq());
  if (int e = fi_endpoint(domain, info, &ep, nullptr)) return fi_status("fi_endpoint", e);
  if (int e = fi_ep_bind(ep, &av->fid, 0)) return fi_status("fi_ep_bind(av)", e);
  if (int e = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV))
    return fi_status("fi_ep_bind(cq)", e);
  if (int e = fi_enable(ep)) return fi_status("fi_enable", e);
  tx_inflight_limit = std::clamp<uint64_t>(info->tx_attr->size / 2, 1, kMaxTxInflight);

  // Our receive region: mailbox, ring control, ring data.
  rx_ring_bytes = options.ring_bytes;
  region_bytes = fabric_region_bytes(rx_ring_bytes);
  auto mem = map_region(region_bytes);
  if (!mem.ok()) return mem.status();
  region = *mem;
  ring_init({region + kFabricMailboxBytes, ring_region_bytes(rx_ring_bytes)}, rx_ring_bytes);
  rx_data = region + kRingOffset;
  rx_max_payload = max_payload_for(rx_ring_bytes);
  if (int e = fi_mr_reg(domain, region, region_bytes, FI_REMOTE_WRITE, 0, kRxRequestedKey, 0,
                        &rx_mr, nullptr)) {
    return fi_status("fi_mr_reg(receive ring)", e);
  }
  if (mr_mode & FI_MR_ENDPOINT) {
    if (int e = fi_mr_bind(rx_mr, &ep->fid, 0)) return fi_status("fi_mr_bind", e);
    if (int e = fi_mr_enable(rx_mr)) return fi_status("fi_mr_enable", e);
  }
  phase = Phase::kOpen;
  return send_hello();
}

Status FabricEndpoint::State::send_hello() {
  FabricHello h;
  size_t address_bytes = sizeof(h.address);
  if (int e = fi_getname(&ep->fid, h.address, &address_bytes)) return fi_status("fi_getname", e);
  h.address_bytes = static_cast<uint32_t>(address_bytes);
  h.ring_bytes = rx_ring_bytes;
  h.region_bytes = region_bytes;
  h.region_address =
      (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(region) : 0;
  h.region_key = fi_mr_key(rx_mr);
  std::strncpy(h.provider, provider.c_str(), sizeof(h.provider) - 1);
  const ssize_t n = ::send(sock, &h, sizeof(h), MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(sizeof(h))) {
    return socket_errno_status("fabric", "rendezvous: send hello", n < 0 ? errno : EPIPE);
  }
  return Status::Ok();
}

// The peer's hello is complete: check it, learn its address and ring, build our mirror.
Status FabricEndpoint::State::take_hello() {
  SHOAL_TRY(check_hello(hello_in, provider));
  if (fi_av_insert(av, hello_in.address, 1, &peer_addr, 0, nullptr) != 1) {
    return Status::IOError("fabric: fi_av_insert of the peer's address failed");
  }
  peer_ring_bytes = hello_in.ring_bytes;
  peer_region_address = hello_in.region_address;
  peer_key = hello_in.region_key;
  mirror_bytes = ring_region_bytes(peer_ring_bytes);
  // The control sources share the mirror's registration (one descriptor for every write).
  auto mem = map_region(mirror_bytes + kControlSourceBytes);
  if (!mem.ok()) return mem.status();
  mirror = *mem;
  ring_init({mirror, mirror_bytes}, peer_ring_bytes);
  mirror_ctl = reinterpret_cast<RingControl*>(mirror);
  control_src = reinterpret_cast<ControlSource*>(mirror + mirror_bytes);
  tx = RingProducer({mirror, mirror_bytes});
  if (int e = fi_mr_reg(domain, mirror, mirror_bytes + kControlSourceBytes, FI_WRITE, 0,
                        kTxRequestedKey, 0, &tx_mr, nullptr)) {
    return fi_status("fi_mr_reg(send mirror)", e);
  }
  if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    if (int e = fi_mr_bind(tx_mr, &ep->fid, 0)) return fi_status("fi_mr_bind", e);
    if (int e = fi_mr_enable(tx_mr)) return fi_status("fi_mr_enable", e);
  }
  tx_desc = fi_mr_desc(tx_mr);
  peer_known = true;
  return Status::Ok();
}

// One non-blocking step: read the hello, post the connecting write, progress. kReady once our
// write completed locally and the peer's arrived (the provider's connection is up both ways).
Status FabricEndpoint::State::step_handshake() {
  if (!peer_known) {
    auto* dst = reinterpret_cast<uint8_t*>(&hello_in) + hello_in_bytes;
    const ssize_t n = ::recv(sock, dst, sizeof(hello_in) - hello_in_bytes, MSG_DONTWAIT);
    if (n == 0) return Status::Unavailable("fabric: peer closed during the rendezvous");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Status::Ok();
      return socket_errno_status("fabric", "rendezvous: recv hello", errno);
    }
    hello_in_bytes += static_cast<size_t>(n);
    if (hello_in_bytes < sizeof(hello_in)) return Status::Ok();
    SHOAL_TRY(take_hello());
  }
  if (!connect_write_posted) {
    // kCredit with head 0 changes nothing at the peer; the source is the mirror's first word.
    const ssize_t rc =
        fi_writedata(ep, mirror, sizeof(uint64_t), tx_desc, cq_data(kCredit, 0), peer_addr,
                     peer_region_address + offsetof(Mailbox, scratch), peer_key, nullptr);
    if (rc == 0) {
      connect_write_posted = true;
      ++tx_inflight;
    } else if (rc != -FI_EAGAIN) {
      return fi_status("fi_writedata (connect)", rc);
    }
  }
  SHOAL_TRY(progress());
  if (connect_write_posted && tx_inflight == 0 && connect_write_seen) phase = Phase::kReady;
  return Status::Ok();
}

Status FabricEndpoint::State::handshake() {
  const uint64_t deadline = mono_ns() + fabric_options.handshake_timeout_ms * 1'000'000;
  // Both ends still in the process that made them: one thread must drive both handshakes.
  State* other = twin;
  const bool both_here = other != nullptr && owner_pid == getpid() &&
                         other->owner_pid == owner_pid && other->sock >= 0 && other->failed.ok() &&
                         other->phase != Phase::kReady;
  if (phase == Phase::kIdle) SHOAL_TRY(open_fabric());
  if (both_here && other->phase == Phase::kIdle) {
    Status s = other->open_fabric();
    if (!s.ok()) other->fail(s).ignore();
  }
  for (;;) {  // bounded by the deadline
    SHOAL_TRY(step_handshake());
    if (both_here && other->failed.ok() && other->phase == Phase::kOpen) {
      Status s = other->step_handshake();
      if (!s.ok()) other->fail(s).ignore();
    }
    const bool other_done = !both_here || !other->failed.ok() || other->phase == Phase::kReady;
    if (phase == Phase::kReady && other_done) return Status::Ok();
    if (mono_ns() >= deadline) {
      return Status::Timeout(fmt::format("fabric: rendezvous did not finish within {} ms",
                                         fabric_options.handshake_timeout_ms));
    }
    if (!peer_known && !both_here) {  // nothing to progress yet: wait for the hello
      pollfd p{sock, POLLIN, 0};
      ::poll(&p, 1, 1);
    }
  }
}

void FabricEndpoint::State::close_fabric() {
  close_fid(ep);  // first: nothing may still use the memory regions
  close_fid(tx_mr);
  close_fid(rx_mr);
  close_fid(cq);
  close_fid(waitset);
  close_fid(av);
  close_fid(domain);
  close_fid(fabric);
  if (holds != nullptr) {
    holds->unref();  // it unmaps the region once no kept region is left
    holds = nullptr;
  } else {
    unmap_region(region, region_bytes);
  }
  if (mirror != nullptr) unmap_region(mirror, mirror_bytes + kControlSourceBytes);
  region = mirror = nullptr;
  rx_data = nullptr;
  mirror_ctl = nullptr;
  control_src = nullptr;
  tx = RingProducer();
  wait_fd = -1;
}

void FabricEndpoint::State::close() {
  if (phase == Phase::kReady && ep != nullptr && !link_down) {
    const uint64_t deadline = mono_ns() + kCloseDrainNs;
    // Frames committed before close() still reach the peer: post them and let the provider
    // take them (bounded). Every write of ours then has its completion, so none is left in
    // the provider's queues for fi_close to cancel.
    if (!failed.ok() || sync_tx().ok()) {
      while (tx_inflight > 0 && mono_ns() < deadline && progress().ok()) cpu_relax();
    }
    // Then the goodbyes: see say_goodbye() and the header, "Closing".
    say_goodbye(deadline);
  }
  if (phase != Phase::kIdle) close_fabric();
  if (sock >= 0) ::close(sock);
  sock = -1;
  if (twin != nullptr) twin->twin = nullptr;
  twin = nullptr;
  phase = Phase::kIdle;
  if (failed.ok()) failed = Status::Unavailable("fabric endpoint closed");
}

// ---------------------------------------------------------------------------------------------
// Completions and posting

Status FabricEndpoint::State::progress() {
  fi_cq_data_entry entries[kCqBatch];
  for (int reads = 0; reads < kMaxCqReadsPerProgress; ++reads) {
    const ssize_t n = fi_cq_read(cq, entries, kCqBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) return cq_error();
    if (n < 0) return fi_status("fi_cq_read", n);
    for (ssize_t i = 0; i < n; ++i) SHOAL_TRY(on_completion(entries[i]));
    if (static_cast<size_t>(n) < kCqBatch) break;
  }
  if (peer_wants_credit) let_go_of_kept();  // may send it itself
  if (peer_wants_credit && rx_released != head_sent) SHOAL_TRY(send_credit());
  if (goodbye_due && !link_down) (void)try_post_goodbye();  // else the next progress()
  return Status::Ok();
}

// A progress() failure is final; when the connection dropped, the frames that arrived before it
// are delivered first (poll() reports it after them, as it does a bad announcement).
Status FabricEndpoint::State::progress_or_fail() {
  Status s = progress();
  if (s.ok()) return s;
  if (link_down && has_input()) {
    if (rx_error.ok()) rx_error = std::move(s);
    return Status::Ok();
  }
  return fail(std::move(s));
}

Status FabricEndpoint::State::cq_error() {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(cq, &err, 0) < 0) return Status::IOError("fabric: fi_cq_readerr failed");
  // Only our writes can fail here (a failed incoming write never reaches our CQ): this one is
  // done, and the connection with it.
  if ((err.flags & FI_REMOTE_WRITE) == 0 && tx_inflight > 0) --tx_inflight;
  char buf[128] = {};
  const char* detail = fi_cq_strerror(cq, err.prov_errno, err.err_data, buf, sizeof(buf));
  std::string what = fmt::format("fabric: completion error: {} ({})", fabric_strerror(err.err),
                                 detail != nullptr ? detail : "");
  // FI_ECANCELED: the provider cancelled what it still had queued because the connection
  // broke (tcp;ofi_rxm when the peer closes or dies): the peer is gone, as for a reset.
  if (err.err == FI_ECANCELED || err.err == FI_ECONNRESET || err.err == FI_ENOTCONN ||
      err.err == FI_ECONNREFUSED || err.err == FI_ECONNABORTED || err.err == FI_EHOSTUNREACH ||
      err.err == EPIPE) {
    link_down = true;
    return Status::Unavailable(fmt::format("fabric peer closed the link or died ({})", what));
  }
  return Status::IOError(std::move(what));
}

Status FabricEndpoint::State::on_completion(const fi_cq_data_entry& e) {
  if ((e.flags & FI_REMOTE_CQ_DATA) == 0) {  // local completion of one of our writes
    if (tx_inflight > 0) --tx_inflight;
    return Status::Ok();
  }
  const auto data = static_cast<uint32_t>(e.data);
  const uint32_t value = data & kValueMask;
  switch (static_cast<Kind>(data >> kKindShift)) {
    case kFrames: {
      const uint64_t end = extend_position(rx_end, value);
      if (end - rx_released > rx_ring_bytes) {
        if (!rx_error.ok()) return Status::Ok();
        rx_error = Status::Corruption(fmt::format(
            "fabric: peer announced frames up to position {}, {} bytes past what we released "
            "({}) in a ring of {} bytes: a write past the ring's bounds",
            end, end - rx_released, rx_released, rx_ring_bytes));
        return Status::Ok();
      }
      if (rx_error.ok()) rx_end = end;
      return Status::Ok();
    }
    case kCredit: {
      connect_write_seen = true;
      if (mirror_ctl == nullptr) return Status::Ok();
      const uint64_t known = mirror_ctl->head.load(std::memory_order_relaxed);
      const uint64_t head = extend_position(known, value);
      if (head > tx.tail()) {
        return Status::Corruption(fmt::format(
            "fabric: peer returned credit up to {}, beyond the {} bytes we sent", head, tx.tail()));
      }
      mirror_ctl->head.store(head, std::memory_order_release);
      credit_requested = false;
      return Status::Ok();
    }
    case kFence: {
      // The completion says the mailbox word is written (the provider placed it first).
      const uint64_t epoch =
          std::atomic_ref<uint64_t>(reinterpret_cast<Mailbox*>(region)->fence_epoch)
              .load(std::memory_order_acquire);
      if (mirror_ctl != nullptr &&
          epoch > mirror_ctl->fence_epoch.load(std::memory_order_relaxed)) {
        mirror_ctl->fence_epoch.store(epoch, std::memory_order_release);
      }
      return Status::Ok();
    }
    case kSignal:
      if (value == kSignalClose) {
        // The peer's last write: everything it sent is announced before it. Its frames are
        // still delivered, then Unavailable; nothing more goes out (credit included).
        peer_closed = true;
        goodbye_due = !goodbye_sent;  // it waits for ours before it closes: progress() posts it
        if (rx_error.ok()) rx_error = Status::Unavailable("fabric peer closed the link");
      } else {
        peer_wants_credit = true;
      }
      return Status::Ok();
  }
  return Status::Ok();
}

Status FabricEndpoint::State::post_write(uint64_t offset, uint64_t bytes, uint32_t data) {
  const uint64_t start = mono_ns();
  for (;;) {  // bounded by send_timeout_ns
    // Checked after every progress(): nothing may follow a goodbye.
    if (quiet()) return quiet_status();
    if (tx_inflight < tx_inflight_limit) {
      const ssize_t rc =
          fi_writedata(ep, mirror + sizeof(RingControl) + offset, bytes, tx_desc, data, peer_addr,
                       peer_region_address + kRingOffset + offset, peer_key, nullptr);
      if (rc == 0) {
        ++tx_inflight;
        return Status::Ok();
      }
      if (rc != -FI_EAGAIN) return fi_status("fi_writedata", rc);
    }
    SHOAL_TRY(progress());
    SHOAL_TRY(check_peer_while_stuck(start));
    if (mono_ns() - start >= options.send_timeout_ns) {
      return Status::Timeout("fabric: the provider's send queue stayed full");
    }
  }
}

// A write the provider keeps refusing (FI_EAGAIN) while the peer is gone: tcp;ofi_rxm, once
// it has dropped the connection to a dead peer, redials it on every write and refuses the
// write while it does, so without this a sender spun for send_timeout_ns (10 s) before it
// found out; the liveness socket knows at once. Checked only after spin_ns of waiting.
Status FabricEndpoint::State::check_peer_while_stuck(uint64_t start) {
  if (mono_ns() - start < options.spin_ns) return Status::Ok();
  return check_peer();
}

// Control words are ordinary writes from registered memory with a completion, never
// fi_inject_writedata: libfabric 1.17's tcp provider queues an injected RMA write without
// marking it as injected (tcpx_rma_inject_common sets no TCPX_INJECT_OP) and without a
// context, so when the connection breaks while one is still queued (the peer stopped reading,
// then closed or died), its cancellation is reported with a NULL context, which ofi_rxm
// dereferences (rxm_handle_comp_error: segfault reading address 0x20). A write of ours is
// cancelled with rxm's own context and reaches us as FI_ECANCELED.
Status FabricEndpoint::State::post_control(Kind kind, uint64_t value, size_t mailbox_offset,
                                           uint64_t word) {
  if (quiet()) return quiet_status();
  // Only kFence's word is read by the peer; it stays put until the write completes, or is
  // replaced by a later (higher) fence, which the peer takes as well.
  uint64_t* src = &control_src->zero;
  if (kind == kFence) {
    control_src->fence_epoch = word;
    src = &control_src->fence_epoch;
  }
  const uint64_t start = mono_ns();
  for (;;) {  // bounded by send_timeout_ns
    if (tx_inflight < tx_inflight_limit) {
      const ssize_t rc =
          fi_writedata(ep, src, sizeof(uint64_t), tx_desc, cq_data(kind, value), peer_addr,
                       peer_region_address + mailbox_offset, peer_key, nullptr);
      if (rc == 0) {
        ++tx_inflight;
        return Status::Ok();
      }
      if (rc != -FI_EAGAIN) return fi_status("fi_writedata (control)", rc);
    }
    // Not progress(): it may call back into send_credit(). Drain completions only.
    fi_cq_data_entry entries[kCqBatch];
    const ssize_t n = fi_cq_read(cq, entries, kCqBatch);
    if (n == -FI_EAVAIL) return cq_error();
    for (ssize_t i = 0; i < n; ++i) SHOAL_TRY(on_completion(entries[i]));
    if (quiet()) return quiet_status();
    SHOAL_TRY(check_peer_while_stuck(start));
    if (mono_ns() - start >= options.send_timeout_ns) {
      return Status::Timeout("fabric: the provider's send queue stayed full");
    }
  }
}

// Posts our goodbye (kSignal close), our last write. FI_TRANSMIT_COMPLETE: its completion
// (the peer's provider acknowledges it) says the peer has every byte we wrote before it.
// False when the provider cannot take it now; an outright failure counts as sent (there is
// no link left to say it over).
bool FabricEndpoint::State::try_post_goodbye() {
  if (tx_inflight >= tx_inflight_limit) return false;
  iovec iov{&control_src->zero, sizeof(uint64_t)};
  fi_rma_iov rma{peer_region_address + offsetof(Mailbox, scratch), sizeof(uint64_t), peer_key};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &tx_desc;
  msg.iov_count = 1;
  msg.addr = peer_addr;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.data = cq_data(kSignal, kSignalClose);
  const ssize_t rc = fi_writemsg(ep, &msg, FI_REMOTE_CQ_DATA | FI_TRANSMIT_COMPLETE);
  if (rc == -FI_EAGAIN) return false;
  if (rc == 0) ++tx_inflight;
  goodbye_sent = true;
  goodbye_due = false;
  return true;
}

// Why close() waits for the peer's goodbye: libfabric 1.17's tcp provider also reports a
// cancelled *incoming* write (one half received when fi_close tears the connection down)
// with a NULL context, which ofi_rxm dereferences as it does the injected writes (see
// post_control). The peer's goodbye is its last write and comes after everything it posted
// before it (one stream), so once it has arrived nothing can be half received. A peer posts
// its goodbye in the same progress() call in which it reads ours, so this costs one round
// trip with a peer that polls; one that does not poll holds us to the deadline.
void FabricEndpoint::State::say_goodbye(uint64_t deadline) {
  // Also after a failure: to a dead peer the goodbye is the probe that tells when the provider
  // has dropped the connection (it is cancelled then), before which a write of the peer's
  // may still be half received.
  if (goodbye_sent || link_down || (peer_closed && !goodbye_due)) return;
  while (!link_down && !try_post_goodbye()) {  // bounded by the deadline
    // Refused while the peer's liveness socket has hung up: rxm has dropped the connection
    // (and with it anything half received) and is redialling a dead peer.
    if (mono_ns() >= deadline || !progress().ok() || !check_peer().ok()) return;
    cpu_relax();
  }
  if (link_down) return;
  // The other end of a pair() in this process: the thread closing us may be the one that
  // would have to poll it, so no waiting.
  if (twin != nullptr && twin->owner_pid == getpid()) {
    (void)progress();  // hands it to the socket
    return;
  }
  while (!link_down && !(peer_closed && tx_inflight == 0) && mono_ns() < deadline) {
    if (!progress().ok()) return;
    cpu_relax();
  }
}

Status FabricEndpoint::State::send_credit() {
  if (quiet()) return Status::Ok();  // the peer writes no more: no credit to return
  const uint64_t head = rx_released;
  SHOAL_TRY(post_control(kCredit, head >> 3, offsetof(Mailbox, scratch), head));
  head_sent = head;
  peer_wants_credit = false;
  return Status::Ok();
}

// RMA-writes what the producer committed since the last call to the same offsets of the
// peer's ring: one write, or two when the range wraps (sent >= the peer's head, so the range
// is at most one ring long).
Status FabricEndpoint::State::sync_tx() {
  if (quiet()) return Status::Ok();  // push() refuses new frames; committed ones are dropped
  const uint64_t tail = tx.tail();
  while (sent != tail) {  // at most two iterations
    const uint64_t offset = sent & (peer_ring_bytes - 1);
    const uint64_t bytes = std::min(tail - sent, peer_ring_bytes - offset);
    SHOAL_TRY(post_write(offset, bytes, cq_data(kFrames, (sent + bytes) >> 3)));
    sent += bytes;
  }
  return Status::Ok();
}

Status FabricEndpoint::State::check_peer() {
  pollfd p{sock, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) < 0) return socket_errno_status("fabric", "poll liveness socket", errno);
  if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) {
    return Status::Unavailable("fabric peer closed the link or died");
  }
  if (p.revents & POLLIN) {
    char c;
    if (::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      return Status::Unavailable("fabric peer closed the link or died");
    }
  }
  return Status::Ok();
}

// The peer is gone: collect what it wrote before (a few progress rounds), so those frames are
// delivered before `why`. Ok while frames remain.
Status FabricEndpoint::State::peer_gone(Status why) {
  for (int i = 0; i < 4; ++i) {
    if (!progress().ok()) break;
  }
  if (has_input()) return Status::Ok();
  return fail(std::move(why));
}

void FabricEndpoint::State::block_once(uint64_t timeout_ns) {
  if (wait_fd < 0) {
    usleep(kNoWaitFdNapUs);
    return;
  }
  if (!may_sleep_on_wait_fd()) return;  // completions are pending
  pollfd p[2] = {{wait_fd, POLLIN, 0}, {sock, POLLIN | POLLRDHUP, 0}};
  ::poll(p, 2, static_cast<int>(std::max<uint64_t>(1, timeout_ns / 1'000'000)));
}

Result<uint8_t*> FabricEndpoint::State::reserve_blocking(uint32_t bytes) {
  if (uint8_t* p = tx.try_reserve(bytes)) [[likely]]
    return p;
  const uint64_t start = mono_ns();
  for (;;) {  // bounded by send_timeout_ns
    // The reader can return credit only for bytes it has: send them, then ask.
    SHOAL_TRY(sync_tx());
    if (!credit_requested) {
      SHOAL_TRY(post_control(kSignal, kSignalCreditRequest, offsetof(Mailbox, scratch), 0));
      credit_requested = true;
    }
    SHOAL_TRY(progress());
    if (quiet()) return quiet_status();
    if (uint8_t* p = tx.try_reserve(bytes)) return p;
    const uint64_t waited = mono_ns() - start;
    if (waited >= options.send_timeout_ns) {
      return Status::Timeout(fmt::format("fabric send: no credit for {} ms", waited / 1'000'000));
    }
    if (waited >= options.spin_ns) {
      Status s = check_peer();
      if (!s.ok()) return s;
      block_once(kMaxSleepSliceNs);
    }
  }
}

Status FabricEndpoint::State::push(uint32_t flags, uint32_t imm, uint64_t epoch,
                                   GatherCursor& cursor, size_t payload_bytes) {
  if (quiet()) return quiet_status();
  const auto n = static_cast<uint32_t>(payload_bytes);
  auto dst = reserve_blocking(n);
  if (!dst.ok()) return dst.status();
  cursor.copy_to(*dst, n);
  sent_copied += n;
  tx.commit(flags, imm, epoch, n, /*publish_now=*/false);
  // Batch until flush()/poll()/wait(), or an eighth of the ring (as shm publishes).
  if (tx.tail() - sent >= peer_ring_bytes / 8) return sync_tx();
  return Status::Ok();
}

bool FabricEndpoint::State::next_frame(Frame* out, Status* error) {
  // Bounded: each iteration consumes a pad or a fenced write; give control back after a burst.
  for (int skips = 0; skips < 64; ++skips) {
    if (rx_cursor == rx_end) {
      if (!rx_error.ok()) *error = rx_error;
      return false;
    }
    const uint64_t offset = rx_cursor & (rx_ring_bytes - 1);
    const uint64_t left = rx_ring_bytes - offset;
    const uint64_t readable = std::min(rx_end - rx_cursor, left);
    const uint8_t* p = rx_data + offset;
    if (readable >= 4 && detail::load_u32(p) == kFlagPad) {
      rx_cursor += left;
      continue;
    }
    const Decode d = decode_frame_fast({p, readable}, rx_cursor, rx_max_payload, out);
    if (d == Decode::kFrame) [[likely]] {
      rx_cursor += out->frame_bytes;
      if ((out->flags & kFlagWrite) && out->epoch < fence_epoch) {
        ++drops;
        continue;
      }
      return true;
    }
    *error = d == Decode::kIncomplete
                 ? Status::Corruption(fmt::format(
                       "fabric: frame at stream position {} truncated by the announced end {}",
                       rx_cursor, rx_end))
                 : decode_error(d, {p, readable}, rx_cursor, rx_max_payload);
    return false;
  }
  return false;
}

void FabricEndpoint::State::release_consumed() {
  // Up to the oldest kept region: the writer may not write over a held byte.
  const uint64_t released = holds == nullptr ? rx_cursor : holds->floor(rx_cursor);
  SHOAL_DCHECK(released >= rx_released);
  rx_released = released;
  // Lazy credit: once per quarter ring, or at once when the writer asked.
  if (rx_released - head_sent >= rx_ring_bytes / 4 ||
      (peer_wants_credit && rx_released != head_sent)) {
    Status s = send_credit();
    if (!s.ok()) fail(std::move(s)).ignore();
  }
}

std::shared_ptr<const uint64_t[]> FabricEndpoint::State::keep(std::span<const uint8_t> bytes) {
  SHOAL_ASSERT(batch_outstanding, "%s", "keep_received() outside a poll batch");
  const uint64_t begin = position_of(bytes.data());
  if (begin == UINT64_MAX || bytes.empty() || reinterpret_cast<uintptr_t>(bytes.data()) % 8 != 0 ||
      begin + bytes.size() > rx_cursor ||
      bytes.data() + bytes.size() > rx_data + rx_ring_bytes) {  // frames never wrap
    return nullptr;
  }
  if (holds == nullptr)
    holds = RingHolds::create(kKeepRecords, region, round_to_pages(region_bytes));
  // Held back from the writer if we keep these: from the oldest kept region (or these bytes)
  // to the cursor. At most three quarters of the ring, so a frame of a quarter finds room.
  const uint64_t oldest = std::min(holds->floor(rx_cursor), begin);
  if (rx_cursor - oldest > rx_ring_bytes / 4 * 3) return nullptr;
  return holds->hold(bytes.data(), begin, bytes.size());
}

Result<size_t> FabricEndpoint::State::poll(Completion* out, size_t max) {
  SHOAL_TRY(ensure_ready());
  SHOAL_ASSERT(!batch_outstanding, "%s", "poll() before release() of the previous batch");
  if (Status s = sync_tx(); !s.ok()) return fail(std::move(s));
  let_go_of_kept();
  SHOAL_TRY(progress_or_fail());
  auto polled = poll_frames(*this, assembler, out, max);
  if (!polled.ok()) return fail(polled.status());
  const size_t n = *polled;
  batch_outstanding = n > 0;
  if (n == 0 && (++empty_polls & 63) == 0) [[unlikely]] {
    // Liveness: at most once per interval, and the clock is read only every 64 empty polls.
    const uint64_t now = mono_ns();
    if (now - last_liveness_check_ns >= kLivenessCheckNs) {
      last_liveness_check_ns = now;
      if (Status s = check_peer(); !s.ok()) SHOAL_TRY(peer_gone(std::move(s)));
    }
  }
  return n;
}

Status FabricEndpoint::State::wait(uint64_t timeout_ns) {
  SHOAL_TRY(ensure_ready());
  if (Status s = sync_tx(); !s.ok()) return fail(std::move(s));
  const uint64_t start = mono_ns();
  const uint64_t spin_end = start + std::min(options.spin_ns, timeout_ns);
  do {  // spin: software providers move data only while we poll the CQ
    SHOAL_TRY(progress_or_fail());
    if (has_input()) return Status::Ok();
    cpu_relax();
  } while (mono_ns() < spin_end);
  const uint64_t deadline = start + timeout_ns;
  for (;;) {  // bounded by the deadline
    // Before sleeping, return all credit (kept regions let go since included): the writer may
    // be waiting for it. A region let go while we sleep is seen after this slice.
    let_go_of_kept();
    if (rx_released != head_sent) {
      if (Status s = send_credit(); !s.ok()) return fail(std::move(s));
    }
    SHOAL_TRY(progress_or_fail());
    if (has_input()) return Status::Ok();
    if (Status s = check_peer(); !s.ok()) return peer_gone(std::move(s));
    const uint64_t now = mono_ns();
    if (now >= deadline) return Status::Timeout("");
    block_once(std::min(deadline - now, kMaxSleepSliceNs));
  }
}

bool FabricEndpoint::State::prepare_to_block() {
  if (!ensure_ready().ok()) return false;  // poll() reports it
  if (!sync_tx().ok() || !progress_or_fail().ok()) return false;
  let_go_of_kept();
  if (!failed.ok() || (rx_released != head_sent && !send_credit().ok())) return false;
  if (has_input() || wait_fd < 0) return false;  // no wait fd: the loop spins
  return may_sleep_on_wait_fd();
}

// ---------------------------------------------------------------------------------------------
// FabricEndpoint

namespace {

std::unique_ptr<FabricEndpoint::State> new_state(int sock, const EndpointOptions& options,
                                                 const FabricOptions& fabric) {
  auto s = std::make_unique<FabricEndpoint::State>();
  s->options = options;
  s->fabric_options = fabric;
  s->provider = resolve_provider(fabric);
  s->sock = sock;
  s->owner_pid = getpid();
  s->expected_peer_ring_bytes = options.ring_bytes;
  s->assembler = MessageAssembler(options.max_message_bytes);
  return s;
}

Status check_options(const EndpointOptions& o) {
  SHOAL_TRY(check_ring_bytes(o.ring_bytes, "our"));
  if (o.max_message_bytes > kMaxMessageBytesLimit) {
    return Status::InvalidArgument("max_message_bytes above 1 GiB");
  }
  return Status::Ok();
}

Status check_loopback(const sockaddr_in& addr, const std::string& host) {
  if ((ntohl(addr.sin_addr.s_addr) >> 24) != 127) {
    return Status::InvalidArgument(
        fmt::format("fabric transport: '{}' is not a loopback address (127.0.0.0/8 only)", host));
  }
  return Status::Ok();
}

const Status& closed_status() {
  static const Status* s = new Status(Status::Unavailable("fabric endpoint closed"));
  return *s;
}

}  // namespace

FabricEndpoint::FabricEndpoint() = default;
FabricEndpoint::FabricEndpoint(std::unique_ptr<State> state) : s_(std::move(state)) {}
FabricEndpoint::FabricEndpoint(FabricEndpoint&&) noexcept = default;
FabricEndpoint& FabricEndpoint::operator=(FabricEndpoint&&) noexcept = default;
FabricEndpoint::~FabricEndpoint() = default;

std::string FabricEndpoint::provider_name(const FabricOptions& options) {
  return resolve_provider(options);
}

bool FabricEndpoint::supported(std::string* why_not, const FabricOptions& options) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::string>();  // provider -> why not ("": ok)
  const std::string provider = resolve_provider(options);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(provider);
  if (it == cache->end()) {
    std::string why;
    EndpointOptions eo;
    eo.ring_bytes = 64 * 1024;
    auto link = pair(eo, options);
    Status s = link.status();
    if (s.ok()) {
      auto& [a, b] = *link;
      const uint8_t probe[] = {'p', 'r', 'o', 'b', 'e'};
      s = a.send(1, probe);
      if (s.ok()) s = a.flush();
      const uint64_t deadline = mono_ns() + 5'000'000'000;
      size_t got = 0;
      while (s.ok() && got == 0 && mono_ns() < deadline) {  // bounded by the deadline
        Completion c;
        auto n = b.poll(&c, 1);
        if (!n.ok()) {
          s = n.status();
          break;
        }
        got = *n;
        if (got == 0) s = b.wait(100'000'000);
        if (s.code() == Code::kTimeout) s = Status::Ok();
      }
      if (got == 1) b.release();
      if (s.ok() && got == 0) s = Status::Timeout("probe message did not arrive");
    }
    if (!s.ok()) why = fmt::format("provider '{}': {}", provider, s.to_string());
    it = cache->emplace(provider, why).first;
  }
  if (why_not != nullptr) *why_not = it->second;
  return it->second.empty();
}

Result<std::pair<FabricEndpoint, FabricEndpoint>> FabricEndpoint::pair(
    const EndpointOptions& options, const FabricOptions& fabric) {
  SHOAL_TRY(check_options(options));
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return socket_errno_status("fabric", "socketpair", errno);
  }
  auto a = new_state(fds[0], options, fabric);
  auto b = new_state(fds[1], options, fabric);
  a->twin = b.get();
  b->twin = a.get();
  return std::make_pair(FabricEndpoint(std::move(a)), FabricEndpoint(std::move(b)));
}

Result<FabricEndpoint> FabricEndpoint::connect(const std::string& host, uint16_t port,
                                               const EndpointOptions& options,
                                               const FabricOptions& fabric, uint64_t timeout_ms) {
  SHOAL_TRY(check_options(options));
  auto addr = parse_ipv4(host, port);
  if (!addr.ok()) return addr.status();
  SHOAL_TRY(check_loopback(*addr, host));
  auto fd = dial_tcp(*addr, timeout_ms, "fabric");
  if (!fd.ok()) return fd.status();
  FabricEndpoint ep(new_state(*fd, options, fabric));
  SHOAL_TRY(ep.s_->ensure_ready());
  return ep;
}

Result<FabricEndpoint> FabricEndpoint::connect_local(const std::string& name,
                                                     const EndpointOptions& options,
                                                     const FabricOptions& fabric,
                                                     uint64_t timeout_ms) {
  SHOAL_TRY(check_options(options));
  const uint64_t deadline = mono_ns() + timeout_ms * 1'000'000;
  socklen_t len;
  const sockaddr_un addr = abstract_unix_address(name, &len);
  for (;;) {  // bounded by the deadline: the listener may not be up yet
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return socket_errno_status("fabric", "socket", errno);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      FabricEndpoint ep(new_state(fd, options, fabric));  // owns fd from here on
      SHOAL_TRY(check_peer_uid(fd, "fabric", "connect"));
      SHOAL_TRY(ep.s_->ensure_ready());
      return ep;
    }
    const int err = errno;
    ::close(fd);
    if ((err != ECONNREFUSED && err != ENOENT) || mono_ns() >= deadline) {
      return socket_errno_status("fabric", fmt::format("connect to '{}'", name).c_str(), err);
    }
    usleep(1000);
  }
}

Status FabricEndpoint::send(uint32_t session, std::span<const uint8_t> bytes) {
  if (!s_) return closed_status();
  State& s = *s_;
  SHOAL_TRY(s.ensure_ready());
  SHOAL_ASSERT(!s.reserved, "%s", "send() while a reserve() is outstanding");
  if (bytes.size() > s.options.max_message_bytes) {
    return Status::InvalidArgument(fmt::format("message of {} bytes above max_message_bytes {}",
                                               bytes.size(), s.options.max_message_bytes));
  }
  const std::span<const uint8_t> one[1] = {bytes};
  GatherCursor cursor(one);
  return s.send_fragments(session, cursor, bytes.size());
}

Status FabricEndpoint::send_gather(uint32_t session, GatherList pieces) {
  if (!s_) return closed_status();
  State& s = *s_;
  SHOAL_TRY(s.ensure_ready());
  SHOAL_ASSERT(!s.reserved, "%s", "send_gather() while a reserve() is outstanding");
  auto bytes = gather_message_bytes(pieces, s.options.max_message_bytes);
  if (!bytes.ok()) return bytes.status();
  GatherCursor cursor(pieces);
  return s.send_fragments(session, cursor, *bytes);
}

Status FabricEndpoint::State::send_fragments(uint32_t session, GatherCursor& cursor, size_t bytes) {
  const size_t fragment = tx.max_payload_bytes();
  size_t offset = 0;
  do {  // bounded: max_message_bytes / fragment iterations
    const size_t n = std::min(fragment, bytes - offset);
    const bool more = offset + n < bytes;
    Status st = push(more ? kFlagMore : 0, session, 0, cursor, n);
    if (!st.ok()) {
      // Half a message in the peer's ring cannot be taken back: the link is unusable.
      return offset == 0 && st.code() == Code::kTimeout ? st : fail(std::move(st));
    }
    offset += n;
  } while (offset < bytes);
  return Status::Ok();
}

uint64_t FabricEndpoint::sent_copied_bytes() const {
  return s_ ? s_->sent_copied : 0;
}

uint64_t FabricEndpoint::received_copied_bytes() const {
  return s_ ? s_->assembler.copied_bytes() : 0;
}

Status FabricEndpoint::write_with_imm(uint64_t epoch, uint32_t imm,
                                      std::span<const uint8_t> bytes) {
  if (!s_) return closed_status();
  State& s = *s_;
  SHOAL_TRY(s.ensure_ready());
  SHOAL_ASSERT(!s.reserved, "%s", "write_with_imm() while a reserve() is outstanding");
  if (bytes.size() > s.tx.max_payload_bytes()) {
    return Status::InvalidArgument(fmt::format("one-sided write of {} bytes above the limit {}",
                                               bytes.size(), s.tx.max_payload_bytes()));
  }
  const uint64_t fence = s.tx.fence_epoch();
  if (epoch < fence) {
    return Status::Aborted(
        fmt::format("write epoch {} below the peer's fence {}: stale writer fenced", epoch, fence));
  }
  Status st = s.push(kFlagWrite, imm, epoch, bytes);
  return st.ok() || st.code() == Code::kTimeout ? st : s.fail(std::move(st));
}

Result<std::span<uint8_t>> FabricEndpoint::reserve(size_t bytes) {
  if (!s_) return closed_status();
  State& s = *s_;
  SHOAL_TRY(s.ensure_ready());
  SHOAL_ASSERT(!s.reserved, "%s", "reserve() with a reservation outstanding");
  if (bytes > s.tx.max_payload_bytes()) {
    return Status::InvalidArgument(fmt::format("reserve of {} bytes above max_write_bytes {}",
                                               bytes, s.tx.max_payload_bytes()));
  }
  if (s.quiet()) return s.fail(s.quiet_status());
  auto p = s.reserve_blocking(static_cast<uint32_t>(bytes));
  if (!p.ok()) return p.status();
  s.reserved = true;
  return std::span<uint8_t>(*p, bytes);
}

Status FabricEndpoint::commit_send(uint32_t session, size_t bytes) {
  SHOAL_ASSERT(s_ && s_->reserved, "%s", "commit_send() without reserve()");
  s_->reserved = false;
  s_->tx.commit(0, session, 0, static_cast<uint32_t>(bytes), false);
  return s_->failed;
}

Status FabricEndpoint::commit_write(uint64_t epoch, uint32_t imm, size_t bytes) {
  SHOAL_ASSERT(s_ && s_->reserved, "%s", "commit_write() without reserve()");
  const uint64_t fence = s_->tx.fence_epoch();
  if (epoch < fence) {
    cancel();
    return Status::Aborted(
        fmt::format("write epoch {} below the peer's fence {}: stale writer fenced", epoch, fence));
  }
  s_->reserved = false;
  s_->tx.commit(kFlagWrite, imm, epoch, static_cast<uint32_t>(bytes), false);
  return s_->failed;
}

void FabricEndpoint::cancel() {
  if (!s_) return;
  s_->tx.cancel();
  s_->reserved = false;
}

Status FabricEndpoint::set_fence_epoch(uint64_t epoch) {
  if (!s_) return closed_status();
  State& s = *s_;
  SHOAL_TRY(s.ensure_ready());
  if (epoch < s.fence_epoch) return Status::InvalidArgument("fence epochs only move forward");
  s.fence_epoch = epoch;
  // Tell the writer, so it refuses stale writes itself once it has polled this.
  Status st = s.post_control(kFence, 0, offsetof(Mailbox, fence_epoch), epoch);
  return st.ok() ? st : s.fail(std::move(st));
}

Status FabricEndpoint::flush() {
  if (!s_) return closed_status();
  State& s = *s_;
  SHOAL_TRY(s.ensure_ready());
  Status st = s.sync_tx();
  if (st.ok()) st = s.progress();  // hands the writes to the provider's sockets now
  return st.ok() ? s.failed : s.fail(std::move(st));
}

Result<size_t> FabricEndpoint::poll(Completion* out, size_t max) {
  if (!s_) return closed_status();
  return s_->poll(out, max);
}

void FabricEndpoint::release() {
  if (!s_) return;
  s_->assembler.release();
  if (s_->phase == State::Phase::kReady) s_->release_consumed();
  s_->batch_outstanding = false;
}

std::shared_ptr<const uint64_t[]> FabricEndpoint::keep_received(std::span<const uint8_t> bytes) {
  SHOAL_ASSERT(s_ != nullptr, "%s", "keep_received() on a moved-from endpoint");
  return s_->keep(bytes);
}

uint64_t FabricEndpoint::receive_held_bytes() const {
  return s_ ? s_->rx_cursor - s_->rx_released : 0;
}

uint64_t FabricEndpoint::receive_ring_bytes() const {
  return s_ ? s_->options.ring_bytes : 0;
}

bool FabricEndpoint::in_receive_ring(const void* p) const {
  return s_ && s_->position_of(static_cast<const uint8_t*>(p)) != UINT64_MAX;
}

uint64_t FabricEndpoint::kept_regions() const {
  return s_ && s_->holds != nullptr ? s_->holds->holds_made() : 0;
}

Status FabricEndpoint::wait(uint64_t timeout_ns) {
  if (!s_) return closed_status();
  return s_->wait(timeout_ns);
}

Status FabricEndpoint::inject_raw_for_test(std::span<const uint8_t> bytes) {
  if (!s_) return closed_status();
  SHOAL_TRY(s_->ensure_ready());
  s_->tx.flush();
  s_->tx.inject_raw_for_test(bytes);
  return s_->sync_tx();
}

Status FabricEndpoint::announce_for_test(uint64_t end) {
  if (!s_) return closed_status();
  SHOAL_TRY(s_->ensure_ready());
  return s_->post_control(kFrames, end >> 3, offsetof(Mailbox, scratch), end);
}

int FabricEndpoint::wait_fd() const {
  return s_ ? s_->wait_fd : -1;
}
int FabricEndpoint::liveness_fd() const {
  return s_ ? s_->sock : -1;
}
bool FabricEndpoint::prepare_to_block() {
  return s_ && s_->prepare_to_block();
}

size_t FabricEndpoint::max_message_bytes() const {
  return s_ ? s_->options.max_message_bytes : 0;
}
size_t FabricEndpoint::max_write_bytes() const {
  if (!s_) return 0;
  if (s_->peer_known) return s_->tx.max_payload_bytes();
  return max_payload_for(s_->expected_peer_ring_bytes);
}
uint64_t FabricEndpoint::fenced_drops() const {
  return s_ ? s_->drops : 0;
}
const std::string& FabricEndpoint::provider() const {
  static const std::string none;
  return s_ ? s_->provider : none;
}

void FabricEndpoint::close() {
  if (s_) s_->close();
}

// ---------------------------------------------------------------------------------------------
// Listener

Result<FabricListener> FabricListener::listen(const std::string& host, uint16_t port,
                                              const EndpointOptions& options,
                                              const FabricOptions& fabric) {
  SHOAL_TRY(check_options(options));
  auto addr = parse_ipv4(host, port);
  if (!addr.ok()) return addr.status();
  SHOAL_TRY(check_loopback(*addr, host));
  FabricListener l;
  l.options_ = options;
  l.fabric_ = fabric;
  l.fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l.fd_ < 0) return socket_errno_status("fabric", "socket", errno);
  const int one = 1;
  setsockopt(l.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(l.fd_, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    return socket_errno_status("fabric", "listen: bind", errno);
  }
  if (::listen(l.fd_, 64) != 0) return socket_errno_status("fabric", "listen", errno);
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  if (getsockname(l.fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return socket_errno_status("fabric", "getsockname", errno);
  }
  l.port_ = ntohs(bound.sin_port);
  return l;
}

Result<FabricListener> FabricListener::listen_local(const std::string& name,
                                                    const EndpointOptions& options,
                                                    const FabricOptions& fabric) {
  SHOAL_TRY(check_options(options));
  FabricListener l;
  l.options_ = options;
  l.fabric_ = fabric;
  l.local_ = true;
  l.fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l.fd_ < 0) return socket_errno_status("fabric", "socket", errno);
  socklen_t len;
  const sockaddr_un addr = abstract_unix_address(name, &len);
  if (bind(l.fd_, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    return socket_errno_status("fabric", fmt::format("listen on '{}': bind", name).c_str(), errno);
  }
  if (::listen(l.fd_, 64) != 0) return socket_errno_status("fabric", "listen", errno);
  return l;
}

FabricListener& FabricListener::operator=(FabricListener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    options_ = other.options_;
    fabric_ = other.fabric_;
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
    local_ = other.local_;
  }
  return *this;
}

FabricListener::~FabricListener() {
  if (fd_ >= 0) ::close(fd_);
}

Result<FabricEndpoint> FabricListener::accept(uint64_t timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) <= 0) {
    return Status::Timeout("fabric accept: no connection");
  }
  const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return socket_errno_status("fabric", "accept", errno);
  FabricEndpoint ep(new_state(fd, options_, fabric_));  // owns fd from here on
  if (local_) SHOAL_TRY(check_peer_uid(fd, "fabric", "accept"));
  SHOAL_TRY(ep.s_->ensure_ready());
  return ep;
}

}  // namespace shoal::net
