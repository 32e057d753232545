#include "src/cluster/config_manager.h"

#include <algorithm>
#include <set>

namespace shoal::cluster {

Result<CasResult> ConfigManager::cas(std::string_view key, int64_t expected_mod_revision,
                                     std::string_view value, int64_t lease) {
  auto r = txn({TxnCompare{std::string(key), expected_mod_revision}},
               {TxnPut{std::string(key), std::string(value), lease}});
  if (!r.ok()) return r.status();
  CasResult out;
  out.won = r->succeeded;
  if (out.won) {
    out.mod_revision = r->revision;
  } else if (!r->current.empty()) {
    out.current = std::move(r->current[0]);
  }
  return out;
}

Result<Change> ConfigManager::wait_for_change(std::string_view key, int64_t after_revision,
                                              uint64_t timeout_ms) {
  Env& clock = env();
  const uint64_t deadline_ns = clock.now_ns() + timeout_ms * 1'000'000ULL;
  const uint64_t poll_ns = std::max<uint64_t>(poll_interval_ms(), 1) * 1'000'000ULL;
  // Bounded: every round sleeps poll_ns until the deadline passes.
  for (;;) {
    auto cur = get(key);
    if (!cur.ok()) return cur.status();
    const std::optional<Versioned>& v = *cur;
    const bool changed = v ? v->mod_revision > after_revision : after_revision > 0;
    if (changed) return Change{true, std::move(*cur)};
    const uint64_t now_ns = clock.now_ns();
    if (now_ns >= deadline_ns) return Change{false, std::move(*cur)};
    clock.sleep_ns(std::min(poll_ns, deadline_ns - now_ns));
  }
}

std::string prefix_range_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last != 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return end;
}

InMemoryConfigManager::InMemoryConfigManager(Env& env, uint64_t poll_interval_ms)
    : env_(env), poll_interval_ms_(poll_interval_ms) {
  SHOAL_ASSERT(poll_interval_ms > 0, "InMemoryConfigManager: poll_interval_ms must be > 0");
}

void InMemoryConfigManager::drop_lease_locked(int64_t lease) {
  leases_.erase(lease);
  bool removed = false;
  for (auto it = kv_.begin(); it != kv_.end();) {
    if (it->second.lease == lease) {
      it = kv_.erase(it);
      removed = true;
    } else {
      ++it;
    }
  }
  if (removed) ++revision_;
}

void InMemoryConfigManager::expire_leases_locked() {
  const uint64_t now_ns = env_.now_ns();
  std::vector<int64_t> expired;
  for (const auto& [id, state] : leases_) {
    if (state.expires_ns <= now_ns) expired.push_back(id);
  }
  for (int64_t id : expired) drop_lease_locked(id);
}

std::optional<Versioned> InMemoryConfigManager::lookup_locked(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

Result<std::optional<Versioned>> InMemoryConfigManager::get(std::string_view key) {
  std::lock_guard lock(mu_);
  expire_leases_locked();
  return lookup_locked(std::string(key));
}

Result<std::vector<KeyValue>> InMemoryConfigManager::range(std::string_view prefix) {
  SHOAL_ASSERT(!prefix.empty(), "range: empty prefix");
  std::lock_guard lock(mu_);
  expire_leases_locked();
  std::vector<KeyValue> out;
  for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) {
    out.push_back(KeyValue{it->first, it->second});
  }
  return out;
}

Result<int64_t> InMemoryConfigManager::put(std::string_view key, std::string_view value,
                                           int64_t lease) {
  auto r = txn({}, {TxnPut{std::string(key), std::string(value), lease}});
  if (!r.ok()) return r.status();
  return r->revision;
}

Result<bool> InMemoryConfigManager::remove(std::string_view key) {
  std::lock_guard lock(mu_);
  expire_leases_locked();
  auto it = kv_.find(key);
  if (it == kv_.end()) return false;
  kv_.erase(it);
  ++revision_;
  return true;
}

Result<TxnResult> InMemoryConfigManager::txn(const std::vector<TxnCompare>& compares,
                                             const std::vector<TxnPut>& puts) {
  std::lock_guard lock(mu_);
  expire_leases_locked();
  TxnResult out;
  bool hold = true;
  for (const TxnCompare& c : compares) {
    auto it = kv_.find(c.key);
    const int64_t have = it == kv_.end() ? 0 : it->second.mod_revision;
    if (have != c.expected_mod_revision) hold = false;
  }
  if (!hold) {
    for (const TxnCompare& c : compares) out.current.push_back(lookup_locked(c.key));
    out.revision = revision_;
    return out;
  }
  std::set<std::string_view> keys;
  for (const TxnPut& p : puts) {
    SHOAL_ASSERT(keys.insert(p.key).second, "txn: key '%s' put twice", p.key.c_str());
    if (p.lease != 0 && !leases_.contains(p.lease)) {
      return Status::NotFound("lease " + std::to_string(p.lease) + " not found");
    }
  }
  if (!puts.empty()) ++revision_;
  for (const TxnPut& p : puts) kv_[p.key] = Versioned{p.value, revision_, p.lease};
  out.succeeded = true;
  out.revision = revision_;
  return out;
}

Result<Lease> InMemoryConfigManager::grant_lease(uint64_t ttl_ms) {
  SHOAL_ASSERT(ttl_ms > 0, "grant_lease: ttl_ms must be > 0");
  std::lock_guard lock(mu_);
  expire_leases_locked();
  const int64_t id = next_lease_++;
  leases_[id] = LeaseState{ttl_ms, env_.now_ns() + ttl_ms * 1'000'000ULL};
  return Lease{id, ttl_ms};
}

Status InMemoryConfigManager::keep_alive(int64_t lease) {
  std::lock_guard lock(mu_);
  expire_leases_locked();
  auto it = leases_.find(lease);
  if (it == leases_.end()) return Status::NotFound("lease " + std::to_string(lease) + " not found");
  it->second.expires_ns = env_.now_ns() + it->second.ttl_ms * 1'000'000ULL;
  return Status::Ok();
}

Status InMemoryConfigManager::revoke(int64_t lease) {
  std::lock_guard lock(mu_);
  expire_leases_locked();
  if (!leases_.contains(lease)) {
    return Status::NotFound("lease " + std::to_string(lease) + " not found");
  }
  drop_lease_locked(lease);
  return Status::Ok();
}

int64_t InMemoryConfigManager::revision() {
  std::lock_guard lock(mu_);
  expire_leases_locked();
  return revision_;
}

}  // namespace shoal::cluster
