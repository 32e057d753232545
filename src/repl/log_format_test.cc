// Log format: round trips, version rules, corruption and truncation detection, a fuzz loop.
#include "src/repl/log_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace shoal::repl {
namespace {

// Generated transactions, kept so a decoded entry can be compared with what went in.
struct GenWrite {
  uint32_t table_id;
  WriteOp op;
  std::vector<uint64_t> key;
  std::vector<std::byte> value;  // kPatch: the body
  uint32_t patch_value_bytes = 0;
  uint16_t patch_ranges = 0;
  bool bytes_key = false;  // key is a packed byte key (format 5)
};

// A packed byte key (word 0 its length, then its bytes, zero padded) of `len` random bytes.
std::vector<uint64_t> random_byte_key(Rng& rng, size_t len) {
  std::vector<uint64_t> key(log_packed_key_words(len), 0);
  key[0] = len;
  auto* bytes = reinterpret_cast<unsigned char*>(key.data() + 1);
  for (size_t i = 0; i < len; ++i) bytes[i] = static_cast<unsigned char>(rng.next());
  return key;
}

// A value of `size` random bytes and a copy with `changes` random bytes changed.
std::pair<std::vector<std::byte>, std::vector<std::byte>> old_and_new(Rng& rng, size_t size,
                                                                      size_t changes) {
  std::vector<std::byte> old_value(size);
  for (auto& b : old_value) b = static_cast<std::byte>(rng.next());
  std::vector<std::byte> new_value = old_value;
  for (size_t i = 0; i < changes && size > 0; ++i) {
    new_value[rng.uniform(0, size - 1)] = static_cast<std::byte>(rng.next());
  }
  return {std::move(old_value), std::move(new_value)};
}

// Makes w a patch of a random value with a few changed bytes (a put when it does not pay).
void make_patch(Rng& rng, uint32_t value_bytes_max, GenWrite* w) {
  const size_t size = rng.uniform(0, value_bytes_max);
  auto [old_value, new_value] = old_and_new(rng, size, rng.uniform(0, 4));
  std::vector<std::byte> body(size + 64);
  uint16_t ranges = 0;
  const size_t n = encode_patch(old_value, new_value, rng.next() >> 1, body, &ranges);
  if (n == 0) {
    w->op = WriteOp::kPut;
    w->value = std::move(new_value);
    return;
  }
  body.resize(n);
  w->value = std::move(body);
  w->patch_value_bytes = static_cast<uint32_t>(size);
  w->patch_ranges = ranges;
}
struct GenTxn {
  uint64_t tid;
  std::vector<txn::DepEntry> deps;
  std::vector<GenWrite> writes;
};

GenTxn random_txn(Rng& rng, uint64_t tid, uint32_t writes_max, uint32_t value_bytes_max) {
  GenTxn t;
  t.tid = tid;
  const uint32_t ndeps = static_cast<uint32_t>(rng.uniform(0, 5));
  for (uint32_t i = 0; i < ndeps; ++i) {
    t.deps.push_back({static_cast<uint32_t>(rng.uniform(0, 1000)), rng.next()});
  }
  const uint32_t nwrites = static_cast<uint32_t>(rng.uniform(0, writes_max));
  for (uint32_t i = 0; i < nwrites; ++i) {
    GenWrite w;
    w.table_id = static_cast<uint32_t>(rng.uniform(0, 20));
    w.op = static_cast<WriteOp>(rng.uniform(1, 4));
    w.key.resize(rng.uniform(1, kLogKeyWordsMax));
    for (auto& k : w.key) k = rng.next();
    if (w.op != WriteOp::kPatch && rng.uniform(0, 3) == 0) {
      w.bytes_key = true;
      w.key = random_byte_key(rng, rng.uniform(1, 40));
    }
    if (w.op == WriteOp::kPatch) {
      make_patch(rng, value_bytes_max, &w);
    } else if (w.op != WriteOp::kRemove) {
      w.value.resize(rng.uniform(0, value_bytes_max));
      for (auto& b : w.value) b = static_cast<std::byte>(rng.next());
    }
    t.writes.push_back(std::move(w));
  }
  return t;
}

AppendResult append_txn(LogBatchBuilder& b, const GenTxn& t) {
  std::vector<TxnWrite> ws;
  for (const GenWrite& w : t.writes) {
    ws.push_back(
        {w.table_id, w.op, w.key, w.value, w.patch_value_bytes, w.patch_ranges, w.bytes_key});
  }
  return b.append(t.tid, t.deps, ws);
}

void expect_same(const LogEntryView& e, const std::vector<GenTxn>& txns) {
  ASSERT_EQ(e.record_count(), txns.size());
  size_t i = 0;
  e.for_each_record([&](const RecordView& r) {
    const GenTxn& t = txns[i++];
    EXPECT_EQ(r.commit_tid(), t.tid);
    ASSERT_EQ(r.dep_count(), t.deps.size());
    for (uint32_t d = 0; d < r.dep_count(); ++d) EXPECT_EQ(r.dep(d), t.deps[d]);
    ASSERT_EQ(r.write_count(), t.writes.size());
    size_t j = 0;
    r.for_each_write([&](const WriteView& w) {
      const GenWrite& g = t.writes[j++];
      EXPECT_EQ(w.table_id, g.table_id);
      EXPECT_EQ(w.op, g.op);
      ASSERT_EQ(w.bytes_key, g.bytes_key);
      ASSERT_EQ(w.key_word_count, g.key.size());
      if (g.bytes_key) {
        EXPECT_EQ(w.byte_key(),
                  std::string_view(reinterpret_cast<const char*>(g.key.data() + 1), g.key[0]));
      }
      for (uint32_t k = 0; k < w.key_word_count; ++k) EXPECT_EQ(w.key_word(k), g.key[k]);
      ASSERT_EQ(w.value.size(), g.value.size());
      EXPECT_EQ(w.patch_value_bytes, g.patch_value_bytes);
      EXPECT_EQ(w.patch_ranges, g.patch_ranges);
      if (!g.value.empty()) {
        EXPECT_EQ(0, std::memcmp(w.value.data(), g.value.data(), g.value.size()));
      }
    });
  });
}

// An 8-aligned heap buffer of exactly n bytes, so ASan flags any read past the end.
std::unique_ptr<std::byte[]> exact_copy(const std::byte* src, size_t n) {
  auto p = std::make_unique<std::byte[]>(n == 0 ? 1 : n);
  if (n != 0) std::memcpy(p.get(), src, n);
  return p;
}

// Opens `b` over `buf` with three small transactions drawn from `rng` (fixed when seeded
// 11), not yet sealed.
void fill_small_batch(LogBatchBuilder& b, std::byte (&buf)[4096], Rng& rng) {
  b.reset(buf, {3, 1, 7, 42}, BatchLimits{});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(append_txn(b, random_txn(rng, 100 + i, 2, 20)), AppendResult::kOk);
  }
}

// A small, fixed entry for exhaustive corruption checks.
std::vector<std::byte> small_entry() {
  alignas(8) static std::byte buf[4096];
  LogBatchBuilder b;
  Rng rng(11);
  fill_small_batch(b, buf, rng);
  const auto e = b.seal();
  return {e.begin(), e.end()};
}

struct alignas(8) Buf {
  std::vector<uint64_t> words;
  explicit Buf(size_t bytes) : words((bytes + 7) / 8) {}
  std::span<std::byte> span() {
    return {reinterpret_cast<std::byte*>(words.data()), words.size() * 8};
  }
};

TEST(LogFormat, RoundTripManyRandomBatches) {
  Rng rng(1);
  Buf buf(256 * 1024);
  for (int batch = 0; batch < 300; ++batch) {
    LogBatchBuilder b;
    const LogEntryId id{static_cast<uint32_t>(batch % 7), static_cast<uint32_t>(batch % 3),
                        rng.uniform(1, 9), static_cast<uint64_t>(batch)};
    b.reset(buf.span(), id,
            BatchLimits{static_cast<uint32_t>(rng.uniform(1, 400)), 256 * 1024, 1'000'000});
    std::vector<GenTxn> txns;
    for (;;) {
      GenTxn t = random_txn(rng, rng.uniform(1, 1u << 30), 12, 300);
      const AppendResult r = append_txn(b, t);
      ASSERT_NE(r, AppendResult::kNeverFits);
      if (r == AppendResult::kFull) break;
      txns.push_back(std::move(t));
    }
    const auto sealed = b.seal();
    EXPECT_EQ(sealed.size() % 8, 0u);
    auto e = LogEntryView::parse(sealed, 0);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_EQ(e->id().shard, id.shard);
    EXPECT_EQ(e->id().stream, id.stream);
    EXPECT_EQ(e->id().epoch, id.epoch);
    EXPECT_EQ(e->id().sequence, id.sequence);
    EXPECT_EQ(e->entry_bytes(), sealed.size());
    uint64_t lo = ~uint64_t{0}, hi = 0;
    for (const auto& t : txns) lo = std::min(lo, t.tid), hi = std::max(hi, t.tid);
    EXPECT_EQ(e->min_tid(), txns.empty() ? 0 : lo);
    EXPECT_EQ(e->max_tid(), hi);
    expect_same(*e, txns);
  }
}

TEST(LogFormat, SameInputsGiveIdenticalBytes) {
  // Padding is zeroed, so a dirty buffer must not leak into the entry (replicas byte-identical).
  Buf clean(8192), dirty(8192);
  std::memset(dirty.span().data(), 0xab, dirty.span().size());
  std::vector<std::byte> out[2];
  int k = 0;
  for (Buf* buf : {&clean, &dirty}) {
    Rng rng(5);
    LogBatchBuilder b;
    b.reset(buf->span(), {1, 2, 3, 4}, BatchLimits{});
    for (int i = 0; i < 5; ++i)
      ASSERT_EQ(append_txn(b, random_txn(rng, i + 1, 4, 33)), AppendResult::kOk);
    const auto s = b.seal();
    out[k++].assign(s.begin(), s.end());
  }
  EXPECT_EQ(out[0], out[1]);
}

TEST(LogFormat, EmptyAndNoopEntries) {
  Buf buf(1024);
  LogBatchBuilder b;
  b.reset(buf.span(), {1, 0, 5, 9}, BatchLimits{});
  auto e = LogEntryView::parse(b.seal(kLogFlagNoop));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->flags(), kLogFlagNoop);
  EXPECT_EQ(e->record_count(), 0u);
  EXPECT_EQ(e->entry_bytes(), kLogHeaderBytes);
}

TEST(LogFormat, LimitsByCountAndBytes) {
  Buf buf(64 * 1024);
  LogBatchBuilder b;
  b.reset(buf.span(), {}, BatchLimits{3, 64 * 1024, 1000});
  const uint64_t key[1] = {7};
  const std::byte value[100] = {};
  const TxnWrite w{1, WriteOp::kPut, key, value};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.append(1, {}, {&w, 1}), AppendResult::kOk);
  EXPECT_EQ(b.append(1, {}, {&w, 1}), AppendResult::kFull);
  EXPECT_TRUE(b.refused_full());

  b.reset(buf.span(), {}, BatchLimits{1000, 512, 1000});
  int n = 0;
  while (b.append(1, {}, {&w, 1}) == AppendResult::kOk) ++n;
  EXPECT_EQ(n, 3);  // 64 + 3 * (16 + 16 + 8 + 104) = 496 <= 512
  EXPECT_LE(b.entry_bytes(), 512u);
  const std::byte big[1000] = {};
  const TxnWrite wb{1, WriteOp::kPut, key, big};
  EXPECT_EQ(b.append(1, {}, {&wb, 1}), AppendResult::kNeverFits);
  ASSERT_TRUE(LogEntryView::parse(b.seal()).ok());
}

class FakeEnv final : public Env {
 public:
  uint64_t now = 1000;
  uint64_t now_ns() override { return now; }
  uint64_t wall_us() override { return now / 1000; }
  void sleep_ns(uint64_t ns) override { now += ns; }
  uint64_t seed() override { return 1; }
};

TEST(LogFormat, BatchPolicySealsByCountBytesAndAge) {
  FakeEnv env;
  const BatchLimits limits{2, 4096, 500};
  BatchPolicy policy(limits, &env);
  Buf buf(4096);
  LogBatchBuilder b;
  b.reset(buf.span(), {}, limits);
  EXPECT_EQ(policy.should_seal(b), BatchPolicy::Reason::kNone);
  EXPECT_EQ(policy.deadline_ns(), 0u);
  ASSERT_EQ(b.append(1, {}, {}), AppendResult::kOk);
  policy.note_append(b);
  EXPECT_EQ(policy.deadline_ns(), 1500u);
  env.now += 499;
  EXPECT_EQ(policy.should_seal(b), BatchPolicy::Reason::kNone);
  env.now += 1;
  EXPECT_EQ(policy.should_seal(b), BatchPolicy::Reason::kAge);
  ASSERT_EQ(b.append(2, {}, {}), AppendResult::kOk);
  policy.note_append(b);
  EXPECT_EQ(policy.should_seal(b), BatchPolicy::Reason::kCount);
  (void)b.seal();
  policy.note_sealed();

  b.reset(buf.span(), {}, BatchLimits{100, 128, 500});
  ASSERT_EQ(b.append(1, {}, {}), AppendResult::kOk);
  policy.note_append(b);
  const uint64_t key[1] = {1};
  const std::byte value[24] = {};
  const TxnWrite w{1, WriteOp::kPut, key, value};
  EXPECT_EQ(b.append(2, {}, {&w, 1}), AppendResult::kFull);
  EXPECT_EQ(policy.should_seal(b), BatchPolicy::Reason::kBytes);
}

// Rewrites the checksum after a deliberate edit, so later checks (version, flags, structure)
// are what rejects the entry.
void reseal(std::vector<std::byte>& e) {
  const uint32_t payload = load_u32(e.data() + 32);
  store_u64(e.data() + 56, log_entry_checksum(e.data(), payload));
}

TEST(LogFormat, NewerVersionRefusedWithClearText) {
  std::vector<std::byte> e = small_entry();
  ASSERT_TRUE(LogEntryView::parse(e).ok());  // same version: accepted
  EXPECT_EQ(LogEntryView::parse(e)->format_version(), kLogFormatVersion);
  store_u16(e.data() + 4, kLogFormatVersion + 1);
  reseal(e);
  auto r = LogEntryView::parse(e, 4096);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  EXPECT_EQ(r.status().message(), "log entry at offset 4096: log format version " +
                                      std::to_string(kLogFormatVersion + 1) +
                                      " is newer than this reader's " +
                                      std::to_string(kLogFormatVersion));
  store_u16(e.data() + 4, 0);
  reseal(e);
  EXPECT_EQ(LogEntryView::parse(e).status().code(), Code::kCorruption);
}

// A patch carries the changed bytes only; applied onto the old value it gives the new one.
TEST(LogFormat, PatchRoundTripRebuildsTheNewValue) {
  Rng rng(7);
  std::vector<std::byte> buf(1 << 16);
  for (int round = 0; round < 2000; ++round) {
    const size_t size = rng.uniform(1, 700);
    auto [old_value, new_value] = old_and_new(rng, size, rng.uniform(0, 12));
    std::vector<std::byte> body(size);
    uint16_t ranges = 0;
    const uint64_t base = rng.uniform(1, 1u << 30);
    const size_t n = encode_patch(old_value, new_value, base, body, &ranges);
    if (n == 0) continue;  // no smaller than the value: a put is logged instead
    ASSERT_LT(n, size);
    LogBatchBuilder b;
    b.reset(buf, {1, 0, 1, 1}, {});
    const uint64_t key[2] = {3, 4};
    const TxnWrite w{9,     WriteOp::kPatch, key, {body.data(), n}, static_cast<uint32_t>(size),
                     ranges};
    ASSERT_EQ(b.append(base + 1, {}, {&w, 1}), AppendResult::kOk);
    auto view = LogEntryView::parse(b.seal());
    ASSERT_TRUE(view.ok()) << view.status().to_string();
    view->for_each_record([&](const RecordView& r) {
      r.for_each_write([&](const WriteView& got) {
        ASSERT_EQ(got.op, WriteOp::kPatch);
        EXPECT_EQ(got.patch_base_tid(), base);
        ASSERT_EQ(got.patch_value_bytes, size);
        std::vector<std::byte> value = old_value;
        got.apply_patch(value.data());
        EXPECT_TRUE(value == new_value) << "round " << round;
      });
    });
  }
  // Everything changed: not worth a patch.
  std::vector<std::byte> a(64, std::byte{1}), c(64, std::byte{2}), body(64);
  uint16_t ranges = 0;
  EXPECT_EQ(encode_patch(a, c, 1, body, &ranges), 0u);
  // Nothing changed: a body with the base TID only.
  EXPECT_EQ(encode_patch(a, a, 1, body, &ranges), kLogPatchHeaderBytes);
  EXPECT_EQ(ranges, 0);
}

// The patch encoding spelled out one byte at a time: a range starts at a changed byte and ends
// before the first 4 unchanged bytes in a row (what a range header costs); not worth it (0)
// when the body would not be smaller than the value. Returns the body; `ranges` its count.
std::vector<std::byte> reference_patch(const std::vector<std::byte>& a,
                                       const std::vector<std::byte>& b, uint64_t base,
                                       uint16_t* ranges) {
  std::vector<std::byte> body(kLogPatchHeaderBytes);
  store_u64(body.data(), base);
  *ranges = 0;
  if (a.size() < kLogPatchHeaderBytes) return {};
  for (size_t i = 0; i < a.size();) {
    if (a[i] == b[i]) {
      ++i;
      continue;
    }
    size_t end = i + 1, equal = 0;
    for (size_t j = i + 1; j < a.size() && equal < kLogPatchRangeHeaderBytes; ++j) {
      equal = a[j] == b[j] ? equal + 1 : 0;
      if (equal == 0) end = j + 1;
    }
    const size_t at = body.size();
    body.resize(at + kLogPatchRangeHeaderBytes + (end - i));
    store_u16(body.data() + at, static_cast<uint16_t>(i));
    store_u16(body.data() + at + 2, static_cast<uint16_t>(end - i));
    std::copy(b.begin() + static_cast<long>(i), b.begin() + static_cast<long>(end),
              body.begin() + static_cast<long>(at + kLogPatchRangeHeaderBytes));
    ++*ranges;
    i = end;
  }
  if (*ranges > 0 && body.size() >= a.size()) return {};
  return body;
}

// encode_patch skips unchanged stretches many bytes at a time; its bytes must be exactly the
// reference's, whichever side of a 8- or 16-byte stride a change falls on.
TEST(LogFormat, PatchEncodingMatchesTheByteAtATimeReference) {
  Rng rng(11);
  for (int round = 0; round < 20000; ++round) {
    const size_t size = rng.uniform(1, 700);
    auto [old_value, new_value] = old_and_new(rng, size, rng.uniform(0, 12));
    for (size_t at : {size_t{7}, size_t{8}, size_t{15}, size_t{16}, size_t{17}, size - 1}) {
      if (at < size && rng.uniform(0, 3) == 0) new_value[at] = ~old_value[at];
    }
    uint16_t want_ranges = 0;
    const std::vector<std::byte> want = reference_patch(old_value, new_value, 5, &want_ranges);
    std::vector<std::byte> body(size);
    uint16_t ranges = 0;
    const size_t n = encode_patch(old_value, new_value, 5, body, &ranges);
    ASSERT_EQ(n, want.size()) << "round " << round << ", " << size << " bytes";
    if (n == 0) continue;
    EXPECT_EQ(ranges, want_ranges) << "round " << round;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), body.begin())) << "round " << round;
  }
}

// Malformed patch bodies are refused by parse() with the record and the reason.
TEST(LogFormat, MalformedPatchesRefused) {
  std::vector<std::byte> buf(4096);
  const uint64_t key[1] = {5};
  struct Case {
    uint32_t value_bytes;
    uint16_t ranges;
    std::vector<uint16_t> words;  // (offset, len) pairs; len bytes of data follow each
    const char* why;
  };
  const Case cases[] = {
      {32, 1, {40, 2}, "patch range bounds"},       // past the value's end
      {32, 2, {4, 4, 6, 2}, "patch range bounds"},  // overlapping
      {32, 1, {0, 0}, "patch range bounds"},        // empty range
      {32, 2, {0, 2}, "patch range header"},        // fewer ranges than counted
      {32, 0, {0, 2}, "patch ranges do not fill the body"},
  };
  for (const Case& c : cases) {
    std::vector<std::byte> body(8);
    for (size_t i = 0; i + 1 < c.words.size(); i += 2) {
      const size_t at = body.size();
      body.resize(at + 4 + c.words[i + 1]);
      store_u16(body.data() + at, c.words[i]);
      store_u16(body.data() + at + 2, c.words[i + 1]);
    }
    LogBatchBuilder b;
    b.reset(buf, {1, 0, 1, 1}, {});
    const TxnWrite w{1, WriteOp::kPatch, key, body, c.value_bytes, c.ranges};
    ASSERT_EQ(b.append(10, {}, {&w, 1}), AppendResult::kOk);
    auto r = LogEntryView::parse(b.seal());
    ASSERT_FALSE(r.ok()) << c.why;
    EXPECT_EQ(r.status().code(), Code::kCorruption);
    EXPECT_NE(r.status().message().find(c.why), std::string::npos) << r.status().message();
  }
}

// A version-1 entry cannot hold a patch: a version-1 writer never wrote one.
// Format 3: the bootstrap's end marker is an empty floor entry; refused with records, and
// unknown to (so refused in) a version-2 entry, as a version-2 reader would.
TEST(LogFormat, BootstrapEndFlagOnlyOnEmptyVersionThreeEntries) {
  Buf buf(1024);
  LogBatchBuilder b;
  b.reset(buf.span(), {1, 0, 5, 9}, BatchLimits{});
  const uint64_t snapshot_tid = (uint64_t{3} << 32) - 1;
  const std::span<const std::byte> bytes = b.seal(kLogFlagBootstrapEnd, snapshot_tid);
  auto e = LogEntryView::parse(bytes);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->flags(), kLogFlagBootstrapEnd);
  EXPECT_EQ(e->max_tid(), snapshot_tid);
  std::vector<std::byte> old(bytes.begin(), bytes.end());
  store_u16(old.data() + 4, 2);
  reseal(old);
  auto r = LogEntryView::parse(old);
  EXPECT_EQ(r.status().code(), Code::kNotSupported) << r.status().to_string();
  std::vector<std::byte> with_records = small_entry();
  store_u16(with_records.data() + 6, kLogFlagBootstrapEnd);
  reseal(with_records);
  r = LogEntryView::parse(with_records);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("bootstrap-end entry with records"), std::string::npos);
}

TEST(LogFormat, PatchInAVersionOneEntryRefused) {
  std::vector<std::byte> buf(4096);
  const uint64_t key[1] = {5};
  std::vector<std::byte> old_value(64, std::byte{1}), new_value = old_value, body(64);
  new_value[3] = std::byte{9};
  uint16_t ranges = 0;
  const size_t n = encode_patch(old_value, new_value, 1, body, &ranges);
  ASSERT_GT(n, 0u);
  LogBatchBuilder b;
  b.reset(buf, {1, 0, 1, 1}, {});
  const TxnWrite w{1, WriteOp::kPatch, key, {body.data(), n}, 64, ranges};
  ASSERT_EQ(b.append(10, {}, {&w, 1}), AppendResult::kOk);
  const auto sealed = b.seal();
  std::vector<std::byte> e(sealed.begin(), sealed.end());
  ASSERT_TRUE(LogEntryView::parse(e).ok());
  store_u16(e.data() + 4, 1);
  reseal(e);
  auto r = LogEntryView::parse(e);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("unknown write op"), std::string::npos);
}

TEST(LogFormat, DistributedTxnIdRoundTripsAndOldVersionsRefuseIt) {
  std::vector<std::byte> buf(4096);
  const uint64_t key[2] = {5, 6};
  const std::byte value[3] = {std::byte{1}, std::byte{2}, std::byte{3}};
  const TxnWrite w{7, WriteOp::kPut, key, value};
  const txn::DepEntry deps[3] = {{0, 11}, {2, 13}, {3, 14}};
  LogBatchBuilder b;
  b.reset(buf, {1, 0, 1, 1}, {});
  ASSERT_EQ(b.append(20, deps, {&w, 1}, 0x0001'0002'0000'0042ull), AppendResult::kOk);
  ASSERT_EQ(b.append(21, {deps, 1}, {&w, 1}), AppendResult::kOk);
  const auto sealed = b.seal();
  std::vector<std::byte> e(sealed.begin(), sealed.end());
  auto view = LogEntryView::parse(e);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  std::vector<uint64_t> ids;
  view->for_each_record([&](const RecordView& r) {
    ids.push_back(r.dist_txn_id());
    ASSERT_EQ(r.dep_count(), ids.size() == 1 ? 3u : 1u);
    EXPECT_EQ(r.dep(0).ts, 11u);
    if (r.dep_count() == 3) {
      EXPECT_EQ(r.dep(2).shard, 3u);
    }
    r.for_each_write([&](const WriteView& wv) {
      EXPECT_EQ(wv.table_id, 7u);
      EXPECT_EQ(wv.key_word(1), 6u);
      EXPECT_EQ(wv.value.size(), 3u);
    });
  });
  EXPECT_EQ(ids, (std::vector<uint64_t>{0x0001'0002'0000'0042ull, 0}));
  // The flag means nothing to a version-5 reader's records: refused, not misread.
  std::vector<std::byte> old = e;
  store_u16(old.data() + 4, kLogFormatDistTxnVersion - 1);
  reseal(old);
  auto r = LogEntryView::parse(old);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("dependency count"), std::string::npos);
  // An id of 0 under the flag is no transaction.
  std::vector<std::byte> zero = e;
  store_u64(zero.data() + kLogHeaderBytes + kLogRecordHeaderBytes, 0);
  reseal(zero);
  r = LogEntryView::parse(zero);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("distributed txn id 0"), std::string::npos);
}

// Format 7: a participant's reservation holds an entry's max_tid (the stream's promise) below
// its records' TIDs; only an entry flagged PROMISE_HELD may have records above max_tid, and a
// version-6 entry may not carry the flag.
TEST(LogFormat, PromiseHeldBelowRecordsOnlyWhenFlagged) {
  alignas(8) static std::byte buf[4096];
  LogBatchBuilder b;
  Rng rng(11);
  fill_small_batch(b, buf, rng);
  const auto held = b.seal(0, 0, 0, /*promise_cap=*/99);
  auto e = LogEntryView::parse(held);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->flags(), kLogFlagPromiseHeld);
  EXPECT_EQ(e->max_tid(), 99u);
  std::vector<std::byte> bytes(held.begin(), held.end());
  store_u16(bytes.data() + 4, kLogFormatDistTxnVersion);
  reseal(bytes);
  EXPECT_EQ(LogEntryView::parse(bytes).status().code(), Code::kNotSupported);
  std::vector<std::byte> unflagged = small_entry();  // TIDs 100..102, max_tid lowered to 101
  store_u64(unflagged.data() + 48, 101);
  reseal(unflagged);
  auto r = LogEntryView::parse(unflagged);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("outside the entry's range"), std::string::npos);
  // A cap above the records changes nothing.
  b.reset(buf, {3, 1, 7, 43}, BatchLimits{});
  EXPECT_EQ(append_txn(b, random_txn(rng, 200, 2, 20)), AppendResult::kOk);
  e = LogEntryView::parse(b.seal(0, 0, 0, 1000));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->flags(), 0);
  EXPECT_EQ(e->max_tid(), 200u);
}

TEST(LogFormat, UnknownFlagsRefused) {
  std::vector<std::byte> e = small_entry();
  store_u16(e.data() + 6, 0x8000);
  reseal(e);
  auto r = LogEntryView::parse(e);
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  EXPECT_NE(r.status().message().find("unknown flags 0x8000"), std::string::npos);
}

TEST(LogFormat, EverySingleByteCorruptionDetected) {
  const std::vector<std::byte> good = small_entry();
  ASSERT_LT(good.size(), 1024u);
  for (size_t pos = 0; pos < good.size(); ++pos) {
    for (int x = 1; x < 256; ++x) {
      std::vector<std::byte> e = good;
      e[pos] ^= static_cast<std::byte>(x);
      auto r = LogEntryView::parse(e, 0);
      ASSERT_FALSE(r.ok()) << "byte " << pos << " xor " << x << " went undetected";
      // A flip in the version field may read as a newer format; all else is corruption.
      if (pos == 4 || pos == 5) continue;
      ASSERT_EQ(r.status().code(), Code::kCorruption) << pos << ": " << r.status().to_string();
    }
  }
}

TEST(LogFormat, EveryTruncationDetected) {
  const std::vector<std::byte> good = small_entry();
  for (size_t len = 0; len < good.size(); ++len) {
    auto copy = exact_copy(good.data(), len);
    auto r = LogEntryView::parse({copy.get(), len}, 0);
    ASSERT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kCorruption);
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  }
}

TEST(LogFormat, ChecksumErrorNamesTheOffset) {
  std::vector<std::byte> e = small_entry();
  e[kLogHeaderBytes + 3] ^= std::byte{1};
  auto r = LogEntryView::parse(e, 123456);
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("offset 123456: checksum mismatch"), std::string::npos)
      << r.status().message();
}

// Format 5: byte keys of 1..8192 bytes round-trip; malformed lengths, padding and patches of
// byte keys are refused with the reason; an older entry cannot hold one.
TEST(LogFormat, ByteKeysRoundTripAndMalformedOnesAreRefused) {
  Rng rng(5);
  Buf buf(64 << 10);
  const std::vector<std::byte> value(100, std::byte{7});
  for (const size_t len : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{8192}}) {
    const std::vector<uint64_t> key = random_byte_key(rng, len);
    LogBatchBuilder b;
    b.reset(buf.span(), {1, 0, 1, 1}, {});
    TxnWrite w{4, WriteOp::kPut, key, value};
    w.bytes_key = true;
    ASSERT_EQ(b.append(10, {}, {&w, 1}), AppendResult::kOk);
    const auto sealed = b.seal();
    const std::vector<std::byte> good(sealed.begin(), sealed.end());
    auto r = LogEntryView::parse(good);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    r->for_each_record([&](const RecordView& rec) {
      rec.for_each_write([&](const WriteView& v) {
        ASSERT_TRUE(v.bytes_key);
        EXPECT_EQ(v.byte_key(),
                  std::string_view(reinterpret_cast<const char*>(key.data() + 1), len));
        EXPECT_EQ(v.value.size(), value.size());
      });
    });
    // The key's length word sits at payload offset 16 (record header) + 16 (write header).
    const size_t at = kLogHeaderBytes + kLogRecordHeaderBytes + kLogWriteHeaderBytes;
    const struct {
      uint64_t len_word;
      const char* why;
    } bad_lengths[] = {{0, "byte key length"},
                       {8193, "byte key length"},
                       {uint64_t{1} << 40, "byte key length"},
                       {len + 200, len + 200 > 8192 ? "byte key length" : "overruns"}};
    for (const auto& c : bad_lengths) {
      std::vector<std::byte> e = good;
      store_u64(e.data() + at, c.len_word);
      reseal(e);
      auto copy = exact_copy(e.data(), e.size());
      auto bad = LogEntryView::parse({copy.get(), e.size()});
      ASSERT_FALSE(bad.ok()) << c.len_word;
      EXPECT_EQ(bad.status().code(), Code::kCorruption);
      EXPECT_NE(bad.status().message().find(c.why), std::string::npos) << bad.status().message();
    }
    if (len % 8 != 0) {  // a non-zero padding byte after the key
      std::vector<std::byte> e = good;
      e[at + 8 + len] = std::byte{1};
      reseal(e);
      EXPECT_NE(LogEntryView::parse(e).status().message().find("byte key padding"),
                std::string::npos);
    }
    std::vector<std::byte> e = good;  // a patch of a byte key
    e[kLogHeaderBytes + kLogRecordHeaderBytes + 4] = static_cast<std::byte>(WriteOp::kPatch);
    reseal(e);
    EXPECT_EQ(LogEntryView::parse(e).status().code(), Code::kCorruption);
    store_u16(e.data() + 4, kLogFormatEpochStartVersion);  // format 4: key_words 0 is invalid
    e[kLogHeaderBytes + kLogRecordHeaderBytes + 4] = static_cast<std::byte>(WriteOp::kPut);
    reseal(e);
    EXPECT_NE(LogEntryView::parse(e).status().message().find("key word count"), std::string::npos);
  }
}

// Touches every byte a view exposes, so ASan sees any out-of-bounds view.
uint64_t walk(const LogEntryView& e) {
  uint64_t sum = 0;
  e.for_each_record([&](const RecordView& r) {
    sum += r.commit_tid();
    for (uint32_t d = 0; d < r.dep_count(); ++d) sum += r.dep(d).ts + r.dep(d).shard;
    r.for_each_write([&](const WriteView& w) {
      for (uint32_t k = 0; k < w.key_word_count; ++k) sum += w.key_word(k);
      if (w.bytes_key) {
        for (char c : w.byte_key()) sum += static_cast<uint8_t>(c);
      }
      for (std::byte b : w.value) sum += static_cast<uint8_t>(b);
    });
  });
  return sum;
}

TEST(LogFormat, FuzzedDecoderNeverCrashes) {
  Rng rng(0xf022);
  Buf buf(8192);
  std::vector<std::vector<std::byte>> seeds;
  for (int i = 0; i < 32; ++i) {
    LogBatchBuilder b;
    b.reset(buf.span(), {1, 2, 3, static_cast<uint64_t>(i)}, BatchLimits{8, 8192, 1});
    while (append_txn(b, random_txn(rng, rng.uniform(1, 1000), 4, 40)) == AppendResult::kOk) {
    }
    const auto s = b.seal();
    seeds.emplace_back(s.begin(), s.end());
  }
  uint64_t accepted = 0, sink = 0;
  for (int iter = 0; iter < 100'000; ++iter) {
    std::vector<std::byte> e = seeds[rng.uniform(0, seeds.size() - 1)];
    const int mutations = static_cast<int>(rng.uniform(1, 4));
    for (int m = 0; m < mutations && !e.empty(); ++m) {
      const size_t pos = rng.uniform(0, e.size() - 1);
      switch (rng.uniform(0, 4)) {
        case 0:
          e[pos] ^= static_cast<std::byte>(1u << rng.uniform(0, 7));
          break;
        case 1:
          e[pos] = static_cast<std::byte>(rng.next());
          break;
        case 2:  // a random 16- or 32-bit field, where counts and lengths live
          if (pos + 4 <= e.size()) store_u32(e.data() + pos, static_cast<uint32_t>(rng.next()));
          break;
        case 3:
          e.resize(rng.uniform(0, e.size()));
          break;
        case 4:
          e.resize(e.size() + rng.uniform(1, 64), std::byte{0});
          break;
      }
    }
    // Half the time fix the checksum so the structural checks face the mutation.
    if (e.size() >= kLogHeaderBytes && rng.uniform(0, 1) == 1) {
      const uint32_t payload = load_u32(e.data() + 32);
      if (kLogHeaderBytes + uint64_t{payload} <= e.size()) reseal(e);
    }
    auto copy = exact_copy(e.data(), e.size());
    auto r = LogEntryView::parse({copy.get(), e.size()}, 0, 1u << 16);
    if (r.ok()) {
      ++accepted;
      ASSERT_LE(r->entry_bytes(), e.size());
      sink += walk(*r);
    } else {
      const Code c = r.status().code();
      ASSERT_TRUE(c == Code::kCorruption || c == Code::kNotSupported) << r.status().to_string();
      ASSERT_FALSE(r.status().message().empty());
    }
  }
  EXPECT_GT(accepted, 0u);  // some mutations are benign (values, keys, tids in range)
  RecordProperty("accepted", static_cast<int>(accepted));
  (void)sink;
}

// Writes valid entries as a libFuzzer seed corpus (src/repl/fuzz/build.sh) when asked to.
TEST(LogFormat, WriteFuzzSeeds) {
  const char* dir = std::getenv("SHOAL_FUZZ_SEEDS");
  if (dir == nullptr) GTEST_SKIP() << "set SHOAL_FUZZ_SEEDS=<dir> to write a seed corpus";
  Rng rng(77);
  Buf buf(16384);
  for (int i = 0; i < 16; ++i) {
    LogBatchBuilder b;
    b.reset(buf.span(), {1, 2, 3, static_cast<uint64_t>(i)}, BatchLimits{4, 16384, 1});
    while (append_txn(b, random_txn(rng, rng.uniform(1, 1000), 4, 64)) == AppendResult::kOk) {
    }
    const auto s = b.seal();
    std::ofstream out(std::string(dir) + "/seed" + std::to_string(i), std::ios::binary);
    out.write(reinterpret_cast<const char*>(s.data()), static_cast<std::streamsize>(s.size()));
  }
}

}  // namespace
}  // namespace shoal::repl
