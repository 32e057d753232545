// libFuzzer target for the log decoder: LogEntryView::parse() over arbitrary bytes, then a walk
// of every record, dependency and write of an accepted entry. It may not crash, read out of
// bounds or accept an entry whose views leave the input (a patch applied onto a value of its
// stated size, and a byte key's bytes, format 5, included); every rejection must be Corruption or
// NotSupported with a message. A second pass fixes up the checksum so that the structural
// checks behind it are fuzzed too, not only the checksum.
//
// This file is part of the repl library as an empty translation unit; it becomes a fuzzer only
// when compiled by clang with SHOAL_FUZZ_TARGET defined:  src/repl/fuzz/build.sh
#if defined(SHOAL_FUZZ_TARGET)

#include <cstdlib>
#include <cstring>
#include <memory>

#include "src/repl/log_format.h"

namespace {

using shoal::repl::LogEntryView;

void check(const std::byte* data, size_t size) {
  auto r = LogEntryView::parse({data, size}, 0, 1u << 20);
  if (!r.ok()) {
    const shoal::Code c = r.status().code();
    if (c != shoal::Code::kCorruption && c != shoal::Code::kNotSupported) std::abort();
    if (r.status().message().empty()) std::abort();
    return;
  }
  if (r->entry_bytes() > size) std::abort();
  uint64_t sum = 0;
  r->for_each_record([&](const shoal::repl::RecordView& rec) {
    for (uint32_t d = 0; d < rec.dep_count(); ++d) sum += rec.dep(d).ts;
    rec.for_each_write([&](const shoal::repl::WriteView& w) {
      for (uint32_t k = 0; k < w.key_word_count; ++k) sum += w.key_word(k);
      if (w.bytes_key) {
        // An accepted byte key lies inside the input and within its length limit.
        const std::string_view key = w.byte_key();
        if (key.empty() || key.size() > shoal::repl::kLogBytesKeyBytesMax) std::abort();
        if (reinterpret_cast<const std::byte*>(key.data()) + key.size() > data + size) std::abort();
        for (char c : key) sum += static_cast<uint8_t>(c);
      }
      if (w.value.data() + w.value.size() > data + size) std::abort();
      for (std::byte b : w.value) sum += static_cast<uint8_t>(b);
      if (w.op == shoal::repl::WriteOp::kPatch) {
        // An accepted patch stays inside a value of patch_value_bytes (ASan: exact size).
        std::unique_ptr<std::byte[]> value(new std::byte[w.patch_value_bytes + 1]);
        w.apply_patch(value.get());
        sum += w.patch_base_tid();
      }
    });
  });
  volatile uint64_t sink = sum;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly sized, 8-aligned copy: ASan flags any read past the end.
  std::unique_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(buf.get(), data, size);
  check(buf.get(), size);
  if (size >= shoal::repl::kLogHeaderBytes) {
    const uint32_t payload = shoal::repl::load_u32(buf.get() + 32);
    if (shoal::repl::kLogHeaderBytes + uint64_t{payload} <= size) {
      shoal::repl::store_u64(buf.get() + 56, shoal::repl::log_entry_checksum(buf.get(), payload));
      check(buf.get(), size);
    }
  }
  return 0;
}

#endif  // SHOAL_FUZZ_TARGET
