// SPDX-License-Identifier: MIT
// Grants: whoever presents a grant's token may use the owner's buffer with
// the rights it names. The registry belongs to the engine; io thread only.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "engine/buffer.hpp"
#include "ferry/proto.hpp"

namespace ferry::ferryd {

using Token = std::array<uint8_t, proto::kTokenBytes>;

// Held by the registry and by every client that opened it; it does not keep
// the buffer alive (the owner's table does).
struct GrantInfo {
  std::weak_ptr<Buffer> buffer;
  uint64_t owner = 0;         // client id
  uint64_t owner_buffer = 0;  // the buffer's id in the owner's table
  uint32_t rights = 0;        // proto::Rights
  bool revoked = false;
  bool freed = false;  // revoked because the owner freed the buffer (or left): -ENOENT, not -EACCES
  Token token{};
};

class GrantRegistry {
 public:
  // A new grant with a fresh 256-bit token from the kernel's CSPRNG.
  std::shared_ptr<GrantInfo> add(const BufferRef& b, uint64_t owner, uint64_t owner_buffer, uint32_t rights);
  std::shared_ptr<GrantInfo> find(const uint8_t* token) const;
  // Revokes one grant (token) or, with token == nullptr, all of owner's grants
  // on owner_buffer (or on every buffer when owner_buffer == 0). `freed`: the
  // buffer itself is going. Returns how many.
  size_t revoke(uint64_t owner, uint64_t owner_buffer, const uint8_t* token, bool freed = false);
  size_t size() const { return grants_.size(); }
  // Live grants of one owner.
  size_t count(uint64_t owner) const;

 private:
  std::map<Token, std::shared_ptr<GrantInfo>> grants_;
  // The same grants by owner: a revoke or a client's exit walks only its own.
  std::map<uint64_t, std::map<Token, std::shared_ptr<GrantInfo>>> by_owner_;
};

}  // namespace ferry::ferryd
