// The compact form of dependency vectors (src/txn/depvec.h): entries the stable base covers
// are left out, the rest round-trip through the 2PC wire form, and a malformed compact vector
// is refused with a Status naming the field.
#include "src/txn/depvec.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace shoal::txn {
namespace {

// A base that knows shard s stable up to base_ts[s] (0: nothing).
struct TestBase {
  std::vector<uint64_t> ts;
  static bool stable(const void* ctx, uint32_t shard, uint64_t t) {
    const auto* b = static_cast<const TestBase*>(ctx);
    return shard < b->ts.size() && t <= b->ts[shard];
  }
  DepBase base() const { return DepBase{&stable, this}; }
};

DepVec vec(std::initializer_list<DepEntry> entries) {
  DepVec v;
  for (const DepEntry& e : entries) v.raise(e.shard, e.ts);
  return v;
}

std::vector<uint8_t> encode(const DepVec& v, const DepBase& base, DepVecBytes* counted = nullptr) {
  std::vector<uint8_t> out(dep_wire_bytes(dep_wire_entries(v, base)));
  encode_dep_wire(v, base, out, counted);
  return out;
}

TEST(DepVecCompact, EntriesTheBaseCoversAreLeftOutAndTheRestRoundTrip) {
  const TestBase b{{100, 0, 50, 7}};
  const DepVec v = vec({{0, 90}, {1, 5}, {2, 51}, {3, 7}, {900, 3}});
  DepVecBytes counted;
  const std::vector<uint8_t> wire = encode(v, b.base(), &counted);
  EXPECT_EQ(wire.size(), kDepWireHeaderBytes + 3 * kDepWireEntryBytes);
  DepVec back;
  ASSERT_TRUE(decode_dep_wire(wire, &back, "test").ok());
  EXPECT_EQ(back.entries(), vec({{1, 5}, {2, 51}, {900, 3}}).entries());
  EXPECT_EQ(counted.vectors, 1u);
  EXPECT_EQ(counted.entries, 3u);
  EXPECT_EQ(counted.omitted, 2u);
  EXPECT_EQ(counted.bytes, wire.size());
  EXPECT_EQ(counted.full_bytes, v.full_wire_bytes());
  EXPECT_EQ(counted.full_bytes, 4u + 5 * 12);
  // The log's form: our own shard's entry is skipped as well.
  std::vector<DepEntry> log;
  EXPECT_EQ(compact_entries(v, b.base(), /*skip_shard=*/2, &log), 2u);
  EXPECT_EQ(log, (std::vector<DepEntry>{{1, 5}, {900, 3}}));
}

TEST(DepVecCompact, EveryEntryAboveTheBaseIsKept) {
  const TestBase b{{10, 10, 10}};
  const DepVec v = vec({{0, 11}, {1, 12}, {2, UINT64_MAX}});
  const std::vector<uint8_t> wire = encode(v, b.base());
  EXPECT_EQ(wire.size(), dep_wire_bytes(3));
  DepVec back;
  ASSERT_TRUE(decode_dep_wire(wire, &back, "test").ok());
  EXPECT_EQ(back.entries(), v.entries());
  // A default base covers nothing: the whole vector, as before the base.
  EXPECT_EQ(encode(v, DepBase{}), wire);
  std::vector<DepEntry> log;
  EXPECT_EQ(compact_entries(v, DepBase{}, UINT32_MAX, &log), 0u);
  EXPECT_EQ(log, v.entries());
}

TEST(DepVecCompact, EmptyAndFullyCoveredVectorsAreTwoBytes) {
  const TestBase b{{10, 10}};
  DepVec back = vec({{4, 4}});
  for (const DepVec& v : {DepVec{}, vec({{0, 3}, {1, 10}})}) {
    const std::vector<uint8_t> wire = encode(v, b.base());
    ASSERT_EQ(wire, (std::vector<uint8_t>{0, 0}));
    ASSERT_TRUE(decode_dep_wire(wire, &back, "test").ok());
    EXPECT_TRUE(back.empty()) << "decode clears what the vector held";
  }
}

// Each malformed input: its code and the field its message names.
void expect_refused(std::vector<uint8_t> wire, Code code, const std::string& names) {
  DepVec out = vec({{1, 1}});
  const Status s = decode_dep_wire(wire, &out, "install");
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.to_string().find(names), std::string::npos) << s.to_string();
  EXPECT_NE(s.to_string().find("install"), std::string::npos) << s.to_string();
}

std::vector<uint8_t> raw(uint16_t count, std::initializer_list<std::pair<uint16_t, uint64_t>> es) {
  std::vector<uint8_t> out(2);
  std::memcpy(out.data(), &count, 2);
  for (const auto& [shard, ts] : es) {
    uint8_t e[10];
    std::memcpy(e, &shard, 2);
    std::memcpy(e + 2, &ts, 8);
    out.insert(out.end(), e, e + 10);
  }
  return out;
}

TEST(DepVecCompact, MalformedCompactVectorsAreRefusedNamingTheField) {
  expect_refused({}, Code::kCorruption, "truncated dependency vector count");
  expect_refused({1}, Code::kCorruption, "truncated dependency vector count");
  expect_refused(raw(1025, {}), Code::kInvalidArgument, "dependency vector count 1025 above 1024");
  // Cut inside the second entry.
  std::vector<uint8_t> cut = raw(2, {{1, 5}, {2, 6}});
  cut.erase(cut.end() - 3, cut.end());  // (resize() to size - 3: a g++ -O1 ASan false positive)
  expect_refused(cut, Code::kCorruption, "truncated dependency vector entry 1 of 2");
  std::vector<uint8_t> longer = raw(1, {{1, 5}});
  longer.push_back(0);
  expect_refused(longer, Code::kCorruption, "1 trailing bytes after the dependency vector");
  expect_refused(raw(2, {{3, 5}, {3, 6}}), Code::kInvalidArgument,
                 "dependency vector entry 1: shard 3 not above shard 3");
  expect_refused(raw(2, {{4, 5}, {3, 6}}), Code::kInvalidArgument,
                 "dependency vector entry 1: shard 3 not above shard 4");
  expect_refused(raw(1, {{1024, 5}}), Code::kInvalidArgument,
                 "dependency vector entry 0: shard 1024 out of range");
  expect_refused(raw(1, {{2, 0}}), Code::kInvalidArgument,
                 "dependency vector entry 0: timestamp 0");
  // Every cut of a valid vector is refused, never read past its end.
  const std::vector<uint8_t> valid = raw(3, {{0, 1}, {5, 2}, {9, 3}});
  for (size_t n = 0; n < valid.size(); ++n) {
    DepVec out;
    EXPECT_EQ(decode_dep_wire({valid.data(), n}, &out, "cut").code(), Code::kCorruption) << n;
  }
}

}  // namespace
}  // namespace shoal::txn
