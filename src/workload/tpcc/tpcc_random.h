// TPC-C random input generation (clauses 2.1.6, 4.3.2): NURand with its run-time constants,
// the last-name syllables, and the a-string / n-string / zip / "ORIGINAL" rules of the loader.
//
// All functions are pure over a caller-owned Rng (one per thread) and write into fixed
// buffers: nothing allocates, so the clients can call them per transaction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/env.h"

namespace shoal::workload::tpcc {

// The run-time constants C of NURand(A, x, y) (clause 2.1.6). c_last_load is used when
// populating C_LAST, c_last_run when choosing last names at run time; their difference must
// lie in [65, 119] excluding 96 and 112 (clause 2.1.6.1).
struct NurandConstants {
  uint32_t c_last_load = 0;  // in [0, 255]
  uint32_t c_last_run = 0;   // in [0, 255]
  uint32_t c_id = 0;         // in [0, 1023]
  uint32_t ol_i_id = 0;      // in [0, 8191]

  // Draws a valid set (the run constants from the load's, with the delta rule).
  static NurandConstants make(Rng& rng);
  // Same, keeping a given c_last_load (a run against an already loaded database).
  static NurandConstants make_for_load(Rng& rng, uint32_t c_last_load);
  static bool valid_delta(uint32_t c_load, uint32_t c_run);
};

// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
inline uint32_t nurand(Rng& rng, uint32_t a, uint32_t x, uint32_t y, uint32_t c) {
  const uint32_t r = static_cast<uint32_t>(rng.uniform(0, a) | rng.uniform(x, y));
  return ((r + c) % (y - x + 1)) + x;
}

// C_LAST of syllable number num (0..999) into out[16], zero-padded; returns its length.
size_t last_name(uint32_t num, char* out);
inline constexpr size_t kLastNameMax = 16;

// Random a-string (alphanumeric) of random length in [min_len, max_len] into out, zero-padded
// to `capacity`. Returns the length. REQUIRES: max_len <= capacity.
size_t random_astring(Rng& rng, size_t min_len, size_t max_len, char* out, size_t capacity);
// Random n-string (digits), same contract.
size_t random_nstring(Rng& rng, size_t min_len, size_t max_len, char* out, size_t capacity);
// W_ZIP / D_ZIP / C_ZIP: 4 random digits then "11111" (clause 4.3.2.7), into out[9].
void random_zip(Rng& rng, char* out);
// I_DATA / S_DATA: a-string [26, 50] with "ORIGINAL" at a random position in 10% of rows.
void random_data_with_original(Rng& rng, char* out /* [50] */);
// Whether a zero-padded field of `capacity` bytes holds "ORIGINAL".
bool has_original(const char* data, size_t capacity);

}  // namespace shoal::workload::tpcc
