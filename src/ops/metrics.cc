#include "src/ops/metrics.h"

#include <fmt/format.h>

#include <cmath>

#include "src/base/assert.h"

namespace shoal::ops {

uint64_t BucketSnapshot::count() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

BucketSnapshot& BucketSnapshot::operator+=(const BucketSnapshot& other) {
  SHOAL_CHECK(bounds == other.bounds);
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  sum += other.sum;
  return *this;
}

Buckets::Buckets(const BucketBounds& bounds) : bounds_(&bounds) {
  for (size_t i = 0; i < limits_.size(); ++i) {
    limits_[i] = static_cast<uint64_t>(bounds.upper[i] * bounds.per_unit + 0.5);
  }
}

BucketSnapshot Buckets::snapshot() const {
  BucketSnapshot s;
  s.bounds = bounds_;
  for (size_t i = 0; i < counts_.size(); ++i)
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

namespace {

bool name_char(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool valid_name(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!name_char(name[i], i == 0, colon)) return false;
  }
  return true;
}

// Prometheus reads Go's float syntax; NaN and infinities have their own spellings.
void append_double(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
  } else {
    fmt::format_to(std::back_inserter(*out), "{}", v);
  }
}

}  // namespace

bool valid_metric_name(std::string_view name) {
  return valid_name(name, true);
}
bool valid_label_name(std::string_view name) {
  return valid_name(name, false) && !name.starts_with("__");
}

namespace {

// Backslash and newline are escaped in both; a double quote only in label values.
void escape(std::string_view text, bool quote, std::string* out) {
  for (char c : text) {
    if (c == '\\' || (quote && c == '"')) {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

void escape_label_value(std::string_view value, std::string* out) {
  escape(value, true, out);
}
void escape_help(std::string_view help, std::string* out) {
  escape(help, false, out);
}

void MetricsText::family(std::string_view name, std::string_view type, std::string_view help) {
  SHOAL_CHECK(valid_metric_name(name));
  SHOAL_CHECK(type == "counter" || type == "gauge" || type == "histogram");
  SHOAL_CHECK(type != "counter" || name.ends_with("_total"));
  fmt::format_to(std::back_inserter(text_), "# HELP {} ", name);
  escape_help(help, &text_);
  fmt::format_to(std::back_inserter(text_), "\n# TYPE {} {}\n", name, type);
}

void MetricsText::labels_text(std::span<const Label> labels, std::string_view le) {
  if (labels.empty() && le.empty()) return;
  text_.push_back('{');
  bool first = true;
  for (const Label& l : labels) {
    SHOAL_CHECK(valid_label_name(l.first) && l.first != "le");
    if (!first) text_.push_back(',');
    first = false;
    text_.append(l.first);
    text_.append("=\"");
    escape_label_value(l.second, &text_);
    text_.push_back('"');
  }
  if (!le.empty()) {
    if (!first) text_.push_back(',');
    text_.append("le=\"");
    text_.append(le);
    text_.push_back('"');
  }
  text_.push_back('}');
}

void MetricsText::sample(std::string_view name, std::span<const Label> labels, uint64_t value) {
  SHOAL_CHECK(valid_metric_name(name));
  text_.append(name);
  labels_text(labels, {});
  fmt::format_to(std::back_inserter(text_), " {}\n", value);
}

void MetricsText::sample(std::string_view name, std::span<const Label> labels, double value) {
  SHOAL_CHECK(valid_metric_name(name));
  text_.append(name);
  labels_text(labels, {});
  text_.push_back(' ');
  append_double(value, &text_);
  text_.push_back('\n');
}

void MetricsText::counter(std::string_view name, std::string_view help, uint64_t value) {
  family(name, "counter", help);
  sample(name, {}, value);
}

void MetricsText::gauge(std::string_view name, std::string_view help, double value) {
  family(name, "gauge", help);
  sample(name, {}, value);
}

void MetricsText::histogram(std::string_view name, std::span<const Label> labels,
                            const BucketSnapshot& h) {
  SHOAL_CHECK(valid_metric_name(name));
  uint64_t cumulative = 0;
  std::string le;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    le.clear();
    append_double(i < h.bounds->upper.size() ? h.bounds->upper[i] : INFINITY, &le);
    fmt::format_to(std::back_inserter(text_), "{}_bucket", name);
    labels_text(labels, le);
    fmt::format_to(std::back_inserter(text_), " {}\n", cumulative);
  }
  fmt::format_to(std::back_inserter(text_), "{}_sum", name);
  labels_text(labels, {});
  text_.push_back(' ');
  append_double(static_cast<double>(h.sum) / h.bounds->per_unit, &text_);
  fmt::format_to(std::back_inserter(text_), "\n{}_count", name);
  labels_text(labels, {});
  fmt::format_to(std::back_inserter(text_), " {}\n", cumulative);
}

}  // namespace shoal::ops
