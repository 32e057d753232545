// Concurrent ordered map from byte-string keys (1 B to 8 KiB) to void* values, built from
// layers of the fixed-key B-tree (btree.h) in the manner of Masstree (Mao, Kohler, Morris,
// "Cache Craftiness for Fast Multicore Key-Value Storage", EuroSys 2012).
//
// Order: keys compare as memcmp over the common length, then the shorter first (plain
// lexicographic byte order: "ab" < "ab\0" < "abc" < "b").
//
// Layers: layer 0 holds every key; a layer at depth d holds keys that share their first 8*d
// bytes. Each layer is a BTree<1> keyed by the next slice of the key: up to 8 bytes,
// big-endian, zero padded, so that word order is byte order. Keys whose slices are equal
// after padding ("ab", "ab\0", "ab\0\0\0\0\0\0" and every key that goes on beyond the
// slice) share one entry; the entry tells them apart by their "class": the number of real
// bytes in the slice (1..8) or kLonger (9) for a key that goes on. Shorter sorts first, which
// is byte order. An entry's value is a tagged pointer (user values must be 4-byte aligned):
//   kValue   the user value of the one key of class 8 (the common case for keys of 8n bytes:
//            such a layer is exactly a BTree<1> of the slices and their values);
//   kSuffix  the one key, of class kLonger: a Suffix with its bytes after the slice and its
//            value;
//   kLayer   only keys of class kLonger, two or more, in the sub-layer it points to;
//   kBucket  any other set: an immutable array of (class, user value / tagged Suffix /
//            tagged sub-layer) sorted by class.
// Entries are immutable: every change builds the new entry (a new Bucket or Suffix; a new
// sub-layer chain, built privately, when a second kLonger key meets a Suffix) and swaps it in
// with BasicBTree::compare_and_replace against the entry it was computed from, or inserts
// or removes the whole entry; what the swap unlinked is retired through EBR. Membership
// changes swap with bump_version = true; value changes (update) without. A sub-layer, once
// published, stays in its slice's entry (carried from entry to entry) for the life of the
// tree, so a writer that descended into it never writes into an unreachable layer.
//
// Versions and phantoms (what the OCC engine needs). NodeRefs are leaves of any layer; a
// recorded version still matching at commit means no key in the range the record vouches for
// was added or removed. Argument, by induction on the layers:
// - A layer leaf's version changes on every insert or remove of an entry in its range
//   (BasicBTree's contract) and on every swap of an entry that adds or removes a key there
//   (bumped explicitly). Updates change no version.
// - get() reports the leaf of the deepest layer it read. If the key is absent there, a later
//   insert of it adds an entry to that leaf's range, or swaps the entry of its slice for one
//   with the key (bump). The entries get() passed through above are sub-layers, which stay.
// - scan() reports every leaf it reads in every layer it enters, in key order. A key k that
//   is inserted later into the covered range [lo, last delivered] (or [lo, hi]) has, in each
//   layer on its path, a slice inside the range that layer's scan covered. At the first
//   layer where k's slice had no entry or an entry without a sub-layer for k, k's insert
//   changes that layer's leaf (insert or bumped swap); in every layer above, k's entry held
//   a sub-layer that the scan entered, reporting the leaves covering k's part of it.
//   Removals are symmetric.
// - insert_if_absent() reports the leaf it changed, with the versions before and after, as
//   BasicBTree does (for a swap: the swapped entry's leaf), so the engine's "own insert"
//   fix-up (Txn::note_own_insert) works unchanged.
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
// sub-layer); no descending scan; no prefetching descents (BTreePrefetch); no memory_bytes().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "src/base/assert.h"
#include "src/base/striped_counter.h"
#include "src/index/btree.h"

namespace shoal {

class BytesTree {
 public:
  using Layer = BTree<1>;
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
  ~BytesTree();  // frees every layer, bucket and suffix. REQUIRES: no concurrent users
  BytesTree(const BytesTree&) = delete;
  BytesTree& operator=(const BytesTree&) = delete;

  // Finds key: kOk with *value set (if value != nullptr), or kNotFound. If leaf_out !=
  // nullptr, fills it with the leaf that held (or would hold) the answer and its version.
  Result get(std::string_view key, void** value, NodeRef* leaf_out) const;

  // Inserts (key, v) if key is absent (kOk), else kExists with *existing set. *before /
  // *after_version as in BasicBTree::insert_if_absent (see the file comment for which leaf
  // is reported). Any out pointer may be nullptr.
  // REQUIRES: v != nullptr and 4-byte aligned (records are; the low bits tag entries).
  Result insert_if_absent(std::string_view key, void* v, void** existing, NodeRef* before,
                          uint64_t* after_version);

  // Replaces a present key's value without changing any leaf version. REQUIRES: as insert.
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
  static constexpr uint64_t kLonger = 9;  // the class of a key that goes on past the slice
  static constexpr size_t kClasses = 9;   // classes 1..8 and kLonger
  enum Tag : uintptr_t { kValue = 0, kSuffix = 1, kLayer = 2, kBucket = 3 };
  static constexpr uintptr_t kTagMask = 3;

  // The one key of a kSuffix item: its bytes after the slice, and its value. Immutable.
  struct Suffix {
    void* value;
    uint32_t size_bytes;
    std::string_view bytes() const { return {reinterpret_cast<const char*>(this + 1), size_bytes}; }
  };
  // One key class of an entry. cls 1..8: e is the user value; kLonger: a tagged Suffix/Layer.
  struct Item {
    uint64_t cls;
    void* e;
  };
  // An entry decoded (a copy): its items sorted by class.
  struct Slot {
    size_t n = 0;
    Item items[kClasses];
    const Item* find(uint64_t cls) const;
    void put(Item item);  // inserts or replaces item.cls
    void erase(uint64_t cls);
  };
  // A kBucket entry: n items, sorted by class, follow the header. Immutable.
  struct Bucket {
    uint64_t n;
    const Item* items() const { return reinterpret_cast<const Item*>(this + 1); }
  };
  // Where a key stands in a layer.
  struct Place {
    uint64_t slice;
    uint64_t cls;
    std::string_view tail;  // the bytes after the slice (kLonger only)
  };

  static Place place_of(std::string_view rest) {
    const size_t n = rest.size();
    uint64_t w = 0;
    if (n >= 8) {
      std::memcpy(&w, rest.data(), 8);
      w = __builtin_bswap64(w);
    } else {
      for (size_t i = 0; i < n; ++i) w |= uint64_t{static_cast<uint8_t>(rest[i])} << (56 - 8 * i);
    }
    return Place{w, n > 8 ? kLonger : n, rest.substr(n > 8 ? 8 : n)};
  }
  static Tag tag_of(const void* e) {
    return static_cast<Tag>(reinterpret_cast<uintptr_t>(e) & kTagMask);
  }
  template <class T>
  static T* untag(void* e) {
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(e) & ~kTagMask);
  }
  static void* tag(const void* p, Tag t) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | t);
  }

  static Item item_for(const Place& p, void* value);  // allocates the Suffix of kLonger
  static void decode(void* e, Slot* slot);
  static void* encode(const Slot& slot);  // allocates a Bucket when one is needed
  static void* new_suffix(std::string_view bytes, void* value);  // tagged
  static void free_suffix(void* p);
  static void free_bucket(void* p);
  // A private chain of layers holding both keys (their bytes from the new layer's depth on),
  // tagged. REQUIRES: a != b, both non-empty.
  static void* build_pair(std::string_view a, void* va, std::string_view b, void* vb);
  // Frees an unpublished or dead kLonger item (a Suffix, or a layer with all below it).
  static void free_item(void* e);
  // Frees the contents of `layer` (entries, and the layers below), not `layer` itself.
  static void free_contents(Layer* layer);

  // Swaps the entry old_e (decoded: old_slot) at slice for the encoding of new_slot: inserts
  // it when old_e is nullptr, removes the entry when new_slot is empty. False if the entry
  // changed meanwhile. Retires what the swap unlinked, or frees what it built if it failed.
  static bool swap_entry(Layer* layer, uint64_t slice, void* old_e, const Slot& old_slot,
                         const Slot& new_slot, bool bump, NodeRef* before, uint64_t* after_version);
  // Runs step(Layer*, const Place&, void* entry, const NodeRef&) -> std::optional<Result> at
  // the layer holding key's entry (see bytes_tree.cc); insert_value: insert_if_absent's value.
  template <class Step>
  Result at_entry(std::string_view key, void* insert_value, NodeRef* before,
                  uint64_t* after_version, Step&& step);

  struct ScanCtx {
    char key[kKeyBytesMax];  // the bytes of the layers above (the prefix)
    bool go = true;          // false once on_entry asked to stop
  };
  template <class OnEntry, class OnLeaf>
  void scan_layer(const Layer& layer, size_t depth, std::optional<std::string_view> lo,
                  std::optional<std::string_view> hi, ScanCtx* ctx, OnEntry& on_entry,
                  OnLeaf& on_leaf) const;
  template <class OnEntry, class OnLeaf>
  bool scan_item(const Item& item, size_t depth, const std::optional<Place>& lo,
                 const std::optional<Place>& hi, ScanCtx* ctx, OnEntry& on_entry,
                 OnLeaf& on_leaf) const;

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
  SHOAL_DCHECK(depth < kKeyBytesMax / 8);  // layers exist only for keys that go on
  std::optional<Place> lo_at, hi_at;
  if (lo) lo_at = place_of(*lo);
  if (hi) hi_at = place_of(*hi);
  auto entry = [&](const Key1& k, void* e) -> bool {
    const uint64_t slice = __builtin_bswap64(k.w[0]);
    std::memcpy(ctx->key + depth * 8, &slice, 8);
    // Only the entries of the bounds' own slices are cut by the bounds' classes and tails.
    const std::optional<Place>& lo_cut = lo_at && lo_at->slice == k.w[0] ? lo_at : std::nullopt;
    const std::optional<Place>& hi_cut = hi_at && hi_at->slice == k.w[0] ? hi_at : std::nullopt;
    Slot slot;
    decode(e, &slot);
    for (size_t i = 0; i < slot.n && ctx->go; ++i) {
      if (!scan_item(slot.items[i], depth, lo_cut, hi_cut, ctx, on_entry, on_leaf)) break;
    }
    return ctx->go;
  };
  layer.scan(Key1{{lo_at ? lo_at->slice : 0}}, Key1{{hi_at ? hi_at->slice : ~uint64_t{0}}}, entry,
             on_leaf);
}

// Delivers one item of an entry of the prefix in ctx->key; false once past hi.
template <class OnEntry, class OnLeaf>
bool BytesTree::scan_item(const Item& item, size_t depth, const std::optional<Place>& lo,
                          const std::optional<Place>& hi, ScanCtx* ctx, OnEntry& on_entry,
                          OnLeaf& on_leaf) const {
  if (lo && item.cls < lo->cls) return true;
  if (hi && item.cls > hi->cls) return false;
  if (item.cls != kLonger) {
    ctx->go = on_entry(std::string_view(ctx->key, depth * 8 + item.cls), item.e);
    return ctx->go;
  }
  std::optional<std::string_view> sub_lo, sub_hi;  // set when a bound goes on in this slice
  if (lo && lo->cls == kLonger) sub_lo = lo->tail;
  if (hi && hi->cls == kLonger) sub_hi = hi->tail;
  if (tag_of(item.e) == kLayer) {
    scan_layer(*untag<Layer>(item.e), depth + 1, sub_lo, sub_hi, ctx, on_entry, on_leaf);
    return ctx->go;
  }
  const Suffix* s = untag<Suffix>(item.e);
  const std::string_view rest = s->bytes();
  if (sub_lo && rest < *sub_lo) return true;
  if (sub_hi && *sub_hi < rest) return false;
  const size_t at = depth * 8 + 8;
  SHOAL_ASSERT(at + rest.size() <= kKeyBytesMax, "bytes_tree: key of %zu bytes", at + rest.size());
  std::memcpy(ctx->key + at, rest.data(), rest.size());
  ctx->go = on_entry(std::string_view(ctx->key, at + rest.size()), s->value);
  return ctx->go;
}

}  // namespace shoal
