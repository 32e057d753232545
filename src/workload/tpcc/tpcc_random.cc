#include "src/workload/tpcc/tpcc_random.h"

#include <cstring>

#include "src/base/assert.h"

namespace shoal::workload::tpcc {

namespace {

constexpr const char* kSyllables[10] = {"BAR", "OUGHT", "ABLE",  "PRI",   "PRES",
                                        "ESE", "ANTI",  "CALLY", "ATION", "EING"};
constexpr uint8_t kSyllableLen[10] = {3, 5, 4, 3, 4, 3, 4, 5, 5, 4};
constexpr char kAlnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr char kOriginal[] = "ORIGINAL";
constexpr size_t kOriginalLen = 8;

}  // namespace

bool NurandConstants::valid_delta(uint32_t c_load, uint32_t c_run) {
  const uint32_t delta = c_load > c_run ? c_load - c_run : c_run - c_load;
  return delta >= 65 && delta <= 119 && delta != 96 && delta != 112;
}

NurandConstants NurandConstants::make_for_load(Rng& rng, uint32_t c_last_load) {
  NurandConstants c;
  c.c_last_load = c_last_load;
  // At least one run value is valid for any load value in [0, 255]: rejection terminates.
  do {
    c.c_last_run = static_cast<uint32_t>(rng.uniform(0, 255));
  } while (!valid_delta(c.c_last_load, c.c_last_run));
  c.c_id = static_cast<uint32_t>(rng.uniform(0, 1023));
  c.ol_i_id = static_cast<uint32_t>(rng.uniform(0, 8191));
  return c;
}

NurandConstants NurandConstants::make(Rng& rng) {
  return make_for_load(rng, static_cast<uint32_t>(rng.uniform(0, 255)));
}

size_t last_name(uint32_t num, char* out) {
  SHOAL_ASSERT(num < 1000, "last-name number %u out of range", num);
  const uint32_t digits[3] = {num / 100, (num / 10) % 10, num % 10};
  size_t len = 0;
  for (uint32_t d : digits) {
    std::memcpy(out + len, kSyllables[d], kSyllableLen[d]);
    len += kSyllableLen[d];
  }
  std::memset(out + len, 0, kLastNameMax - len);
  return len;
}

size_t random_astring(Rng& rng, size_t min_len, size_t max_len, char* out, size_t capacity) {
  SHOAL_DCHECK(min_len <= max_len && max_len <= capacity);
  const size_t len = rng.uniform(min_len, max_len);
  for (size_t i = 0; i < len; ++i) out[i] = kAlnum[rng.uniform(0, sizeof(kAlnum) - 2)];
  std::memset(out + len, 0, capacity - len);
  return len;
}

size_t random_nstring(Rng& rng, size_t min_len, size_t max_len, char* out, size_t capacity) {
  SHOAL_DCHECK(min_len <= max_len && max_len <= capacity);
  const size_t len = rng.uniform(min_len, max_len);
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<char>('0' + rng.uniform(0, 9));
  std::memset(out + len, 0, capacity - len);
  return len;
}

void random_zip(Rng& rng, char* out) {
  random_nstring(rng, 4, 4, out, 4);
  std::memcpy(out + 4, "11111", 5);
}

void random_data_with_original(Rng& rng, char* out) {
  const size_t len = random_astring(rng, 26, 50, out, 50);
  if (rng.uniform(1, 100) <= 10) {
    const size_t at = rng.uniform(0, len - kOriginalLen);
    std::memcpy(out + at, kOriginal, kOriginalLen);
  }
}

bool has_original(const char* data, size_t capacity) {
  const size_t len = strnlen(data, capacity);
  return memmem(data, len, kOriginal, kOriginalLen) != nullptr;
}

}  // namespace shoal::workload::tpcc
