#include "src/index/bytes_tree.h"

#include <new>
#include <optional>
#include <vector>

#include "src/base/assert.h"
#include "src/base/ebr.h"

namespace shoal {

BytesTree::~BytesTree() {
  free_contents(&root_);
}

size_t BytesTree::size() const {
  const int64_t total = size_.sum();
  return total > 0 ? static_cast<size_t>(total) : 0;
}

// --- entries ---

const BytesTree::Item* BytesTree::Slot::find(uint64_t cls) const {
  for (size_t i = 0; i < n; ++i) {
    if (items[i].cls == cls) return &items[i];
  }
  return nullptr;
}

void BytesTree::Slot::put(Item item) {
  size_t i = 0;
  while (i < n && items[i].cls < item.cls) ++i;
  if (i == n || items[i].cls != item.cls) {
    SHOAL_ASSERT(n < kClasses, "bytes_tree: slot of %zu classes", n);
    for (size_t j = n; j > i; --j) items[j] = items[j - 1];
    ++n;
  }
  items[i] = item;
}

void BytesTree::Slot::erase(uint64_t cls) {
  size_t i = 0;
  while (i < n && items[i].cls != cls) ++i;
  if (i == n) return;
  for (; i + 1 < n; ++i) items[i] = items[i + 1];
  --n;
}

void BytesTree::decode(void* e, Slot* slot) {
  switch (tag_of(e)) {
    case kValue:
      slot->n = 1;
      slot->items[0] = Item{8, e};
      return;
    case kSuffix:
    case kLayer:
      slot->n = 1;
      slot->items[0] = Item{kLonger, e};
      return;
    case kBucket: {
      const Bucket* b = untag<Bucket>(e);
      SHOAL_ASSERT(b->n >= 1 && b->n <= kClasses, "bytes_tree: bucket of %llu",
                   static_cast<unsigned long long>(b->n));
      slot->n = b->n;
      std::memcpy(slot->items, b->items(), b->n * sizeof(Item));
      return;
    }
  }
}

void* BytesTree::encode(const Slot& slot) {
  if (slot.n == 0) return nullptr;
  if (slot.n == 1 && (slot.items[0].cls == 8 || slot.items[0].cls == kLonger)) {
    return slot.items[0].e;  // kValue, or the item's own kSuffix / kLayer tag
  }
  void* mem = ::operator new(sizeof(Bucket) + slot.n * sizeof(Item));
  auto* b = new (mem) Bucket{slot.n};
  std::memcpy(b + 1, slot.items, slot.n * sizeof(Item));
  return tag(b, kBucket);
}

void* BytesTree::new_suffix(std::string_view bytes, void* value) {
  SHOAL_ASSERT(bytes.size() <= kKeyBytesMax, "bytes_tree: suffix of %zu bytes", bytes.size());
  void* mem = ::operator new(sizeof(Suffix) + bytes.size());
  auto* s = new (mem) Suffix{value, static_cast<uint32_t>(bytes.size())};
  std::memcpy(s + 1, bytes.data(), bytes.size());
  return tag(s, kSuffix);
}

// Suffixes and buckets are trivially destructible; these take untagged pointers (EBR).
void BytesTree::free_suffix(void* p) {
  ::operator delete(p);
}
void BytesTree::free_bucket(void* p) {
  ::operator delete(p);
}

void BytesTree::free_item(void* e) {
  if (tag_of(e) == kSuffix) {
    free_suffix(untag<Suffix>(e));
  } else if (tag_of(e) == kLayer) {
    Layer* layer = untag<Layer>(e);
    free_contents(layer);
    delete layer;
  }
}

static_assert(alignof(std::max_align_t) >= 4, "entries tag the low two bits");

BytesTree::Item BytesTree::item_for(const Place& p, void* value) {
  return Item{p.cls, p.cls == kLonger ? new_suffix(p.tail, value) : value};
}

void* BytesTree::build_pair(std::string_view a, void* va, std::string_view b, void* vb) {
  SHOAL_ASSERT(a != b && !a.empty() && !b.empty(), "%s", "bytes_tree: pair of equal keys");
  Layer* top = new Layer;
  Layer* layer = top;
  for (;;) {
    const Place pa = place_of(a);
    const Place pb = place_of(b);
    if (pa.slice == pb.slice && pa.cls == kLonger && pb.cls == kLonger) {
      Layer* next = new Layer;  // both go on past the same slice: one more layer
      layer->insert_if_absent(Key1{{pa.slice}}, tag(next, kLayer), nullptr, nullptr);
      layer = next;
      a = pa.tail;
      b = pb.tail;
      continue;
    }
    SHOAL_ASSERT(pa.slice != pb.slice || pa.cls != pb.cls, "%s", "bytes_tree: equal keys");
    Slot slot;
    slot.put(item_for(pa, va));
    if (pa.slice == pb.slice) {
      slot.put(item_for(pb, vb));
    } else {
      Slot other;
      other.put(item_for(pb, vb));
      layer->insert_if_absent(Key1{{pb.slice}}, encode(other), nullptr, nullptr);
    }
    layer->insert_if_absent(Key1{{pa.slice}}, encode(slot), nullptr, nullptr);
    return tag(top, kLayer);
  }
}

// Iterative, so that a chain of 1,024 layers takes no deep recursion.
void BytesTree::free_contents(Layer* top) {
  std::vector<Layer*> todo{top};
  while (!todo.empty()) {
    Layer* layer = todo.back();
    todo.pop_back();
    auto free_entry = [&](const Key1&, void* e) {
      Slot slot;
      decode(e, &slot);
      if (tag_of(e) == kBucket) free_bucket(untag<Bucket>(e));
      const Item* longer = slot.find(kLonger);
      if (longer != nullptr && tag_of(longer->e) == kLayer) todo.push_back(untag<Layer>(longer->e));
      if (longer != nullptr && tag_of(longer->e) == kSuffix) free_suffix(untag<Suffix>(longer->e));
      return true;
    };
    layer->scan(Key1::min(), Key1::max(), free_entry, [](NodeRef) {});
    if (layer != top) delete layer;
  }
}

bool BytesTree::swap_entry(Layer* layer, uint64_t slice, void* old_e, const Slot& old_slot,
                           const Slot& new_slot, bool bump, NodeRef* before,
                           uint64_t* after_version) {
  const Item* old_long = old_slot.find(kLonger);
  const Item* new_long = new_slot.find(kLonger);
  // Only the kLonger item owns an object; a sub-layer stays in its entry for good.
  const bool long_changed =
      old_long != nullptr && (new_long == nullptr || new_long->e != old_long->e);
  const bool long_added =
      new_long != nullptr && (old_long == nullptr || new_long->e != old_long->e);
  SHOAL_ASSERT(!long_changed || tag_of(old_long->e) == kSuffix, "%s", "bytes_tree: layer dropped");
  void* fresh = encode(new_slot);
  const Key1 k{{slice}};
  bool ok;
  if (old_e == nullptr) {
    ok = layer->insert_if_absent(k, fresh, before, after_version) == nullptr;
  } else if (fresh == nullptr) {
    ok = layer->remove(k, old_e);
  } else {
    ok = layer->compare_and_replace(k, old_e, fresh, bump, before, after_version);
  }
  if (ok) {
    if (old_e != nullptr && tag_of(old_e) == kBucket) {
      ebr::retire(untag<Bucket>(old_e), &free_bucket);
    }
    if (long_changed) ebr::retire(untag<Suffix>(old_long->e), &free_suffix);
  } else {
    if (fresh != nullptr && tag_of(fresh) == kBucket) free_bucket(untag<Bucket>(fresh));
    if (long_added) free_item(new_long->e);  // never published
  }
  return ok;
}

// Descends through sub-layers to the layer holding key's entry, reads the entry (for an
// insert of a class-8 key: tries to insert it first, the one-descent path of fixed-size
// keys), and runs step(layer, place, entry, ref) -> std::optional<Result> on it; nullopt
// means the entry changed under the step: read it again in the same layer (sub-layers stay).
template <class Step>
BytesTree::Result BytesTree::at_entry(std::string_view key, void* insert_value, NodeRef* before,
                                      uint64_t* after_version, Step&& step) {
  if (!valid_key(key)) return Result::kBadKey;
  Layer* layer = &root_;
  std::string_view rest = key;
  for (uint64_t failures = 0;;) {
    const Place p = place_of(rest);
    const Key1 k{{p.slice}};
    NodeRef ref{};
    void* e = nullptr;
    if (insert_value != nullptr && p.cls == 8) {
      e = layer->insert_if_absent(k, insert_value, &ref, after_version);
      if (e == nullptr) {
        if (before != nullptr) *before = ref;
        size_.add(1);
        return Result::kOk;
      }
    } else {
      e = layer->get(k, &ref);
    }
    if (p.cls == kLonger && e != nullptr) {
      Slot slot;
      decode(e, &slot);
      const Item* longer = slot.find(kLonger);
      if (longer != nullptr && tag_of(longer->e) == kLayer) {
        layer = untag<Layer>(longer->e);
        rest = p.tail;
        continue;
      }
    }
    if (const std::optional<Result> r = step(layer, p, e, ref)) return *r;
    btree_detail::backoff(++failures);
  }
}

BytesTree::Result BytesTree::get(std::string_view key, void** value, NodeRef* leaf_out) const {
  auto step = [&](Layer*, const Place& p, void* e, const NodeRef& ref) -> std::optional<Result> {
    if (leaf_out != nullptr) *leaf_out = ref;
    if (e == nullptr) return Result::kNotFound;
    Slot slot;
    decode(e, &slot);
    const Item* item = slot.find(p.cls);
    if (item == nullptr) return Result::kNotFound;
    void* v = item->e;
    if (p.cls == kLonger) {
      const Suffix* s = untag<Suffix>(item->e);  // a sub-layer was descended into
      if (s->bytes() != p.tail) return Result::kNotFound;
      v = s->value;
    }
    if (value != nullptr) *value = v;
    return Result::kOk;
  };
  // at_entry changes nothing unless given a value to insert.
  return const_cast<BytesTree*>(this)->at_entry(key, nullptr, nullptr, nullptr, step);
}

BytesTree::Result BytesTree::insert_if_absent(std::string_view key, void* v, void** existing,
                                              NodeRef* before, uint64_t* after_version) {
  SHOAL_ASSERT(v != nullptr && tag_of(v) == kValue, "bytes_tree: value %p", v);
  auto step = [&](Layer* layer, const Place& p, void* e,
                  const NodeRef& ref) -> std::optional<Result> {
    Slot old_slot;
    if (e != nullptr) decode(e, &old_slot);
    const Item* item = old_slot.find(p.cls);
    void* found = item == nullptr ? nullptr : item->e;
    if (found != nullptr && p.cls == kLonger) {
      const Suffix* s = untag<Suffix>(found);
      found = s->bytes() == p.tail ? s->value : nullptr;
    }
    if (found != nullptr) {
      if (before != nullptr) *before = ref;
      if (after_version != nullptr) *after_version = ref.version;
      if (existing != nullptr) *existing = found;
      return Result::kExists;
    }
    Slot new_slot = old_slot;
    if (item != nullptr) {  // a Suffix of another key: both go into a new sub-layer
      const Suffix* s = untag<Suffix>(item->e);
      new_slot.put(Item{kLonger, build_pair(s->bytes(), s->value, p.tail, v)});
    } else {
      new_slot.put(item_for(p, v));
    }
    if (!swap_entry(layer, p.slice, e, old_slot, new_slot, /*bump=*/true, before, after_version)) {
      return std::nullopt;
    }
    size_.add(1);
    return Result::kOk;
  };
  return at_entry(key, v, before, after_version, step);
}

BytesTree::Result BytesTree::update(std::string_view key, void* v) {
  SHOAL_ASSERT(v != nullptr && tag_of(v) == kValue, "bytes_tree: value %p", v);
  auto step = [&](Layer* layer, const Place& p, void* e, const NodeRef&) -> std::optional<Result> {
    if (e == nullptr) return Result::kNotFound;
    Slot old_slot;
    decode(e, &old_slot);
    const Item* item = old_slot.find(p.cls);
    if (item == nullptr) return Result::kNotFound;
    if (p.cls == kLonger && untag<Suffix>(item->e)->bytes() != p.tail) return Result::kNotFound;
    Slot new_slot = old_slot;
    new_slot.put(item_for(p, v));
    const bool ok =
        swap_entry(layer, p.slice, e, old_slot, new_slot, /*bump=*/false, nullptr, nullptr);
    return ok ? std::optional<Result>(Result::kOk) : std::nullopt;
  };
  return at_entry(key, nullptr, nullptr, nullptr, step);
}

BytesTree::Result BytesTree::remove(std::string_view key, const void* expected) {
  auto step = [&](Layer* layer, const Place& p, void* e, const NodeRef&) -> std::optional<Result> {
    if (e == nullptr) return Result::kNotFound;
    Slot old_slot;
    decode(e, &old_slot);
    const Item* item = old_slot.find(p.cls);
    if (item == nullptr) return Result::kNotFound;
    const void* v = item->e;
    if (p.cls == kLonger) {
      const Suffix* s = untag<Suffix>(item->e);
      if (s->bytes() != p.tail) return Result::kNotFound;
      v = s->value;
    }
    if (v != expected) return Result::kNotFound;
    Slot new_slot = old_slot;
    new_slot.erase(p.cls);
    if (!swap_entry(layer, p.slice, e, old_slot, new_slot, /*bump=*/true, nullptr, nullptr)) {
      return std::nullopt;
    }
    size_.add(-1);
    return Result::kOk;
  };
  return at_entry(key, nullptr, nullptr, nullptr, step);
}

}  // namespace shoal
