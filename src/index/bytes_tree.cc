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

BytesTree::Suffix* BytesTree::new_suffix(std::string_view bytes, void* value) {
  SHOAL_ASSERT(bytes.size() <= kKeyBytesMax, "bytes_tree: suffix of %zu bytes", bytes.size());
  void* mem = ::operator new(sizeof(Suffix) + bytes.size());
  auto* s = new (mem) Suffix{value, static_cast<uint32_t>(bytes.size())};
  std::memcpy(s + 1, bytes.data(), bytes.size());
  return s;
}

// Suffixes are trivially destructible.
void BytesTree::free_suffix(void* p) {
  ::operator delete(p);
}

void* BytesTree::entry_for(std::string_view rest, void* value) {
  return rest.size() > 8 ? new_suffix(after_slice(rest), value) : value;
}

BytesTree::Layer* BytesTree::build_pair(std::string_view a, void* va, std::string_view b,
                                        void* vb) {
  SHOAL_ASSERT(a != b && !a.empty() && !b.empty(), "%s", "bytes_tree: pair of equal keys");
  Layer* top = new Layer;
  Layer* layer = top;
  for (;; a.remove_prefix(8), b.remove_prefix(8)) {
    const Key<2> ka = layer_key(a);
    const Key<2> kb = layer_key(b);
    if (ka != kb) {
      layer->insert_if_absent(ka, entry_for(a, va), nullptr, nullptr);
      layer->insert_if_absent(kb, entry_for(b, vb), nullptr, nullptr);
      return top;
    }
    SHOAL_ASSERT(ka.w[1] == kLonger, "%s", "bytes_tree: equal layer keys that end");
    Layer* next = new Layer;
    layer->insert_if_absent(ka, tag_layer(next), nullptr, nullptr);
    layer = next;
  }
}

// Iterative, so that a chain of 1,024 layers takes no deep recursion.
void BytesTree::free_contents(Layer* top) {
  std::vector<Layer*> todo{top};
  while (!todo.empty()) {
    Layer* layer = todo.back();
    todo.pop_back();
    layer->scan(
        Key<2>::min(), Key<2>::max(),
        [&](const Key<2>& k, void* e) {
          if (k.w[1] != kLonger) return true;
          if (is_layer(e)) {
            todo.push_back(as_layer(e));
          } else {
            free_suffix(e);
          }
          return true;
        },
        [](NodeRef) {});
    if (layer != top) delete layer;
  }
}

BytesTree::Layer* BytesTree::descend(const Layer* layer, std::string_view* rest, Key<2>* lk,
                                     void** entry, NodeRef* ref) const {
  for (;; rest->remove_prefix(8)) {
    *lk = layer_key(*rest);
    *entry = nullptr;
    if (lk->w[1] != kLonger) break;
    void* e = layer->get(*lk, ref);
    if (e == nullptr || !is_layer(e)) {
      *entry = e;
      break;
    }
    layer = as_layer(e);  // sub-layers are never unlinked: no need to re-check the parent
  }
  return const_cast<Layer*>(layer);
}

BytesTree::Result BytesTree::get(std::string_view key, void** value, NodeRef* leaf_out) const {
  if (!valid_key(key)) return Result::kBadKey;
  std::string_view rest = key;
  Key<2> lk;
  void* e;
  const Layer* layer = descend(&root_, &rest, &lk, &e, leaf_out);
  if (lk.w[1] != kLonger) e = layer->get(lk, leaf_out);
  if (e != nullptr && lk.w[1] == kLonger) {
    const Suffix* s = as_suffix(e);
    e = s->bytes() == after_slice(rest) ? s->value : nullptr;
  }
  if (e == nullptr) return Result::kNotFound;
  if (value != nullptr) *value = e;
  return Result::kOk;
}

bool BytesTree::swap_in_pair(Layer* layer, const Key<2>& lk, const Suffix* s, std::string_view tail,
                             void* v, NodeRef* before, uint64_t* after_version) {
  Layer* sub = build_pair(s->bytes(), s->value, tail, v);
  if (layer->compare_and_replace(lk, s, tag_layer(sub), /*bump_version=*/true, before,
                                 after_version)) {
    ebr::retire(const_cast<Suffix*>(s), &free_suffix);
    return true;
  }
  free_contents(sub);  // never published
  delete sub;
  return false;
}

// Runs step(Spot&) -> std::optional<Result> at key's entry until it returns a result;
// nullopt means the entry changed under the step: descend again from the same layer (the
// layers above it never change).
template <class Step>
BytesTree::Result BytesTree::at_entry(std::string_view key, NodeRef* ref, Step&& step) {
  if (!valid_key(key)) return Result::kBadKey;
  Spot spot{&root_, key, Key<2>{}, nullptr};
  for (uint64_t attempt = 0;; ++attempt) {
    btree_detail::backoff(attempt);
    spot.layer = descend(spot.layer, &spot.rest, &spot.lk, &spot.entry, ref);
    if (const std::optional<Result> r = step(spot)) return *r;
  }
}

BytesTree::Result BytesTree::insert_if_absent(std::string_view key, void* v, void** existing,
                                              NodeRef* before, uint64_t* after_version) {
  SHOAL_ASSERT(v != nullptr, "%s", "bytes_tree values must not be null");
  NodeRef seen{};
  auto step = [&](Spot& at) -> std::optional<Result> {
    void* e = at.entry;
    const std::string_view tail = after_slice(at.rest);
    if (at.lk.w[1] != kLonger) {
      e = at.layer->insert_if_absent(at.lk, v, before, after_version);
    } else if (e == nullptr) {
      Suffix* mine = new_suffix(tail, v);
      if (at.layer->insert_if_absent(at.lk, mine, before, after_version) != nullptr) {
        free_suffix(mine);  // never published
        return std::nullopt;
      }
    } else if (as_suffix(e)->bytes() == tail) {
      if (before != nullptr) *before = seen;
      if (after_version != nullptr) *after_version = seen.version;
      e = as_suffix(e)->value;
    } else if (!swap_in_pair(at.layer, at.lk, as_suffix(e), tail, v, before, after_version)) {
      return std::nullopt;
    } else {
      e = nullptr;
    }
    if (e != nullptr) {
      if (existing != nullptr) *existing = e;
      return Result::kExists;
    }
    size_.add(1);
    return Result::kOk;
  };
  return at_entry(key, &seen, step);
}

BytesTree::Result BytesTree::update(std::string_view key, void* v) {
  SHOAL_ASSERT(v != nullptr, "%s", "bytes_tree values must not be null");
  return at_entry(key, nullptr, [&](Spot& at) -> std::optional<Result> {
    if (at.lk.w[1] != kLonger) return at.layer->update(at.lk, v) ? Result::kOk : Result::kNotFound;
    const std::string_view tail = after_slice(at.rest);
    if (at.entry == nullptr || as_suffix(at.entry)->bytes() != tail) return Result::kNotFound;
    // Suffixes are immutable, so that remove(key, expected) compares and removes in one step.
    Suffix* fresh = new_suffix(tail, v);
    if (!at.layer->compare_and_replace(at.lk, at.entry, fresh, /*bump_version=*/false, nullptr,
                                       nullptr)) {
      free_suffix(fresh);  // never published
      return std::nullopt;
    }
    ebr::retire(at.entry, &free_suffix);
    return Result::kOk;
  });
}

BytesTree::Result BytesTree::remove(std::string_view key, const void* expected) {
  return at_entry(key, nullptr, [&](Spot& at) -> std::optional<Result> {
    if (at.lk.w[1] != kLonger) {
      if (!at.layer->remove(at.lk, expected)) return Result::kNotFound;
    } else {
      const Suffix* s = at.entry == nullptr ? nullptr : as_suffix(at.entry);
      if (s == nullptr || s->bytes() != after_slice(at.rest) || s->value != expected) {
        return Result::kNotFound;
      }
      if (!at.layer->remove(at.lk, s)) return std::nullopt;  // changed meanwhile
      ebr::retire(at.entry, &free_suffix);
    }
    size_.add(-1);
    return Result::kOk;
  });
}

}  // namespace shoal
