// The exposition format (escaping, HELP/TYPE, cumulative buckets, _sum/_count), checked by
// hand and by `promtool check metrics` when promtool is installed (Debian prometheus), and
// the HTTP endpoint (GET /metrics, 404, 405, bound to its host) over libcurl.
#include "src/ops/metrics.h"

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "src/ops/metrics_http.h"
#include "src/ops/metrics_parse.h"
#include "src/ops/promtool.h"

namespace shoal::ops {
namespace {

std::string sample_text() {
  MetricsText m;
  m.counter("shoal_test_events_total", "Events seen.\nSecond line with a \\ backslash.", 42);
  m.gauge("shoal_test_ratio", "A ratio.", 0.25);
  m.family("shoal_test_txns_total", "counter", "Transactions by type.");
  m.sample("shoal_test_txns_total", {{"type", "new_order"}, {"outcome", "committed"}}, uint64_t{7});
  m.sample("shoal_test_txns_total", {{"type", "a \"quoted\\\" \n name"}, {"outcome", "failed"}},
           uint64_t{1});
  LatencyBuckets h;
  h.observe(10'000);          // 10 us: first bucket
  h.observe(2'000'000);       // 2 ms: le 0.0025
  h.observe(30'000'000'000);  // 30 s: +Inf only
  m.family("shoal_test_latency_seconds", "histogram", "Latency.");
  m.histogram("shoal_test_latency_seconds", {{"kind", "commit"}}, h.snapshot());
  m.histogram("shoal_test_latency_seconds", {{"kind", "empty"}}, BucketSnapshot{});
  return m.text();
}

TEST(MetricsText, WritesHelpTypeAndEscapedLabels) {
  const std::string t = sample_text();
  EXPECT_NE(t.find("# HELP shoal_test_events_total Events seen.\\nSecond line with a \\\\ "
                   "backslash.\n# TYPE shoal_test_events_total counter\n"
                   "shoal_test_events_total 42\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("shoal_test_ratio 0.25\n"), std::string::npos) << t;
  EXPECT_NE(t.find("shoal_test_txns_total{type=\"new_order\",outcome=\"committed\"} 7\n"),
            std::string::npos);
  EXPECT_NE(t.find("{type=\"a \\\"quoted\\\\\\\" \\n name\",outcome=\"failed\"} 1\n"),
            std::string::npos)
      << t;
}

TEST(MetricsText, HistogramBucketsAreCumulativeAndCountMatchesInf) {
  const std::string t = sample_text();
  EXPECT_NE(t.find("shoal_test_latency_seconds_bucket{kind=\"commit\",le=\"5e-05\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("shoal_test_latency_seconds_bucket{kind=\"commit\",le=\"0.0025\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("shoal_test_latency_seconds_bucket{kind=\"commit\",le=\"10\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("shoal_test_latency_seconds_bucket{kind=\"commit\",le=\"+Inf\"} 3\n"),
            std::string::npos);
  EXPECT_NE(t.find("shoal_test_latency_seconds_count{kind=\"commit\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("shoal_test_latency_seconds_sum{kind=\"commit\"} 30.00201\n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("shoal_test_latency_seconds_count{kind=\"empty\"} 0\n"), std::string::npos);
}

TEST(MetricsText, SizeHistogramsExportBytes) {
  Buckets sizes(kSizeBounds);
  sizes.observe(1000);
  sizes.observe(200'000'000);  // above every bound
  MetricsText m;
  m.family("shoal_test_batch_bytes", "histogram", "Sizes.");
  m.histogram("shoal_test_batch_bytes", {}, sizes.snapshot());
  const std::string t = m.text();
  EXPECT_NE(t.find("shoal_test_batch_bytes_bucket{le=\"256\"} 0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("shoal_test_batch_bytes_bucket{le=\"1024\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("shoal_test_batch_bytes_bucket{le=\"+Inf\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("shoal_test_batch_bytes_sum 200001000\n"), std::string::npos) << t;
}

TEST(MetricsText, NamesAreValidated) {
  EXPECT_TRUE(valid_metric_name("shoal_a:b_total"));
  EXPECT_FALSE(valid_metric_name("9lives"));
  EXPECT_FALSE(valid_metric_name("shoal-x"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_TRUE(valid_label_name("stream"));
  EXPECT_FALSE(valid_label_name("__reserved"));
  EXPECT_FALSE(valid_label_name("a:b"));
}

TEST(MetricsText, PromtoolAcceptsIt) {
  auto verdict = promtool_check_metrics(sample_text());
  if (!verdict.ok() && verdict.status().code() == Code::kNotFound) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus): "
                 << verdict.status().to_string();
  }
  ASSERT_TRUE(verdict.ok()) << verdict.status().to_string();
  EXPECT_EQ(*verdict, "") << "promtool check metrics complained:\n" << *verdict;
}

TEST(MetricsParse, ReadsBackWhatWeWrite) {
  auto samples = parse_metrics_text(sample_text());
  ASSERT_TRUE(samples.ok()) << samples.status().to_string();
  EXPECT_EQ(sum_samples(*samples, "shoal_test_events_total"), 42);
  EXPECT_EQ(sum_samples(*samples, "shoal_test_txns_total"), 8);
  EXPECT_EQ(sum_samples(*samples, "shoal_test_txns_total", {{"outcome", "failed"}}), 1);
  // Escapes undone.
  EXPECT_EQ(sum_samples(*samples, "shoal_test_txns_total", {{"type", "a \"quoted\\\" \n name"}}),
            1);
  EXPECT_EQ(max_samples(*samples, "shoal_test_ratio"), 0.25);
  const BucketSnapshot b = buckets_of(*samples, "shoal_test_latency_seconds", {{"kind", "commit"}});
  EXPECT_EQ(b.count(), 3u);
  EXPECT_EQ(b.counts[0], 1u);
  EXPECT_EQ(b.counts[5], 1u);  // le 0.0025
  EXPECT_EQ(b.counts.back(), 1u);
  EXPECT_FALSE(parse_metrics_text("shoal_x{a=\"1\" 3\n").ok());
  EXPECT_FALSE(parse_metrics_text("shoal_x 3 4 x\nshoal_y\n").ok());
}

TEST(MetricsParse, QuantilesInterpolateInsideTheirBucket) {
  BucketSnapshot b;
  EXPECT_EQ(bucket_quantile(b, 0.5), 0);
  b.counts[4] = 100;  // (0.5 ms, 1 ms]
  EXPECT_NEAR(bucket_quantile(b, 0.5), 0.75e-3, 1e-12);
  EXPECT_NEAR(bucket_quantile(b, 1.0), 1e-3, 1e-12);
  b.counts.back() = 100;  // above 10 s: reported as the highest bound
  EXPECT_EQ(bucket_quantile(b, 0.99), 10.0);
  BucketSnapshot later = b;
  later.counts[4] += 7;
  EXPECT_EQ(bucket_delta(later, b).count(), 7u);
}

size_t append_body(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// GET (or another method) http://127.0.0.1:port/path: the status code, body in *body.
long http(const std::string& method, uint16_t port, const std::string& path, std::string* body) {
  CURL* c = curl_easy_init();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + path;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  long code = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(c);
  return code;
}

TEST(MetricsHttp, ServesMetricsAndRefusesTheRest) {
  int renders = 0;
  auto server = MetricsHttp::start("127.0.0.1", 0, [&renders] {
    ++renders;
    return sample_text();
  });
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const uint16_t port = (*server)->port();
  ASSERT_NE(port, 0);
  std::string body;
  EXPECT_EQ(http("GET", port, "/metrics", &body), 200);
  EXPECT_EQ(body, sample_text());
  body.clear();
  EXPECT_EQ(http("GET", port, "/other", &body), 404);
  body.clear();
  EXPECT_EQ(http("DELETE", port, "/metrics", &body), 405);
  EXPECT_EQ(renders, 1);
  EXPECT_EQ((*server)->scrapes(), 1u);
  // The port is taken: a second server on it fails with the address in the message.
  auto again = MetricsHttp::start("127.0.0.1", port, [] { return std::string(); });
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().to_string().find(std::to_string(port)), std::string::npos);
  // Once stopped its port is free again at once (a follower promoted to leader hands its
  // metrics port to the server it becomes).
  server->reset();
  auto next = MetricsHttp::start("127.0.0.1", port, [] { return std::string("x 1\n"); });
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  body.clear();
  EXPECT_EQ(http("GET", port, "/metrics", &body), 200);
  EXPECT_EQ(body, "x 1\n");
}

TEST(MetricsHttp, UnknownHostIsAnError) {
  auto server = MetricsHttp::start("no-such-host.invalid", 0, [] { return std::string(); });
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().to_string().find("no-such-host.invalid"), std::string::npos);
}

}  // namespace
}  // namespace shoal::ops
