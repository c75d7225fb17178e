#include "grants.hpp"

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
  return g;
}

std::shared_ptr<GrantInfo> GrantRegistry::find(const uint8_t* token) const {
  Token key;
  std::memcpy(key.data(), token, key.size());
  auto it = grants_.find(key);
  return it == grants_.end() ? nullptr : it->second;
}

size_t GrantRegistry::revoke(uint64_t owner, uint64_t owner_buffer, const uint8_t* token, bool freed) {
  size_t n = 0;
  for (auto it = grants_.begin(); it != grants_.end();) {
    GrantInfo& g = *it->second;
    const bool match = g.owner == owner && (owner_buffer == 0 || g.owner_buffer == owner_buffer) &&
                       (token == nullptr || std::memcmp(token, g.token.data(), g.token.size()) == 0);
    if (match) {
      g.revoked = true;  // clients that opened it keep the GrantInfo, and are refused
      g.freed = freed;
      it = grants_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

}  // namespace ferry::ferryd
