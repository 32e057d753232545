#include "src/ops/metrics_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace shoal::ops {

std::string_view MetricSample::label(std::string_view key) const {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return {};
}

namespace {

// Parses `{k="v",...}` at the start of *rest, consuming it.
bool parse_labels(std::string_view* rest, MetricSample* out) {
  std::string_view s = *rest;
  s.remove_prefix(1);  // '{'
  while (!s.empty() && s.front() != '}') {
    const size_t eq = s.find("=\"");
    if (eq == std::string_view::npos) return false;
    std::string key(s.substr(0, eq));
    s.remove_prefix(eq + 2);
    std::string value;
    while (!s.empty() && s.front() != '"') {
      if (s.front() == '\\' && s.size() > 1) {
        value.push_back(s[1] == 'n' ? '\n' : s[1]);
        s.remove_prefix(2);
      } else {
        value.push_back(s.front());
        s.remove_prefix(1);
      }
    }
    if (s.empty()) return false;
    s.remove_prefix(1);  // closing quote
    out->labels.emplace_back(std::move(key), std::move(value));
    if (!s.empty() && s.front() == ',') s.remove_prefix(1);
  }
  if (s.empty()) return false;
  s.remove_prefix(1);  // '}'
  *rest = s;
  return true;
}

bool parse_value(std::string_view s, double* out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const size_t end = s.find(' ');  // a timestamp may follow
  const std::string v(s.substr(0, end));
  if (v == "+Inf") {
    *out = INFINITY;
  } else if (v == "-Inf") {
    *out = -INFINITY;
  } else if (v == "NaN") {
    *out = NAN;
  } else {
    char* stop = nullptr;
    *out = std::strtod(v.c_str(), &stop);
    if (v.empty() || stop != v.c_str() + v.size()) return false;
  }
  return true;
}

bool matches(const MetricSample& s, std::string_view name, std::initializer_list<Label> match) {
  if (s.name != name) return false;
  for (const Label& l : match) {
    if (s.label(l.first) != l.second) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<MetricSample>> parse_metrics_text(std::string_view text) {
  std::vector<MetricSample> out;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    if (out.size() >= kSamplesMax) {
      return Status::InvalidArgument(fmt::format("metrics: more than {} samples", kSamplesMax));
    }
    MetricSample s;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos || name_end == 0) {
      return Status::InvalidArgument(fmt::format("metrics: line {}: no value", line_no));
    }
    s.name = std::string(line.substr(0, name_end));
    std::string_view rest = line.substr(name_end);
    if (rest.front() == '{' && !parse_labels(&rest, &s)) {
      return Status::InvalidArgument(fmt::format("metrics: line {}: bad labels", line_no));
    }
    if (!parse_value(rest, &s.value)) {
      return Status::InvalidArgument(fmt::format("metrics: line {}: bad value", line_no));
    }
    out.push_back(std::move(s));
  }
  return out;
}

double sum_samples(std::span<const MetricSample> samples, std::string_view name,
                   std::initializer_list<Label> match) {
  double total = 0;
  for (const MetricSample& s : samples) {
    if (matches(s, name, match)) total += s.value;
  }
  return total;
}

double max_samples(std::span<const MetricSample> samples, std::string_view name,
                   std::initializer_list<Label> match) {
  double best = 0;
  for (const MetricSample& s : samples) {
    if (matches(s, name, match)) best = std::max(best, s.value);
  }
  return best;
}

BucketSnapshot buckets_of(std::span<const MetricSample> samples, std::string_view name,
                          std::initializer_list<Label> match) {
  const std::string bucket = std::string(name) + "_bucket";
  BucketSnapshot cumulative;
  for (const MetricSample& s : samples) {
    if (!matches(s, bucket, match)) continue;
    const std::string le(s.label("le"));
    size_t i = kLatencyBounds.upper.size();  // +Inf
    if (le != "+Inf") {
      const double bound = std::strtod(le.c_str(), nullptr);
      i = 0;
      while (i < kLatencyBounds.upper.size() && kLatencyBounds.upper[i] < bound * (1 - 1e-9)) ++i;
    }
    if (i < cumulative.counts.size()) cumulative.counts[i] += static_cast<uint64_t>(s.value);
  }
  // Cumulative to per-bucket counts.
  for (size_t i = cumulative.counts.size() - 1; i > 0; --i) {
    cumulative.counts[i] -= std::min(cumulative.counts[i], cumulative.counts[i - 1]);
  }
  return cumulative;
}

double bucket_quantile(const BucketSnapshot& counts, double q) {
  const uint64_t total = counts.count();
  if (total == 0) return 0;
  const auto& upper = counts.bounds->upper;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(total);
  double seen = 0;
  for (size_t i = 0; i < counts.counts.size(); ++i) {
    const double in_bucket = static_cast<double>(counts.counts[i]);
    if (seen + in_bucket >= rank && in_bucket > 0) {
      if (i == upper.size()) return upper.back();
      const double lo = i == 0 ? 0 : upper[i - 1];
      return lo + (upper[i] - lo) * ((rank - seen) / in_bucket);
    }
    seen += in_bucket;
  }
  return upper.back();
}

BucketSnapshot bucket_delta(const BucketSnapshot& after, const BucketSnapshot& before) {
  BucketSnapshot d;
  d.bounds = after.bounds;
  for (size_t i = 0; i < d.counts.size(); ++i) {
    d.counts[i] =
        after.counts[i] >= before.counts[i] ? after.counts[i] - before.counts[i] : after.counts[i];
  }
  d.sum = after.sum >= before.sum ? after.sum - before.sum : after.sum;
  return d;
}

}  // namespace shoal::ops
