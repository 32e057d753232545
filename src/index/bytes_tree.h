// Concurrent ordered map from byte-string keys (1 B to 8 KiB) to void* values, built from
// layers of the fixed-key B-tree (btree.h) in the manner of Masstree (Mao, Kohler, Morris,
// "Cache Craftiness for Fast Multicore Key-Value Storage", EuroSys 2012).
//
// Order: keys compare as memcmp over the common length, then the shorter first (plain
// lexicographic byte order: "ab" < "ab\0" < "abc" < "b").
//
// Layers: layer 0 holds every key; a layer at depth d holds keys that share their first 8*d
// bytes, keyed by the next slice of the key: Key<2>{w[0] = up to 8 bytes big-endian, zero
// padded; w[1] = how many of them are real (1..8) or kLonger (9) when the key goes on}. Zero
// padding plus the length word make layer-key order equal to key order (a key that ends
// inside a slice sorts before every longer key with the same padded slice, and a slice of 8
// that ends sorts before the kLonger entry of the same slice). A kLonger entry holds either
// - a Suffix: the one key with that slice; the rest of its bytes and its value, immutable
//   once published (changes publish a new Suffix and retire the old one through EBR), or
// - a sub-layer (a pointer tagged with bit 0) holding all keys with that 8-byte slice; a
//   sub-layer, once published, stays for the life of the tree (empty ones are not
//   collected, see "Not done").
// A second key with the slice of a Suffix turns the entry into a sub-layer: the new layer
// (and, when the two keys share further slices, a chain of them) is built privately with both
// keys, then swapped in with BasicBTree::compare_and_replace(..., bump_version = true).
//
// Versions and phantoms (what the OCC engine needs). NodeRefs are leaves of any layer; a
// recorded version still matching at commit means no key in the range the record vouches for
// was added or removed. Argument, by induction on the layers:
// - A layer leaf's version changes on every insert or remove of a layer entry in its range
//   (BasicBTree's contract), on every Suffix -> sub-layer swap (bumped explicitly), and on a
//   Suffix removal (a layer remove). Changing a Suffix's value (update) does not bump it.
// - get() reports the leaf of the deepest layer it read. If the key is absent there, a later
//   insert of it either inserts into that leaf's range in that layer (bump), or finds the
//   Suffix of another key where it would go and swaps it for a sub-layer (bump). The entry
//   get() passed through in upper layers are sub-layers, which never change again.
// - scan() reports every leaf it reads in every layer it enters, in key order. A key k that
//   is inserted later into the covered range [lo, last delivered] (or [lo, hi]) has, in each
//   layer on its path, a layer key inside the range that layer's scan covered. At the first
//   layer where k's entry was missing or a Suffix at scan time, its insert changes that
//   layer's leaf (insert or swap); in every layer above it k's entry was a sub-layer that the
//   scan entered, reporting the leaves covering k's part of it. Removals are symmetric.
// - insert_if_absent() reports the leaf it changed: the deepest layer's leaf for a plain
//   insert, or the leaf of the swapped entry for a Suffix -> sub-layer swap, with the
//   versions before and after, as BasicBTree does; the engine's "own insert" fix-up
//   (Txn::note_own_insert) then works unchanged.
//
// Threads: all member functions except the destructor may run concurrently from any thread.
// REQUIRES (every operation): the calling thread holds an ebr::Guard for as long as it uses
// the results, including NodeRef::leaf pointers passed to leaf_version().
//
// Bounds: keys are 1 to kKeyBytesMax bytes; other lengths are refused with Result::kBadKey.
// A chain of sub-layers is at most kKeyBytesMax / 8 deep; scan() recurses once per layer it
// enters (about 1 KiB of stack each), so a scan across two 8 KiB keys that share all but their
// last bytes takes about 1 MiB of stack.
//
// Not done: empty sub-layers are kept (memory is that of the peak, about 1.1 KiB per
// sub-layer); no descending scan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "src/base/striped_counter.h"
#include "src/index/btree.h"

namespace shoal {

class BytesTree {
 public:
  using Layer = BTree<2>;
  using NodeRef = Layer::NodeRef;
  static constexpr size_t kKeyBytesMax = 8192;

  enum class Result : uint8_t {
    kOk,        // done: found, inserted, updated, removed, or scanned
    kNotFound,  // get / update / remove: no such key (remove: or another value)
    kExists,    // insert_if_absent: the key is present; nothing changed
    kBadKey,    // a key outside 1..kKeyBytesMax bytes (a scan bound outside 0..kKeyBytesMax)
  };

  static bool valid_key(std::string_view key) { return !key.empty() && key.size() <= kKeyBytesMax; }

  BytesTree() = default;
  ~BytesTree();  // frees every layer and suffix. REQUIRES: no concurrent users
  BytesTree(const BytesTree&) = delete;
  BytesTree& operator=(const BytesTree&) = delete;

  // Finds key: kOk with *value set, or kNotFound. If leaf_out != nullptr, fills it with the
  // leaf that held (or would hold) the answer and its version, as BasicBTree::get does.
  Result get(std::string_view key, void** value, NodeRef* leaf_out) const;

  // Inserts (key, v) if key is absent (kOk), else kExists with *existing set (if not null).
  // *before / *after_version as in BasicBTree::insert_if_absent (see the file comment for
  // which leaf is reported). Any of the out pointers may be nullptr. REQUIRES: v != nullptr.
  Result insert_if_absent(std::string_view key, void* v, void** existing, NodeRef* before,
                          uint64_t* after_version);

  // Replaces a present key's value without changing any leaf version. REQUIRES: v != nullptr.
  Result update(std::string_view key, void* v);

  // Removes key if its value == expected (kOk), else kNotFound. Bumps a leaf version.
  Result remove(std::string_view key, const void* expected);

  // Ascending scan of keys in [lo, *hi], or from lo to the end when hi is nullopt. For each
  // leaf read (in any layer) calls on_leaf(NodeRef) before the entries read from it, and
  // on_entry(std::string_view key, void* value) -> bool for each key in range, in order;
  // false stops the scan. The reported leaves cover [lo, last key delivered], or the whole
  // range when the scan ran to its end. lo may be empty (the smallest bound). The key view
  // is valid only during its callback. Callbacks may call into the tree.
  template <class OnEntry, class OnLeaf>
  Result scan(std::string_view lo, std::optional<std::string_view> hi, OnEntry&& on_entry,
              OnLeaf&& on_leaf) const;

  // Current version of a leaf reported earlier (lock and obsolete bits included).
  static uint64_t leaf_version(const void* leaf) { return Layer::leaf_version(leaf); }

  size_t size() const;  // keys; exact when quiescent

 private:
  static constexpr uint64_t kLonger = 9;  // Key<2>::w[1] of an entry whose key goes on
  static constexpr uintptr_t kLayerTag = 1;

  // The one key of a kLonger entry: its bytes after the slice, and its value. Immutable.
  struct Suffix {
    void* value;
    uint32_t size_bytes;
    std::string_view bytes() const { return {reinterpret_cast<const char*>(this + 1), size_bytes}; }
  };

  // The layer key of the next slice of `rest` (the key's bytes from this layer's depth on).
  static Key<2> layer_key(std::string_view rest) {
    const size_t n = rest.size();
    uint64_t w = 0;
    if (n >= 8) {
      std::memcpy(&w, rest.data(), 8);
      w = __builtin_bswap64(w);
    } else {
      for (size_t i = 0; i < n; ++i) w |= uint64_t{static_cast<uint8_t>(rest[i])} << (56 - 8 * i);
    }
    return Key<2>{{w, n > 8 ? kLonger : n}};
  }
  // The bytes after the next slice (a Suffix's bytes, a sub-layer's rest); never throws.
  static std::string_view after_slice(std::string_view rest) {
    return rest.substr(rest.size() < 8 ? rest.size() : 8);
  }
  static bool is_layer(const void* entry) {
    return (reinterpret_cast<uintptr_t>(entry) & kLayerTag) != 0;
  }
  static Layer* as_layer(void* entry) {
    return reinterpret_cast<Layer*>(reinterpret_cast<uintptr_t>(entry) & ~kLayerTag);
  }
  static void* tag_layer(Layer* layer) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(layer) | kLayerTag);
  }
  static const Suffix* as_suffix(void* entry) { return static_cast<const Suffix*>(entry); }

  static Suffix* new_suffix(std::string_view bytes, void* value);
  static void free_suffix(void* p);
  // The entry for a key whose remaining bytes at this layer are `rest`.
  static void* entry_for(std::string_view rest, void* value);
  // A private chain of layers holding both keys (their bytes from the new layer's depth on).
  // REQUIRES: a != b, and both longer than 0 bytes.
  static Layer* build_pair(std::string_view a, void* va, std::string_view b, void* vb);
  // Frees the layers below `layer` and every Suffix in them (not `layer` itself).
  static void free_contents(Layer* layer);
  // Descends from `layer`, where *rest holds the key's bytes from that layer's depth on,
  // through sub-layers to the layer that holds the key's entry; sets *lk to the key's layer
  // key there and advances *rest. A kLonger entry is read (*entry: a Suffix, or nullptr when
  // absent, read under *ref if ref != nullptr); an entry of a key that ends in this layer is
  // left to the caller (*entry = nullptr).
  Layer* descend(const Layer* layer, std::string_view* rest, Key<2>* lk, void** entry,
                 NodeRef* ref) const;
  // Where an operation on one key stands (see descend()).
  struct Spot {
    Layer* layer;
    std::string_view rest;
    Key<2> lk;
    void* entry;
  };
  template <class Step>
  Result at_entry(std::string_view key, NodeRef* ref, Step&& step);
  // Swaps the Suffix s at lk for a new sub-layer holding s's key and (tail, v); false if the
  // entry changed meanwhile.
  bool swap_in_pair(Layer* layer, const Key<2>& lk, const Suffix* s, std::string_view tail, void* v,
                    NodeRef* before, uint64_t* after_version);

  // Scan state shared by the layers of one scan.
  struct ScanCtx {
    char key[kKeyBytesMax];  // the bytes of the layers above (the prefix)
    bool go = true;          // false once on_entry asked to stop
  };
  template <class OnEntry, class OnLeaf>
  void scan_layer(const Layer& layer, size_t depth, std::optional<std::string_view> lo,
                  std::optional<std::string_view> hi, ScanCtx* ctx, OnEntry& on_entry,
                  OnLeaf& on_leaf) const;
  template <class OnEntry>
  static bool deliver_suffix(const Suffix* s, size_t depth, std::optional<std::string_view> lo,
                             std::optional<std::string_view> hi, ScanCtx* ctx, OnEntry& on_entry);

  Layer root_;
  StripedCounter size_;
};

// ---------------------------------------------------------------------------------------------
// Implementation of the scan (templates).

template <class OnEntry, class OnLeaf>
BytesTree::Result BytesTree::scan(std::string_view lo, std::optional<std::string_view> hi,
                                  OnEntry&& on_entry, OnLeaf&& on_leaf) const {
  if (lo.size() > kKeyBytesMax || (hi && hi->size() > kKeyBytesMax)) return Result::kBadKey;
  if (hi && *hi < lo) return Result::kOk;
  ScanCtx ctx;  // the key buffer is written before it is read: no need to clear it
  scan_layer(root_, 0, lo, hi, &ctx, on_entry, on_leaf);
  return Result::kOk;
}

// lo / hi: the bounds' bytes from this depth on, or nullopt where this layer lies wholly
// above lo / below hi.
template <class OnEntry, class OnLeaf>
void BytesTree::scan_layer(const Layer& layer, size_t depth, std::optional<std::string_view> lo,
                           std::optional<std::string_view> hi, ScanCtx* ctx, OnEntry& on_entry,
                           OnLeaf& on_leaf) const {
  const Key<2> lo_key = lo ? layer_key(*lo) : Key<2>::min();
  const Key<2> hi_key = hi ? layer_key(*hi) : Key<2>::max();
  SHOAL_DCHECK(depth < kKeyBytesMax / 8);  // layers exist only for keys that go on
  auto entry = [&](const Key<2>& k, void* v) -> bool {
    const uint64_t slice = __builtin_bswap64(k.w[0]);
    std::memcpy(ctx->key + depth * 8, &slice, 8);
    if (k.w[1] != kLonger) {
      ctx->go = on_entry(std::string_view(ctx->key, depth * 8 + k.w[1]), v);
      return ctx->go;
    }
    // Only the entry with a bound's own slice is cut by that bound below this layer.
    std::optional<std::string_view> sub_lo, sub_hi;
    if (lo && k == lo_key) sub_lo = after_slice(*lo);
    if (hi && k == hi_key) sub_hi = after_slice(*hi);
    if (is_layer(v)) {
      scan_layer(*as_layer(v), depth + 1, sub_lo, sub_hi, ctx, on_entry, on_leaf);
      return ctx->go;
    }
    return deliver_suffix(as_suffix(v), depth, sub_lo, sub_hi, ctx, on_entry);
  };
  layer.scan(lo_key, hi_key, entry, on_leaf);
}

template <class OnEntry>
bool BytesTree::deliver_suffix(const Suffix* s, size_t depth, std::optional<std::string_view> lo,
                               std::optional<std::string_view> hi, ScanCtx* ctx,
                               OnEntry& on_entry) {
  const std::string_view rest = s->bytes();
  if ((lo && rest < *lo) || (hi && *hi < rest)) return true;
  const size_t at = depth * 8 + 8;
  SHOAL_ASSERT(at + rest.size() <= kKeyBytesMax, "bytes_tree: key of %zu bytes", at + rest.size());
  std::memcpy(ctx->key + at, rest.data(), rest.size());
  ctx->go = on_entry(std::string_view(ctx->key, at + rest.size()), s->value);
  return ctx->go;
}

}  // namespace shoal
