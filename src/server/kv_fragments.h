// The Redis front end's key space on a shard: a byte-key engine table (txn::BytesTable named
// kKvTableName) and the 2PC fragments (dist/participant.h) that read and write it for any
// coordinator, registered on every shard server beside the workload's. A coordinator's
// DistKvTxn (dist_kv.h) encodes the arguments and decodes the results below; each fragment
// runs inside the transaction's context on the owning shard, so its reads are validated and
// its writes installed with the rest of the transaction (serializable across shards).
//
// Wire formats (little-endian, sizes u32; at most dist::kFragmentBytesMax each way):
//   get    args: key                      result: u8 kind, u64 version, then
//                                           kind kFound: the value; kAbsent: nothing;
//                                           kTooSmall: u32 bytes the result needs
//   put    args: u32 key_bytes, key, value      result: none
//   del    args: key                            result: none
//   scan   args: ScanArgs (encode_scan)   result: u8 more, u32 count, then count entries
//                                           (u32 key_bytes, key, u32 value_bytes, value cut)
//                                           more = 1: the result filled up first; go on after
//                                           the last key. Count mode: entries hold keys only
//                                           (value_bytes 0) and only the last is written.
// Fragments validate every length and answer InvalidArgument on malformed arguments (they
// arrive from the network).
// Threads: the fragments run on the participant's worker thread; the codecs are pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shoal/status.h"
#include "src/dist/participant.h"
#include "src/resp/kv_backend.h"

namespace shoal::txn {
class BytesTable;
class Engine;
}  // namespace shoal::txn

namespace shoal::server {

inline constexpr const char* kKvTableName = "resp_kv";

// Fragment ids, beside TPC-C's 0..3 (dist_tpcc.h).
enum KvFragment : uint32_t {
  kFragKvGet = 8,
  kFragKvPut = 9,
  kFragKvDel = 10,
  kFragKvScan = 11,
};

enum KvGetKind : uint8_t { kKvAbsent = 0, kKvFound = 1, kKvTooSmall = 2 };
inline constexpr size_t kKvGetHeaderBytes = 9;  // kind, version
inline constexpr size_t kKvGetResultMin = kKvGetHeaderBytes + 4;
inline constexpr size_t kKvScanHeaderBytes = 5;  // more, count

// The shard's table: created on a fresh engine, found on one that has it (a promoted follower's).
[[nodiscard]] Result<txn::BytesTable*> kv_table(txn::Engine& engine);
// Registers the fragments in `table` with `kv` as their context. REQUIRES: kv outlives table's use.
void register_kv_fragments(dist::FragmentTable* table, txn::BytesTable* kv);

struct KvScanArgs {
  std::string_view start;
  bool start_inclusive = true;
  bool has_end = false;
  std::string_view end;
  uint32_t limit = 0;
  uint32_t value_prefix_bytes = 0;
  bool count_only = false;
};

// Encoders (the coordinator's side); *out is replaced.
void encode_kv_put(std::string_view key, std::string_view value, std::vector<uint8_t>* out);
void encode_kv_scan(const KvScanArgs& a, std::vector<uint8_t>* out);
// Decoders of results: Corruption on a malformed result.
struct KvGetResult {
  KvGetKind kind = kKvAbsent;
  uint64_t version = 0;
  std::string_view value;  // kFound
  uint32_t needed = 0;     // kTooSmall
};
[[nodiscard]] Status decode_kv_get(std::span<const uint8_t> result, KvGetResult* out);
// Appends the entries to *out (values as cut; nothing in count mode); *more as the fragment
// said; *count the keys it delivered (counted); *last_key views the last key in `result`
// (empty when none).
[[nodiscard]] Status decode_kv_scan(std::span<const uint8_t> result, bool count_only,
                                    std::vector<resp::KeyValue>* out, bool* more, uint32_t* count,
                                    std::string_view* last_key);

}  // namespace shoal::server
