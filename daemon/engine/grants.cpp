// SPDX-License-Identifier: MIT
#include "engine/grants.hpp"

#include <sys/random.h>

#include <cstring>

namespace ferry::ferryd {

std::shared_ptr<GrantInfo> GrantRegistry::add(const BufferRef& b, uint64_t owner, uint64_t owner_buffer,
                                              uint32_t rights) {
  auto g = std::make_shared<GrantInfo>();
  g->buffer = b;
  g->owner = owner;
  g->owner_buffer = owner_buffer;
  g->rights = rights;
  // Unguessable, so the token is the right.
  size_t got = 0;
  while (got < g->token.size()) {
    ssize_t n = ::getrandom(g->token.data() + got, g->token.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  grants_[g->token] = g;
  by_owner_[owner][g->token] = g;
  return g;
}

size_t GrantRegistry::count(uint64_t owner) const {
  auto it = by_owner_.find(owner);
  return it == by_owner_.end() ? 0 : it->second.size();
}

std::shared_ptr<GrantInfo> GrantRegistry::find(const uint8_t* token) const {
  Token key;
  std::memcpy(key.data(), token, key.size());
  auto it = grants_.find(key);
  return it == grants_.end() ? nullptr : it->second;
}

size_t GrantRegistry::revoke(uint64_t owner, uint64_t owner_buffer, const uint8_t* token, bool freed) {
  auto mine = by_owner_.find(owner);
  if (mine == by_owner_.end()) return 0;
  size_t n = 0;
  for (auto it = mine->second.begin(); it != mine->second.end();) {
    GrantInfo& g = *it->second;
    const bool match = (owner_buffer == 0 || g.owner_buffer == owner_buffer) &&
                       (token == nullptr || std::memcmp(token, g.token.data(), g.token.size()) == 0);
    if (match) {
      g.revoked = true;  // clients that opened it keep the GrantInfo, and are refused
      g.freed = freed;
      grants_.erase(g.token);
      it = mine->second.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  if (mine->second.empty()) by_owner_.erase(mine);
  return n;
}

}  // namespace ferry::ferryd
