#include "src/server/live_latency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace shoal::server {
namespace {

// A kStats reply carrying `s` as the shard server writes it.
nlohmann::json reply_of(const LatencySample& s) {
  return {{"shard", 0}, {"live_committed", 1}, {"latency", latency_sample_json(s)}};
}

LatencySample sample_of(std::initializer_list<std::pair<uint64_t, uint64_t>> speculative_ns,
                        std::initializer_list<std::pair<uint64_t, uint64_t>> commit_ns = {}) {
  LatencySample s;
  for (auto [ns, n] : speculative_ns) s.speculative[LiveLatencyLayout::bucket_of(ns)] += n;
  for (auto [ns, n] : commit_ns) s.commit[LiveLatencyLayout::bucket_of(ns)] += n;
  return s;
}

// Within a compact bucket's half width (6.25% / 2) plus the fine histogram's rounding.
void expect_near_us(const std::optional<double>& got, double want_us) {
  ASSERT_TRUE(got.has_value());
  EXPECT_NEAR(*got, want_us, want_us * 0.035) << want_us;
}

TEST(LiveLatency, LayoutIsBoundedAndCoversTheHistogramsRange) {
  EXPECT_EQ(kLiveLatencyBuckets, 544u);
  EXPECT_EQ(LiveLatencyLayout::bucket_of(Histogram::kMaxValueNs), kLiveLatencyBuckets - 1);
  EXPECT_EQ(LiveLatencyLayout::bucket_of(~uint64_t{0}), kLiveLatencyBuckets - 1);
  for (uint64_t v : {0ull, 1ull, 31ull, 32ull, 1000ull, 123456ull, 99999999ull}) {
    const size_t b = LiveLatencyLayout::bucket_of(v);
    EXPECT_LE(LiveLatencyLayout::bucket_low(b), v);
    EXPECT_GT(LiveLatencyLayout::bucket_low(b) + LiveLatencyLayout::bucket_width(b), v);
  }
}

TEST(LiveLatency, CountsOfSeveralWorkersAddUp) {
  LiveLatencyCounts a, b;
  a.record(1000);
  a.record(1000);
  b.record(1000);
  b.record(5'000'000);
  LatencyCounts sum{};
  a.add_to(&sum);
  b.add_to(&sum);
  EXPECT_EQ(sum[LiveLatencyLayout::bucket_of(1000)], 3u);
  EXPECT_EQ(sum[LiveLatencyLayout::bucket_of(5'000'000)], 1u);
}

TEST(LiveLatency, SampleRoundTripsThroughTheStatsReply) {
  const LatencySample s = sample_of({{50'000, 7}, {2'000'000, 1}}, {{900'000, 4}});
  const nlohmann::json reply = reply_of(s);
  // Only the nonzero buckets travel: two pairs and one pair.
  EXPECT_EQ(reply["latency"]["speculative"].size(), 4u);
  EXPECT_EQ(reply["latency"]["commit"].size(), 2u);
  LatencySample back;
  ASSERT_TRUE(parse_latency_sample(nlohmann::json::parse(reply.dump()), &back).ok());
  EXPECT_EQ(back.speculative, s.speculative);
  EXPECT_EQ(back.commit, s.commit);
}

// Every malformed shape a peer could send is an error naming the field, never an exception.
TEST(LiveLatency, MalformedLatencyFieldsAreErrorsNamingTheField) {
  // Through text, as from the wire (a positive number parses as unsigned).
  const auto parse = [](const nlohmann::json& reply) {
    LatencySample out;
    return parse_latency_sample(nlohmann::json::parse(reply.dump()), &out);
  };
  const auto with = [](nlohmann::json speculative) {
    return nlohmann::json{
        {"latency",
         {{"speculative", std::move(speculative)}, {"commit", nlohmann::json::array()}}}};
  };
  struct Case {
    nlohmann::json reply;
    std::string says;
  };
  const std::vector<Case> cases = {
      {nlohmann::json::array(), "'latency': the message is an array, not an object"},
      {nlohmann::json{{"live_committed", 1}}, "'latency': missing"},
      {nlohmann::json{{"latency", "fast"}}, "'latency': a string, not an object"},
      {nlohmann::json{{"latency", {{"speculative", nlohmann::json::array()}}}},
       "latency: 'commit': missing"},
      {with("1,2"), "'latency.speculative': a string, not a list of at most 544"},
      {with({1, 2, 3}), "'latency.speculative': an array, not a list"},
      {with({544, 1}), "'latency.speculative': entry 0 is the number 544, not a bucket index"},
      {with({5, 1, 5, 2}), "entry 2 is the number 5, not a bucket index in [6, 544)"},
      {with({-1, 1}), "entry 0 is the number -1"},
      {with({1.5, 1}), "entry 0 is the number 1.5"},
      {with({3, -4}), "'latency.speculative[1]': the number -4, not an unsigned integer of 64"},
      {with({3, "4"}), "'latency.speculative[1]': a string"},
      {with(std::vector<uint64_t>(2 * kLiveLatencyBuckets + 2, 0)), "at most 544"},
  };
  for (const Case& c : cases) {
    const Status s = parse(c.reply);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.reply.dump();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message() << " / " << c.says;
  }
  // An empty list is no latency recorded, not an error.
  EXPECT_TRUE(parse(with(nlohmann::json::array())).ok());
}

// Two shards: differences from each shard's baseline, merged into the second the sample was
// taken in; a second without samples is a row with no percentiles.
TEST(LiveLatency, SeriesDiffsMergesAndKeepsEmptySeconds) {
  LatencySeries series(2, 4);
  // Before the run: shard 0 had counted 1000 slow transactions (an earlier load): not ours.
  series.set_baseline(0, sample_of({{9'000'000, 1000}}));
  // Second 0: shard 0 commits 100 at 100 us, shard 1 100 at 1 ms.
  series.add(0, 0, sample_of({{9'000'000, 1000}, {100'000, 100}}));
  series.add(1, 0, sample_of({{1'000'000, 100}}));
  // Second 1: shard 0 commits 98 at 200 us and 2 at 50 ms; the commit latencies come in.
  series.add(0, 1,
             sample_of({{9'000'000, 1000}, {100'000, 100}, {200'000, 98}, {50'000'000, 2}},
                       {{3'000'000, 50}}));
  series.add(1, 1, sample_of({{1'000'000, 100}}));  // nothing new
  // Second 2: no sample at all (the controller was late). Second 3: shard 1 only.
  series.add(1, 3, sample_of({{1'000'000, 110}}, {{4'000'000, 10}}));
  const std::vector<LatencySecond> rows = series.finish();
  ASSERT_EQ(rows.size(), 4u);

  EXPECT_EQ(rows[0].speculative_count, 200u);
  expect_near_us(rows[0].latency_p50_us, 100);
  expect_near_us(rows[0].latency_p99_us, 1000);
  EXPECT_EQ(rows[0].commit_count, 0u);
  EXPECT_FALSE(rows[0].commit_latency_p50_us.has_value());

  EXPECT_EQ(rows[1].speculative_count, 100u);
  expect_near_us(rows[1].latency_p50_us, 200);
  expect_near_us(rows[1].latency_p99_us, 50'000);
  EXPECT_EQ(rows[1].commit_count, 50u);
  expect_near_us(rows[1].commit_latency_p99_us, 3000);

  EXPECT_EQ(rows[2].speculative_count, 0u);
  EXPECT_FALSE(rows[2].latency_p50_us.has_value());
  EXPECT_FALSE(rows[2].latency_p99_us.has_value());

  EXPECT_EQ(rows[3].speculative_count, 10u);
  expect_near_us(rows[3].latency_p50_us, 1000);
  EXPECT_EQ(rows[3].commit_count, 10u);
  expect_near_us(rows[3].commit_latency_p50_us, 4000);
}

// A killed leader's successor counts from zero: after reset() its counts are differences from
// zero; without it, counts below the last sample's (another process) count nothing.
TEST(LiveLatency, SeriesAfterALeaderChange) {
  LatencySeries series(1, 3);
  series.add(0, 0, sample_of({{100'000, 500}}));
  series.reset(0);  // killed in second 1
  series.add(0, 1, sample_of({{300'000, 20}}));
  // A sample from yet another process, not announced: it becomes the baseline only.
  series.add(0, 2, sample_of({{700'000, 5}}));
  series.add(0, 2, sample_of({{700'000, 8}}));
  // A sample of a second already closed goes to the open one, and one past the end to the
  // last.
  series.add(0, 1, sample_of({{700'000, 9}}));
  series.add(0, 99, sample_of({{700'000, 10}}));
  const std::vector<LatencySecond> rows = series.finish();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].speculative_count, 500u);
  EXPECT_EQ(rows[1].speculative_count, 20u);
  expect_near_us(rows[1].latency_p50_us, 300);
  EXPECT_EQ(rows[2].speculative_count, 5u);  // 8 - 5, 9 - 8, 10 - 9
  expect_near_us(rows[2].latency_p99_us, 700);
}

// The cost of one sample with 150 buckets of each latency in use (a TPC-C shard's spread:
// ~10 powers of two): the shard's part (sum its workers' counts, encode, dump) and the
// controller's (parse, diff), far below the 20 ms between samples.
TEST(LiveLatency, OneSampleCostsMicroseconds) {
  constexpr int kWorkers = 2;
  std::vector<LiveLatencyCounts> workers(kWorkers);
  for (auto& w : workers) {
    for (uint64_t ns = 20'000; ns < 20'000'000; ns += ns / 40) w.record(ns);
  }
  LatencySeries series(1, 1);
  constexpr int kRounds = 300;
  using Clock = std::chrono::steady_clock;
  Clock::duration shard{}, controller{};
  size_t bytes = 0;
  for (int r = 0; r < kRounds; ++r) {
    const auto t0 = Clock::now();
    LatencySample s;
    for (const auto& w : workers) {
      w.add_to(&s.speculative);
      w.add_to(&s.commit);
    }
    const std::string text = reply_of(s).dump();
    const auto t1 = Clock::now();
    LatencySample back;
    ASSERT_TRUE(parse_latency_sample(nlohmann::json::parse(text), &back).ok());
    series.add(0, 0, back);
    controller += Clock::now() - t1;
    shard += t1 - t0;
    bytes = text.size();
  }
  const auto us = [](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count() / kRounds;
  };
  LatencyCounts one{};
  workers[0].add_to(&one);
  const auto used = std::count_if(one.begin(), one.end(), [](uint64_t n) { return n != 0; });
  std::printf("one sample, 2 x %td buckets in use: %zu bytes; shard %.1f us, controller %.1f us\n",
              used, bytes, us(shard), us(controller));
  EXPECT_LT(bytes, 8'000u);
  EXPECT_LT(us(shard) + us(controller), 5000.0);  // generous: a loaded 2-core machine
}

}  // namespace
}  // namespace shoal::server
