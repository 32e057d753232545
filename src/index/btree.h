// Concurrent ordered index: a B+tree with optimistic lock coupling (Leis et al., "Optimistic
// Lock Coupling: A Scalable and Efficient General-Purpose Synchronization Method", 2019).
//
// Every node carries a version word: bit 0 = obsolete (unlinked), bit 1 = locked, bits 2+ =
// a counter. Readers never write shared memory: they read a node's version, read the node,
// and re-check the version, restarting from the root when it changed. Writers lock a node by
// CAS from the version they read (so a lock attempt fails instead of waiting on a node that
// changed) and unlock by adding to the counter. No thread ever waits for a lock while holding
// one, so there is no lock order and no deadlock.
//
// Structure: inner nodes route by separators (child i holds keys in [sep[i-1], sep[i])).
// Leaves hold sorted keys and values, a doubly linked leaf chain, and fence keys: a leaf that
// is not obsolete covers exactly [low, high) (high = +inf for the rightmost leaf), and every
// change of a leaf's keys or fences bumps its version. That is what the transaction engine
// relies on for phantom protection: a leaf version recorded during a read still matches at
// commit only if nothing was inserted into or removed from the key range it covered.
// Inserts split full inner nodes eagerly on the way down, then split a full leaf and retry.
// A leaf that becomes empty is unlinked (with any chain of inner nodes that only led to it)
// and its range given to a neighbor leaf; when that meets contention it is left in place.
// Unlinked nodes are freed through ebr::retire().
//
// Leaf versions: strictly increase on every insert, remove, split and range change of a leaf
// (never ABA); update() and an unbumped compare_and_replace() leave them unchanged. A locked
// or obsolete leaf never shows a version equal to one recorded by a reader.
//
// Threads: all member functions except the destructor may run concurrently from any thread.
// REQUIRES (every operation): the calling thread holds an ebr::Guard for as long as it uses
// the results, including NodeRef::leaf pointers passed to leaf_version().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "src/base/assert.h"
#include "src/base/ebr.h"
#include "src/base/striped_counter.h"
#include "src/index/key.h"

namespace shoal {

namespace btree_detail {

inline constexpr uint64_t kObsoleteBit = 1;
inline constexpr uint64_t kLockedBit = 2;
inline constexpr size_t kMaxHeight = 32;

// Node fields are read while writers change them, and validated afterwards by the version.
// Acquire loads / release stores make that race well-defined (and visible to TSan) without
// separate fences: a reader that sees a writer's store also sees the writer's lock in the
// version it re-reads. On x86 both compile to plain moves.
template <class T>
inline T ld(const T& x) {
  return __atomic_load_n(&x, __ATOMIC_ACQUIRE);
}
template <class T>
inline void st(T& x, T v) {
  __atomic_store_n(&x, v, __ATOMIC_RELEASE);
}

inline bool is_stable(uint64_t version) {
  return (version & (kObsoleteBit | kLockedBit)) == 0;
}

void backoff_slow(uint64_t attempt);

// Pauses between optimistic restarts; yields once a lock holder may be descheduled.
inline void backoff(uint64_t attempt) {
  if (attempt != 0) [[unlikely]]
    backoff_slow(attempt);
}

}  // namespace btree_detail

// Where a stepped descent stands (BasicBTree::prefetch_start / prefetch_step). Plain data with
// the key as words, so one array can hold descents into trees of different key widths.
struct BTreePrefetch {
  const void* node = nullptr;  // the node the next step reads (prefetched); nullptr: over
  // Once over: the key's value as the leaf held it (validated by the leaf's version when
  // read); nullptr when the key was absent or the descent ended early.
  void* value = nullptr;
  // Once over: the leaf that covered the key when it was read (present or absent), or nullptr
  // when the descent ended early. A finger for later descents to neighbouring keys and for the
  // key's insert (prefetch_start, insert_if_absent_at); valid memory only under the ebr::Guard
  // the descent ran under.
  const void* leaf = nullptr;
  uint64_t key[8];  // the key's words (only the first K are used)
};

// kLeafBytes / kInnerBytes are the node sizes (64-byte aligned); BTree<K> picks measured
// defaults. Tests instantiate tiny nodes to exercise splits and merges.
template <size_t K, size_t kLeafBytes, size_t kInnerBytes>
class BasicBTree {
 public:
  using KeyT = Key<K>;
  // A leaf and the version observed there: the engine keeps these in a transaction's node set
  // and re-checks them at commit for phantom protection (Silo).
  struct NodeRef {
    const void* leaf;
    uint64_t version;
  };

 private:
  struct Node {
    std::atomic<uint64_t> version{0};
    uint16_t count = 0;    // keys in the node
    uint8_t is_leaf = 0;   // fixed at creation
    uint8_t high_inf = 0;  // leaf: no upper fence
  };
  static constexpr size_t kLeafHeaderBytes = sizeof(Node) + 2 * sizeof(void*) + 2 * sizeof(KeyT);
  static constexpr size_t kInnerHeaderBytes = sizeof(Node) + sizeof(void*);

 public:
  static constexpr size_t kLeafCap =
      (kLeafBytes - kLeafHeaderBytes) / (sizeof(KeyT) + sizeof(void*));
  static constexpr size_t kInnerCap =
      (kInnerBytes - kInnerHeaderBytes) / (sizeof(KeyT) + sizeof(void*));
  static_assert(kLeafCap >= 4 && kInnerCap >= 3, "nodes too small");
  static_assert(kLeafCap < 65536 && kInnerCap < 65536, "counts are 16 bits");

  BasicBTree();
  ~BasicBTree();  // frees all nodes directly. REQUIRES: no concurrent users
  BasicBTree(const BasicBTree&) = delete;
  BasicBTree& operator=(const BasicBTree&) = delete;

  // Returns the value for k, or nullptr. If leaf_out != nullptr, fills it with the leaf that
  // does/would hold k and the version under which the answer was read.
  void* get(const KeyT& k, NodeRef* leaf_out) const;

  // If k is present: returns its value, changes nothing, and reports leaf+version as get()
  // does in *before (and that version in *after_version). Otherwise inserts (k, v), returns
  // nullptr, sets *before = {leaf k went into, its version just before the insert} and
  // *after_version = its version right after. A split caused by the insert happens first and
  // bumps the leaf's version, so before.version then differs from any version recorded
  // before this call, and readers that recorded the old version fail validation.
  // Either pointer may be nullptr. REQUIRES: v != nullptr.
  void* insert_if_absent(const KeyT& k, void* v, NodeRef* before, uint64_t* after_version);

  // Replaces the value of a present key without changing the leaf version. Returns false if
  // k is absent. REQUIRES: v != nullptr.
  bool update(const KeyT& k, void* v);

  // Replaces k's value with v only if it is `expected`; returns false, changing nothing, if k
  // is absent or holds another value. With bump_version == false the leaf version stays, as
  // in update(); with true it changes as an insert's does, and *before / *after_version report
  // it as insert_if_absent() does (either may be nullptr), so that readers who recorded the
  // leaf fail validation (BytesTree swaps a key's entry for a sub-layer this way).
  // REQUIRES: v != nullptr, expected != nullptr.
  bool compare_and_replace(const KeyT& k, const void* expected, void* v, bool bump_version,
                           NodeRef* before, uint64_t* after_version);

  // Removes k if its value == expected; returns true if removed. Bumps the leaf version. An
  // emptied leaf is unlinked when it can be done without waiting (see file comment).
  bool remove(const KeyT& k, const void* expected);

  // Ascending scan of keys in [lo, hi]. For each leaf read, first calls on_leaf(NodeRef) with
  // the version its entries were read under, then on_entry(const KeyT&, void*) -> bool for
  // its in-range entries in order; false stops the scan. The reported leaves cover
  // [lo, last key delivered], or [lo, hi] if the scan ran to the end. Callbacks run with no
  // lock held, on a validated copy of the leaf, and may call into the tree.
  template <class OnEntry, class OnLeaf>
  void scan(const KeyT& lo, const KeyT& hi, OnEntry&& on_entry, OnLeaf&& on_leaf) const;

  // Descending scan of keys in [lo, hi], from hi down; coverage [last delivered, hi].
  template <class OnEntry, class OnLeaf>
  void rscan(const KeyT& hi, const KeyT& lo, OnEntry&& on_entry, OnLeaf&& on_leaf) const;

  // Prefetching descents (a follower's replay, src/repl/replay.cc): get()'s descent cut into
  // steps, so that a caller keeps several keys' descents in flight and overlaps their cache
  // misses instead of taking them one after another (Kocberber et al., "Asynchronous Memory
  // Access Chaining", PVLDB 2015). A step reads one node, which the step before prefetched,
  // and prefetches the next; at the leaf it prefetches the key's value (its first two cache
  // lines). Nothing is returned, so a step that meets a node changing under it ends the
  // descent: a lost prefetch, never a wrong answer. REQUIRES: the ebr::Guard held from
  // prefetch_start() until the descent is over; key_words holds K words.
  void prefetch_start(const uint64_t* key_words, BTreePrefetch* p) const;
  // One step; false once the descent is over (p->node is then nullptr).
  bool prefetch_step(BTreePrefetch* p) const;
  // A descent in progress jumps to `finger`, a leaf an earlier descent under the same guard
  // ended at (BTreePrefetch::leaf), when that leaf still covers the key: its next step is the
  // leaf's, instead of one per level left (a replayed entry's neighbouring keys: TPC-C's
  // order lines). Returns whether it jumped. A stale finger (split, unlinked, changed
  // meanwhile) costs one check, never a wrong answer: a leaf step checks the leaf's fences
  // under its version. REQUIRES: p->node != nullptr (in progress); the same guard.
  bool prefetch_jump(BTreePrefetch* p, const void* finger) const;

  // insert_if_absent() into `leaf_hint` (a finger as above, or nullptr) without a descent from
  // the root, when that leaf still covers k and has room; else insert_if_absent() as usual.
  // Returns what insert_if_absent() does. REQUIRES: v != nullptr; leaf_hint found under the
  // caller's current ebr::Guard.
  void* insert_if_absent_at(const KeyT& k, void* v, const void* leaf_hint);

  // Current version of a leaf reported earlier (lock and obsolete bits included).
  static uint64_t leaf_version(const void* leaf) {
    return static_cast<const Node*>(leaf)->version.load(std::memory_order_acquire);
  }

  size_t size() const;          // exact when quiescent
  size_t memory_bytes() const;  // bytes of nodes currently linked into the tree

 private:
  struct alignas(64) Leaf : Node {
    Leaf* next = nullptr;
    Leaf* prev = nullptr;  // written only by a holder of the predecessor's lock
    KeyT low;
    KeyT high;
    KeyT keys[kLeafCap];
    void* values[kLeafCap] = {};
  };
  struct alignas(64) Inner : Node {
    Node* children[kInnerCap + 1] = {};
    KeyT keys[kInnerCap];
  };
  static_assert(sizeof(Leaf) <= (kLeafBytes + 63) / 64 * 64);
  static_assert(sizeof(Inner) <= (kInnerBytes + 63) / 64 * 64);

  // A validated copy of one leaf's entries within a key range, plus its fences.
  struct Snapshot {
    uint64_t version;
    size_t n;
    bool high_inf;
    const Leaf* next;
    KeyT low;
    KeyT high;
    KeyT keys[kLeafCap];
    void* values[kLeafCap];
    bool covers(const KeyT& k) const { return low <= k && (high_inf || k < high); }
  };

  // Root-to-leaf path for structural changes: nodes[0] is the root, nodes[height] the leaf,
  // idx[i] the child slot taken in nodes[i].
  struct Path {
    size_t height;
    Node* nodes[btree_detail::kMaxHeight];
    uint64_t versions[btree_detail::kMaxHeight];
    size_t idx[btree_detail::kMaxHeight];
  };

  // --- key access: words are read/written atomically (see ld/st) ---
  static KeyT load_key(const KeyT& src);
  static void store_key(KeyT& dst, const KeyT& k);
  static bool stored_less(const KeyT& stored, const KeyT& k);  // stored < k
  static bool stored_le(const KeyT& stored, const KeyT& k);    // stored <= k
  static size_t leaf_count(const Node* n);
  static size_t inner_count(const Node* n);
  static size_t leaf_lower_bound(const Leaf* leaf, size_t n, const KeyT& k);
  // Where k is or would go in the leaf: its count, k's slot, and k's value (nullptr: absent).
  // Read racily: the caller validates by the leaf's version.
  struct LeafSpot {
    size_t n, pos;
    void* value;
  };
  static LeafSpot leaf_spot(const Leaf* leaf, const KeyT& k);
  static size_t child_index(const Inner* in, const KeyT& k);
  static bool successor(KeyT* k);    // false if k == max
  static bool predecessor(KeyT* k);  // false if k == min

  // --- version lock ---
  static bool try_lock(Node* n, uint64_t version);
  static bool try_lock_current(Node* n);
  static uint64_t unlock(Node* n);  // bumps the version; returns the new one
  static void unlock_unchanged(Node* n);
  static void unlock_obsolete(Node* n);

  // --- nodes ---
  Leaf* new_leaf();
  Inner* new_inner();
  static void free_node(void* p);
  void retire_node(Node* n);
  static void destroy_subtree(Node* n);

  // --- reads ---
  const Leaf* find_leaf(const KeyT& k, uint64_t* version) const;
  static void prefetch_node(const Node* node);
  bool descend_path(const KeyT& k, Path* path) const;
  static bool read_snapshot(const Leaf* leaf, const KeyT& from, const KeyT& to, Snapshot* s);
  // The leaf's fences hold k (read racily: the caller validates by the leaf's version).
  static bool leaf_covers(const Leaf* leaf, const KeyT& k);

  // --- inserts ---
  bool descend_for_insert(const KeyT& k, Path* path);
  void split_inner(Path* path, size_t level);
  void split_leaf(Path* path, size_t insert_pos);
  static void leaf_insert_at(Leaf* leaf, size_t pos, size_t n, const KeyT& k, void* v);
  static void inner_insert_at(Inner* in, size_t child_idx, const KeyT& sep, Node* right);
  bool lock_parent_and_child(Path* path, size_t level);
  void link_sibling(Path* path, size_t level, const KeyT& sep, Node* right);

  // --- removal of empty leaves ---
  void try_unlink_empty_leaf(const KeyT& k);
  enum class UnlinkResult { kDone, kRetry };
  UnlinkResult unlink_empty_leaf(Path* path, size_t anchor);
  bool absorb_into_pred(Leaf* e, Leaf* locked[2]);
  bool absorb_into_succ(Leaf* e, Leaf* locked[2]);
  static void inner_erase(Inner* in, size_t key_idx, size_t child_idx);

  // update() and compare_and_replace(); expected == nullptr matches any value.
  bool replace_value(const KeyT& k, const void* expected, void* v, bool bump_version,
                     NodeRef* before, uint64_t* after_version);

  void add_size(int64_t delta) { size_.add(delta); }

  std::atomic<Node*> root_;
  StripedCounter size_;
  std::atomic<int64_t> memory_bytes_{0};
};

namespace btree_detail {
// Node bytes for K-word keys, measured with btree_bench (results in its header comment). Wider
// keys get bigger nodes so that a leaf still holds a useful number of entries.
inline constexpr size_t default_node_bytes(size_t k) {
  return k == 1 ? 512 : 256 + 128 * k;
}
}  // namespace btree_detail

template <size_t K>
class BTree final : public BasicBTree<K, btree_detail::default_node_bytes(K),
                                      btree_detail::default_node_bytes(K)> {};

// ---------------------------------------------------------------------------------------------
// Implementation.

#define SHOAL_BTREE_TEMPLATE template <size_t K, size_t kLeafBytes, size_t kInnerBytes>
#define SHOAL_BTREE BasicBTree<K, kLeafBytes, kInnerBytes>

// --- keys ---

SHOAL_BTREE_TEMPLATE
inline Key<K> SHOAL_BTREE::load_key(const KeyT& src) {
  KeyT k;
  for (size_t i = 0; i < K; ++i) k.w[i] = btree_detail::ld(src.w[i]);
  return k;
}

SHOAL_BTREE_TEMPLATE
inline void SHOAL_BTREE::store_key(KeyT& dst, const KeyT& k) {
  for (size_t i = 0; i < K; ++i) btree_detail::st(dst.w[i], k.w[i]);
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::stored_less(const KeyT& stored, const KeyT& k) {
  for (size_t i = 0; i + 1 < K; ++i) {
    const uint64_t a = btree_detail::ld(stored.w[i]);
    if (a != k.w[i]) return a < k.w[i];
  }
  return btree_detail::ld(stored.w[K - 1]) < k.w[K - 1];
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::stored_le(const KeyT& stored, const KeyT& k) {
  for (size_t i = 0; i + 1 < K; ++i) {
    const uint64_t a = btree_detail::ld(stored.w[i]);
    if (a != k.w[i]) return a < k.w[i];
  }
  return btree_detail::ld(stored.w[K - 1]) <= k.w[K - 1];
}

// Counts are clamped so that a torn (not yet validated) read never indexes past the arrays.
SHOAL_BTREE_TEMPLATE
inline size_t SHOAL_BTREE::leaf_count(const Node* n) {
  const size_t c = btree_detail::ld(n->count);
  return c < kLeafCap ? c : kLeafCap;
}

SHOAL_BTREE_TEMPLATE
inline size_t SHOAL_BTREE::inner_count(const Node* n) {
  const size_t c = btree_detail::ld(n->count);
  return c < kInnerCap ? c : kInnerCap;
}

// First i in [0, n) with keys[i] >= k, or n. Branch-free halving: the loop runs log2(n) times
// whatever the keys, and the compiler turns the choice into a conditional move.
SHOAL_BTREE_TEMPLATE
inline size_t SHOAL_BTREE::leaf_lower_bound(const Leaf* leaf, size_t n, const KeyT& k) {
  if (n == 0) return 0;
  size_t base = 0;
  while (n > 1) {
    const size_t half = n / 2;
    base = stored_less(leaf->keys[base + half], k) ? base + half : base;
    n -= half;
  }
  return base + (stored_less(leaf->keys[base], k) ? 1 : 0);
}

SHOAL_BTREE_TEMPLATE
inline typename SHOAL_BTREE::LeafSpot SHOAL_BTREE::leaf_spot(const Leaf* leaf, const KeyT& k) {
  LeafSpot s{leaf_count(leaf), 0, nullptr};
  s.pos = leaf_lower_bound(leaf, s.n, k);
  if (s.pos < s.n && load_key(leaf->keys[s.pos]) == k)
    s.value = btree_detail::ld(leaf->values[s.pos]);
  return s;
}

// Slot of the child covering k: the number of separators <= k.
SHOAL_BTREE_TEMPLATE
inline size_t SHOAL_BTREE::child_index(const Inner* in, const KeyT& k) {
  size_t n = inner_count(in);
  if (n == 0) return 0;
  size_t base = 0;
  while (n > 1) {
    const size_t half = n / 2;
    base = stored_le(in->keys[base + half], k) ? base + half : base;
    n -= half;
  }
  return base + (stored_le(in->keys[base], k) ? 1 : 0);
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::successor(KeyT* k) {
  for (size_t i = K; i-- > 0;) {
    if (++k->w[i] != 0) return true;
  }
  return false;
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::predecessor(KeyT* k) {
  for (size_t i = K; i-- > 0;) {
    if (k->w[i]-- != 0) return true;
  }
  return false;
}

// --- version lock ---

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::try_lock(Node* n, uint64_t version) {
  SHOAL_DCHECK(btree_detail::is_stable(version));
  return n->version.compare_exchange_strong(version, version | btree_detail::kLockedBit,
                                            std::memory_order_acquire, std::memory_order_relaxed);
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::try_lock_current(Node* n) {
  const uint64_t v = n->version.load(std::memory_order_acquire);
  return btree_detail::is_stable(v) && try_lock(n, v);
}

// Adding the lock bit again clears it and carries into the counter: +4 per lock/unlock.
SHOAL_BTREE_TEMPLATE
inline uint64_t SHOAL_BTREE::unlock(Node* n) {
  const uint64_t v = n->version.load(std::memory_order_relaxed) + btree_detail::kLockedBit;
  n->version.store(v, std::memory_order_release);
  return v;
}

// For a holder that changed nothing a version-holder could observe (update(), failed
// structural attempts): readers that read around the lock stay valid.
SHOAL_BTREE_TEMPLATE
inline void SHOAL_BTREE::unlock_unchanged(Node* n) {
  const uint64_t v = n->version.load(std::memory_order_relaxed) - btree_detail::kLockedBit;
  n->version.store(v, std::memory_order_release);
}

SHOAL_BTREE_TEMPLATE
inline void SHOAL_BTREE::unlock_obsolete(Node* n) {
  const uint64_t v = n->version.load(std::memory_order_relaxed) + btree_detail::kLockedBit;
  n->version.store(v | btree_detail::kObsoleteBit, std::memory_order_release);
}

// --- nodes ---

SHOAL_BTREE_TEMPLATE
typename SHOAL_BTREE::Leaf* SHOAL_BTREE::new_leaf() {
  void* mem = ::operator new (sizeof(Leaf), std::align_val_t{64});
  Leaf* leaf = new (mem) Leaf();
  leaf->is_leaf = 1;
  memory_bytes_.fetch_add(sizeof(Leaf), std::memory_order_relaxed);
  return leaf;
}

SHOAL_BTREE_TEMPLATE
typename SHOAL_BTREE::Inner* SHOAL_BTREE::new_inner() {
  void* mem = ::operator new (sizeof(Inner), std::align_val_t{64});
  Inner* in = new (mem) Inner();
  memory_bytes_.fetch_add(sizeof(Inner), std::memory_order_relaxed);
  return in;
}

// Nodes are trivially destructible, so freeing needs no type.
SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::free_node(void* p) {
  ::operator delete (p, std::align_val_t{64});
}

SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::retire_node(Node* n) {
  memory_bytes_.fetch_sub(n->is_leaf ? sizeof(Leaf) : sizeof(Inner), std::memory_order_relaxed);
  ebr::retire(n, &free_node);
}

SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::destroy_subtree(Node* n) {
  if (!n->is_leaf) {
    Inner* in = static_cast<Inner*>(n);
    const size_t c = inner_count(in);
    for (size_t i = 0; i <= c; ++i) destroy_subtree(in->children[i]);
  }
  free_node(n);
}

SHOAL_BTREE_TEMPLATE
SHOAL_BTREE::BasicBTree() {
  Leaf* leaf = new_leaf();
  leaf->high_inf = 1;  // low is Key::min(): the only leaf covers everything
  root_.store(leaf, std::memory_order_release);
}

SHOAL_BTREE_TEMPLATE
SHOAL_BTREE::~BasicBTree() {
  destroy_subtree(root_.load(std::memory_order_acquire));
}

SHOAL_BTREE_TEMPLATE
size_t SHOAL_BTREE::size() const {
  const int64_t total = size_.sum();
  return total > 0 ? static_cast<size_t>(total) : 0;
}

SHOAL_BTREE_TEMPLATE
size_t SHOAL_BTREE::memory_bytes() const {
  const int64_t b = memory_bytes_.load(std::memory_order_relaxed);
  return b > 0 ? static_cast<size_t>(b) : 0;
}

// --- reads ---

// Returns the leaf covering k and a version of it: the parent was unchanged from before the
// child pointer was read until after the child's version was read, so at that version the leaf
// was the one covering k.
SHOAL_BTREE_TEMPLATE
inline void SHOAL_BTREE::prefetch_node(const Node* node) {
  constexpr size_t kBytes = kLeafBytes > kInnerBytes ? kLeafBytes : kInnerBytes;
  const char* p = reinterpret_cast<const char*>(node);
  for (size_t off = 0; off < kBytes; off += 64) __builtin_prefetch(p + off);
}

SHOAL_BTREE_TEMPLATE
inline const typename SHOAL_BTREE::Leaf* SHOAL_BTREE::find_leaf(const KeyT& k,
                                                                uint64_t* version) const {
  for (uint64_t attempt = 0;; ++attempt) {
    btree_detail::backoff(attempt);
    const Node* node = root_.load(std::memory_order_acquire);
    uint64_t v = node->version.load(std::memory_order_acquire);
    if (!btree_detail::is_stable(v) || root_.load(std::memory_order_acquire) != node) continue;
    bool valid = true;
    while (!node->is_leaf) {
      const Inner* in = static_cast<const Inner*>(node);
      const Node* child = btree_detail::ld(in->children[child_index(in, k)]);
      // The pointer may be garbage until the parent is validated.
      if (in->version.load(std::memory_order_acquire) != v) {
        valid = false;
        break;
      }
      // Fetch all of the child's cache lines at once: its binary search would otherwise take
      // one dependent miss per halving.
      prefetch_node(child);
      const uint64_t cv = child->version.load(std::memory_order_acquire);
      if (in->version.load(std::memory_order_acquire) != v || !btree_detail::is_stable(cv)) {
        valid = false;
        break;
      }
      node = child;
      v = cv;
    }
    if (!valid) continue;
    *version = v;
    return static_cast<const Leaf*>(node);
  }
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::leaf_covers(const Leaf* leaf, const KeyT& k) {
  // low <= k < high, or low <= k for the rightmost leaf
  return stored_le(leaf->low, k) &&
         (btree_detail::ld(leaf->high_inf) != 0 || !stored_le(leaf->high, k));
}

SHOAL_BTREE_TEMPLATE
inline void SHOAL_BTREE::prefetch_start(const uint64_t* key_words, BTreePrefetch* p) const {
  std::memcpy(p->key, key_words, K * sizeof(uint64_t));
  p->value = nullptr;
  p->leaf = nullptr;
  p->node = root_.load(std::memory_order_acquire);  // hot: every descent reads it
}

SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::prefetch_jump(BTreePrefetch* p, const void* finger) const {
  SHOAL_DCHECK(p->node != nullptr);
  const Leaf* leaf = static_cast<const Leaf*>(finger);
  if (p->node == leaf) return false;
  KeyT k;
  std::memcpy(k.w.data(), p->key, K * sizeof(uint64_t));
  const uint64_t v = leaf->version.load(std::memory_order_acquire);
  if (!btree_detail::is_stable(v) || !leaf_covers(leaf, k) ||
      leaf->version.load(std::memory_order_acquire) != v) {
    return false;
  }
  p->node = leaf;  // in cache: a descent just read it
  return true;
}

// Validated like find_leaf(): a child pointer or a value is used only if the node's version
// did not change while it was read, so it points to memory the guard keeps allocated.
SHOAL_BTREE_TEMPLATE
inline bool SHOAL_BTREE::prefetch_step(BTreePrefetch* p) const {
  const Node* node = static_cast<const Node*>(p->node);
  if (node == nullptr) return false;
  p->node = nullptr;
  KeyT k;
  std::memcpy(k.w.data(), p->key, K * sizeof(uint64_t));
  const uint64_t v = node->version.load(std::memory_order_acquire);
  if (!btree_detail::is_stable(v)) return false;
  if (!node->is_leaf) {
    const Inner* in = static_cast<const Inner*>(node);
    const Node* child = btree_detail::ld(in->children[child_index(in, k)]);
    if (child == nullptr || in->version.load(std::memory_order_acquire) != v) return false;
    prefetch_node(child);
    p->node = child;
    return true;
  }
  // Reached from a validated parent the leaf covers k; reached from a finger only its fences
  // say so, checked here under the same version as the lookup.
  const Leaf* leaf = static_cast<const Leaf*>(node);
  if (!leaf_covers(leaf, k)) return false;
  void* value = leaf_spot(leaf, k).value;
  if (leaf->version.load(std::memory_order_acquire) != v) return false;
  p->leaf = leaf;
  if (value != nullptr) {
    __builtin_prefetch(value);
    __builtin_prefetch(static_cast<const char*>(value) + 64);
    p->value = value;
  }
  return false;
}

// find_leaf() that records the whole path; false if a version check failed.
SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::descend_path(const KeyT& k, Path* p) const {
  Node* node = root_.load(std::memory_order_acquire);
  uint64_t v = node->version.load(std::memory_order_acquire);
  if (!btree_detail::is_stable(v) || root_.load(std::memory_order_acquire) != node) return false;
  size_t h = 0;
  while (!node->is_leaf) {
    SHOAL_ASSERT(h + 1 < btree_detail::kMaxHeight, "btree deeper than %zu levels", h);
    Inner* in = static_cast<Inner*>(node);
    const size_t idx = child_index(in, k);
    Node* child = btree_detail::ld(in->children[idx]);
    if (in->version.load(std::memory_order_acquire) != v) return false;
    const uint64_t cv = child->version.load(std::memory_order_acquire);
    if (in->version.load(std::memory_order_acquire) != v || !btree_detail::is_stable(cv)) {
      return false;
    }
    p->nodes[h] = node;
    p->versions[h] = v;
    p->idx[h] = idx;
    ++h;
    node = child;
    v = cv;
  }
  p->nodes[h] = node;
  p->versions[h] = v;
  p->height = h;
  return true;
}

// Copies leaf entries with keys in [from, to] and the leaf's fences; false if the leaf was
// locked or changed meanwhile.
SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::read_snapshot(const Leaf* leaf, const KeyT& from, const KeyT& to, Snapshot* s) {
  const uint64_t v = leaf->version.load(std::memory_order_acquire);
  if (!btree_detail::is_stable(v)) return false;
  const size_t n = leaf_count(leaf);
  size_t m = 0;
  for (size_t i = leaf_lower_bound(leaf, n, from); i < n; ++i) {
    const KeyT key = load_key(leaf->keys[i]);
    if (to < key) break;
    s->keys[m] = key;
    s->values[m] = btree_detail::ld(leaf->values[i]);
    ++m;
  }
  s->low = load_key(leaf->low);
  s->high = load_key(leaf->high);
  s->high_inf = btree_detail::ld(leaf->high_inf) != 0;
  s->next = btree_detail::ld(leaf->next);
  if (leaf->version.load(std::memory_order_acquire) != v) return false;
  s->n = m;
  s->version = v;
  return true;
}

SHOAL_BTREE_TEMPLATE
void* SHOAL_BTREE::get(const KeyT& k, NodeRef* leaf_out) const {
  for (uint64_t attempt = 0;; ++attempt) {
    btree_detail::backoff(attempt);
    uint64_t v;
    const Leaf* leaf = find_leaf(k, &v);
    void* value = leaf_spot(leaf, k).value;
    if (leaf->version.load(std::memory_order_acquire) != v) continue;
    if (leaf_out != nullptr) *leaf_out = NodeRef{leaf, v};
    return value;
  }
}

SHOAL_BTREE_TEMPLATE
template <class OnEntry, class OnLeaf>
void SHOAL_BTREE::scan(const KeyT& lo, const KeyT& hi, OnEntry&& on_entry, OnLeaf&& on_leaf) const {
  if (hi < lo) return;
  Snapshot snap;
  KeyT cursor = lo;  // everything below cursor is covered by reported leaves
  const Leaf* leaf = nullptr;
  for (uint64_t failures = 0;;) {
    uint64_t unused;
    if (leaf == nullptr) leaf = find_leaf(cursor, &unused);
    // Checking the fences (not just the version) makes a stale next pointer harmless.
    if (!read_snapshot(leaf, cursor, hi, &snap) || !snap.covers(cursor)) {
      leaf = nullptr;
      btree_detail::backoff(++failures);
      continue;
    }
    failures = 0;
    on_leaf(NodeRef{leaf, snap.version});
    for (size_t i = 0; i < snap.n; ++i) {
      if (!on_entry(static_cast<const KeyT&>(snap.keys[i]), snap.values[i])) return;
    }
    if (snap.high_inf || hi < snap.high) return;
    cursor = snap.high;
    leaf = snap.next;
  }
}

// Walks down by re-descending to the leaf below each leaf's low fence: no prev pointers to
// validate, and a descent costs about what a leaf hop does at these heights.
SHOAL_BTREE_TEMPLATE
template <class OnEntry, class OnLeaf>
void SHOAL_BTREE::rscan(const KeyT& hi, const KeyT& lo, OnEntry&& on_entry,
                        OnLeaf&& on_leaf) const {
  if (hi < lo) return;
  Snapshot snap;
  KeyT cursor = hi;  // everything above cursor is covered by reported leaves
  for (uint64_t failures = 0;;) {
    uint64_t unused;
    const Leaf* leaf = find_leaf(cursor, &unused);
    if (!read_snapshot(leaf, lo, cursor, &snap) || !snap.covers(cursor)) {
      btree_detail::backoff(++failures);
      continue;
    }
    failures = 0;
    on_leaf(NodeRef{leaf, snap.version});
    for (size_t i = snap.n; i > 0; --i) {
      if (!on_entry(static_cast<const KeyT&>(snap.keys[i - 1]), snap.values[i - 1])) return;
    }
    if (snap.low <= lo) return;
    cursor = snap.low;
    predecessor(&cursor);  // low > lo >= min, so no wrap
  }
}

// --- inserts ---

SHOAL_BTREE_TEMPLATE
void* SHOAL_BTREE::insert_if_absent(const KeyT& k, void* v, NodeRef* before,
                                    uint64_t* after_version) {
  SHOAL_ASSERT(v != nullptr, "%s", "btree values must not be null");
  Path p;
  for (uint64_t attempt = 0;; ++attempt) {
    btree_detail::backoff(attempt);
    if (!descend_for_insert(k, &p)) continue;
    Leaf* leaf = static_cast<Leaf*>(p.nodes[p.height]);
    const uint64_t lv = p.versions[p.height];
    const auto [n, pos, cur] = leaf_spot(leaf, k);
    if (leaf->version.load(std::memory_order_acquire) != lv) continue;
    if (cur != nullptr) {
      if (before != nullptr) *before = NodeRef{leaf, lv};
      if (after_version != nullptr) *after_version = lv;
      return cur;
    }
    if (n >= kLeafCap) {
      split_leaf(&p, pos);
      attempt = 0;
      continue;
    }
    if (!try_lock(leaf, lv)) continue;
    leaf_insert_at(leaf, pos, n, k, v);
    const uint64_t after = unlock(leaf);
    add_size(1);
    if (before != nullptr) *before = NodeRef{leaf, lv};
    if (after_version != nullptr) *after_version = after;
    return nullptr;
  }
}

SHOAL_BTREE_TEMPLATE
void* SHOAL_BTREE::insert_if_absent_at(const KeyT& k, void* v, const void* leaf_hint) {
  SHOAL_ASSERT(v != nullptr, "%s", "btree values must not be null");
  if (leaf_hint != nullptr) {
    // The leaf holds k's range at version lv (fences read under it), and locking at lv keeps
    // it so: the insert insert_if_absent() would make there after its descent. A full leaf
    // needs the path for its split: the descent below.
    Leaf* leaf = const_cast<Leaf*>(static_cast<const Leaf*>(leaf_hint));
    const uint64_t lv = leaf->version.load(std::memory_order_acquire);
    if (btree_detail::is_stable(lv) && leaf_covers(leaf, k)) {
      const auto [n, pos, cur] = leaf_spot(leaf, k);
      if (leaf->version.load(std::memory_order_acquire) == lv) {
        if (cur != nullptr) return cur;
        if (n < kLeafCap && try_lock(leaf, lv)) {
          leaf_insert_at(leaf, pos, n, k, v);
          unlock(leaf);
          add_size(1);
          return nullptr;
        }
      }
    }
  }
  return insert_if_absent(k, v, nullptr, nullptr);
}

// Descends to k's leaf; on the way, splits the topmost full inner node (and returns false so
// the caller retries), so a leaf split always finds room in its parent.
SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::descend_for_insert(const KeyT& k, Path* p) {
  if (!descend_path(k, p)) return false;
  for (size_t level = 0; level < p->height; ++level) {
    if (inner_count(p->nodes[level]) >= kInnerCap) {
      split_inner(p, level);
      return false;
    }
  }
  return true;
}

// Locks p->nodes[level] and its parent at the versions seen on the way down. Fails (locking
// nothing) if either changed or the parent has no room for one more separator.
SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::lock_parent_and_child(Path* p, size_t level) {
  Node* parent = level > 0 ? p->nodes[level - 1] : nullptr;
  Node* node = p->nodes[level];
  if (parent != nullptr && !try_lock(parent, p->versions[level - 1])) return false;
  if (!try_lock(node, p->versions[level])) {
    if (parent != nullptr) unlock_unchanged(parent);
    return false;
  }
  const bool ok = parent != nullptr ? inner_count(parent) < kInnerCap
                                    : root_.load(std::memory_order_acquire) == node;
  if (!ok) {
    unlock_unchanged(node);
    if (parent != nullptr) unlock_unchanged(parent);
  }
  return ok;
}

// Publishes `right` (locked, split off p->nodes[level] at separator sep) in the parent, or
// under a new root. REQUIRES: the node and its parent (if any) are locked by the caller.
SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::link_sibling(Path* p, size_t level, const KeyT& sep, Node* right) {
  if (level > 0) {
    inner_insert_at(static_cast<Inner*>(p->nodes[level - 1]), p->idx[level - 1], sep, right);
    return;
  }
  Inner* root = new_inner();
  store_key(root->keys[0], sep);
  root->children[0] = p->nodes[0];
  root->children[1] = right;
  root->count = 1;
  root_.store(root, std::memory_order_release);
}

SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::split_inner(Path* p, size_t level) {
  if (!lock_parent_and_child(p, level)) return;
  Inner* in = static_cast<Inner*>(p->nodes[level]);
  const size_t n = inner_count(in);
  const size_t mid = n / 2;
  const size_t rn = n - mid - 1;  // the separator at mid moves up
  Inner* right = new_inner();
  right->version.store(btree_detail::kLockedBit, std::memory_order_relaxed);
  for (size_t i = 0; i < rn; ++i) store_key(right->keys[i], load_key(in->keys[mid + 1 + i]));
  for (size_t i = 0; i <= rn; ++i) {
    btree_detail::st(right->children[i], btree_detail::ld(in->children[mid + 1 + i]));
  }
  btree_detail::st(right->count, static_cast<uint16_t>(rn));
  const KeyT sep = load_key(in->keys[mid]);
  btree_detail::st(in->count, static_cast<uint16_t>(mid));
  link_sibling(p, level, sep, right);
  unlock(in);
  if (level > 0) unlock(p->nodes[level - 1]);
  unlock(right);
}

// Splits the full leaf at the end of p. Appends (insert_pos == n) keep most entries on the
// left and descending inserts most on the right, so sequential loads fill leaves ~7/8.
SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::split_leaf(Path* p, size_t insert_pos) {
  const size_t level = p->height;
  if (!lock_parent_and_child(p, level)) return;
  Leaf* leaf = static_cast<Leaf*>(p->nodes[level]);
  const size_t n = leaf_count(leaf);
  const size_t skew = n / 8 > 0 ? n / 8 : 1;
  const size_t left_n = insert_pos >= n ? n - skew : insert_pos == 0 ? skew : n / 2;
  Leaf* right = new_leaf();
  right->version.store(btree_detail::kLockedBit, std::memory_order_relaxed);
  for (size_t i = left_n; i < n; ++i) {
    store_key(right->keys[i - left_n], load_key(leaf->keys[i]));
    btree_detail::st(right->values[i - left_n], btree_detail::ld(leaf->values[i]));
  }
  const KeyT sep = load_key(leaf->keys[left_n]);
  right->count = static_cast<uint16_t>(n - left_n);
  right->low = sep;
  right->high = load_key(leaf->high);
  right->high_inf = leaf->high_inf;
  right->prev = leaf;
  right->next = leaf->next;
  if (right->next != nullptr) btree_detail::st(right->next->prev, right);  // we lock its pred
  btree_detail::st(leaf->next, right);
  store_key(leaf->high, sep);
  btree_detail::st(leaf->high_inf, uint8_t{0});
  btree_detail::st(leaf->count, static_cast<uint16_t>(left_n));
  link_sibling(p, level, sep, right);
  unlock(leaf);
  if (level > 0) unlock(p->nodes[level - 1]);
  unlock(right);
}

SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::leaf_insert_at(Leaf* leaf, size_t pos, size_t n, const KeyT& k, void* v) {
  for (size_t i = n; i > pos; --i) {
    store_key(leaf->keys[i], load_key(leaf->keys[i - 1]));
    btree_detail::st(leaf->values[i], btree_detail::ld(leaf->values[i - 1]));
  }
  store_key(leaf->keys[pos], k);
  btree_detail::st(leaf->values[pos], v);
  btree_detail::st(leaf->count, static_cast<uint16_t>(n + 1));
}

// Inserts separator sep after child slot left_idx, with `right` as the new child to its right.
SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::inner_insert_at(Inner* in, size_t left_idx, const KeyT& sep, Node* right) {
  const size_t n = inner_count(in);
  SHOAL_DCHECK(n < kInnerCap);
  for (size_t i = n; i > left_idx; --i) store_key(in->keys[i], load_key(in->keys[i - 1]));
  store_key(in->keys[left_idx], sep);
  for (size_t i = n + 1; i > left_idx + 1; --i) {
    btree_detail::st(in->children[i], btree_detail::ld(in->children[i - 1]));
  }
  btree_detail::st(in->children[left_idx + 1], right);
  btree_detail::st(in->count, static_cast<uint16_t>(n + 1));
}

// --- update / remove ---

SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::update(const KeyT& k, void* v) {
  return replace_value(k, nullptr, v, false, nullptr, nullptr);
}

SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::compare_and_replace(const KeyT& k, const void* expected, void* v,
                                      bool bump_version, NodeRef* before, uint64_t* after_version) {
  SHOAL_ASSERT(expected != nullptr, "%s", "compare_and_replace needs an expected value");
  return replace_value(k, expected, v, bump_version, before, after_version);
}

SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::replace_value(const KeyT& k, const void* expected, void* v, bool bump_version,
                                NodeRef* before, uint64_t* after_version) {
  SHOAL_ASSERT(v != nullptr, "%s", "btree values must not be null");
  for (uint64_t attempt = 0;; ++attempt) {
    btree_detail::backoff(attempt);
    uint64_t lv;
    Leaf* leaf = const_cast<Leaf*>(find_leaf(k, &lv));
    const size_t n = leaf_count(leaf);
    const size_t pos = leaf_lower_bound(leaf, n, k);
    const bool found = pos < n && load_key(leaf->keys[pos]) == k &&
                       (expected == nullptr || btree_detail::ld(leaf->values[pos]) == expected);
    if (!found) {
      if (leaf->version.load(std::memory_order_acquire) == lv) return false;
      continue;
    }
    // The lock keeps a concurrent split from copying the old value after we stored the new.
    if (!try_lock(leaf, lv)) continue;
    btree_detail::st(leaf->values[pos], v);
    if (!bump_version) {
      unlock_unchanged(leaf);
      return true;
    }
    const uint64_t after = unlock(leaf);
    if (before != nullptr) *before = NodeRef{leaf, lv};
    if (after_version != nullptr) *after_version = after;
    return true;
  }
}

SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::remove(const KeyT& k, const void* expected) {
  for (uint64_t attempt = 0;; ++attempt) {
    btree_detail::backoff(attempt);
    uint64_t lv;
    Leaf* leaf = const_cast<Leaf*>(find_leaf(k, &lv));
    const size_t n = leaf_count(leaf);
    const size_t pos = leaf_lower_bound(leaf, n, k);
    const bool match = pos < n && load_key(leaf->keys[pos]) == k &&
                       btree_detail::ld(leaf->values[pos]) == expected;
    if (!match) {
      if (leaf->version.load(std::memory_order_acquire) == lv) return false;
      continue;
    }
    if (!try_lock(leaf, lv)) continue;
    for (size_t i = pos; i + 1 < n; ++i) {
      store_key(leaf->keys[i], load_key(leaf->keys[i + 1]));
      btree_detail::st(leaf->values[i], btree_detail::ld(leaf->values[i + 1]));
    }
    btree_detail::st(leaf->count, static_cast<uint16_t>(n - 1));
    unlock(leaf);
    add_size(-1);
    if (n == 1) try_unlink_empty_leaf(k);
    return true;
  }
}

// --- unlinking empty leaves ---

// A few attempts only: an empty leaf left in place is correct, just a little slower to scan,
// and it is retried when another key in it is removed.
SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::try_unlink_empty_leaf(const KeyT& k) {
  constexpr int kAttempts = 4;
  Path p;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    btree_detail::backoff(static_cast<uint64_t>(attempt));
    if (!descend_path(k, &p)) continue;
    if (leaf_count(p.nodes[p.height]) != 0) return;
    // The anchor is the deepest inner node with two or more children; the nodes below it on
    // the path lead only to the empty leaf and go away with it.
    size_t anchor = p.height;
    do {
      if (anchor == 0) return;  // the tree's only leaf stays
      --anchor;
    } while (inner_count(p.nodes[anchor]) == 0);
    if (unlink_empty_leaf(&p, anchor) == UnlinkResult::kDone) return;
  }
}

// Removes the chain p->nodes[anchor+1 .. height] from the anchor and gives the leaf's range
// to its left neighbor (or, if the chain is the anchor's first child, to its right neighbor).
SHOAL_BTREE_TEMPLATE
typename SHOAL_BTREE::UnlinkResult SHOAL_BTREE::unlink_empty_leaf(Path* p, size_t anchor) {
  const size_t h = p->height;
  for (size_t i = anchor; i <= h; ++i) {
    if (!try_lock(p->nodes[i], p->versions[i])) {
      for (size_t j = anchor; j < i; ++j) unlock_unchanged(p->nodes[j]);
      return UnlinkResult::kRetry;
    }
  }
  Inner* a = static_cast<Inner*>(p->nodes[anchor]);
  Leaf* e = static_cast<Leaf*>(p->nodes[h]);
  bool shape_ok = inner_count(a) > 0 && leaf_count(e) == 0;
  for (size_t i = anchor + 1; i < h; ++i) shape_ok = shape_ok && inner_count(p->nodes[i]) == 0;
  const size_t idx = p->idx[anchor];
  Leaf* neighbors[2] = {nullptr, nullptr};
  if (!shape_ok || !(idx > 0 ? absorb_into_pred(e, neighbors) : absorb_into_succ(e, neighbors))) {
    for (size_t i = anchor; i <= h; ++i) unlock_unchanged(p->nodes[i]);
    return shape_ok ? UnlinkResult::kRetry : UnlinkResult::kDone;
  }
  inner_erase(a, idx > 0 ? idx - 1 : 0, idx);
  for (size_t i = h; i > anchor; --i) {
    unlock_obsolete(p->nodes[i]);
    retire_node(p->nodes[i]);
  }
  unlock(a);
  for (Leaf* l : neighbors) {
    if (l != nullptr) unlock(l);
  }
  return UnlinkResult::kDone;
}

// Extends e's predecessor over e's range and unlinks e from the leaf chain; leaves the
// predecessor locked in locked[0]. REQUIRES: e is locked. Fails without changes.
SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::absorb_into_pred(Leaf* e, Leaf* locked[2]) {
  Leaf* pred = btree_detail::ld(e->prev);
  if (pred == nullptr || !try_lock_current(pred)) return false;
  if (btree_detail::ld(pred->next) != e) {
    unlock_unchanged(pred);
    return false;
  }
  Leaf* succ = btree_detail::ld(e->next);
  store_key(pred->high, load_key(e->high));
  btree_detail::st(pred->high_inf, btree_detail::ld(e->high_inf));
  btree_detail::st(pred->next, succ);
  if (succ != nullptr) btree_detail::st(succ->prev, pred);  // we lock e, succ's predecessor
  locked[0] = pred;
  return true;
}

// Extends e's successor down over e's range and unlinks e from the leaf chain; leaves the
// successor and predecessor locked in locked[]. REQUIRES: e is locked. Fails without changes.
SHOAL_BTREE_TEMPLATE
bool SHOAL_BTREE::absorb_into_succ(Leaf* e, Leaf* locked[2]) {
  Leaf* succ = btree_detail::ld(e->next);
  if (succ == nullptr || !try_lock_current(succ)) return false;
  Leaf* pred = btree_detail::ld(e->prev);
  if (pred != nullptr && !try_lock_current(pred)) {
    unlock_unchanged(succ);
    return false;
  }
  if (btree_detail::ld(succ->prev) != e || (pred != nullptr && btree_detail::ld(pred->next) != e)) {
    unlock_unchanged(succ);
    if (pred != nullptr) unlock_unchanged(pred);
    return false;
  }
  store_key(succ->low, load_key(e->low));
  btree_detail::st(succ->prev, pred);
  if (pred != nullptr) btree_detail::st(pred->next, succ);
  locked[0] = succ;
  locked[1] = pred;
  return true;
}

SHOAL_BTREE_TEMPLATE
void SHOAL_BTREE::inner_erase(Inner* in, size_t key_idx, size_t child_idx) {
  const size_t n = inner_count(in);
  SHOAL_DCHECK(n > 0);
  for (size_t i = key_idx; i + 1 < n; ++i) store_key(in->keys[i], load_key(in->keys[i + 1]));
  for (size_t i = child_idx; i < n; ++i) {
    btree_detail::st(in->children[i], btree_detail::ld(in->children[i + 1]));
  }
  btree_detail::st(in->count, static_cast<uint16_t>(n - 1));
}

#undef SHOAL_BTREE
#undef SHOAL_BTREE_TEMPLATE

}  // namespace shoal
