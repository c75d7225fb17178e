// SPDX-License-Identifier: MIT
// Device memory as the engine lends it to clients: a buffer lives while its
// owner's table or a copy in flight holds a reference; the engine's deleter
// gives the memory back to the backend when the last one goes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace ferry::ferryd {

class ClientState;

struct Buffer {
  void* ptr = nullptr;  // a device address (CUDA's is an integer, not a host pointer)
  uint64_t bytes = 0;
  // What it counts against its owner's --user-memory: an allocation's size;
  // an import's whole mapping (ferryd keeps it mapped, and so alive, while it
  // is imported), whatever part of it the client named.
  uint64_t charged = 0;
  bool imported = false;  // a client's own allocation, opened from its IPC handle
  // Its IPC handle went out: another process may keep the memory alive past
  // its free, where ferryd cannot see it (Resources: exports stay charged).
  bool exported = false;
  uid_t uid = 0;  // the user of the client that allocated it
  // Its fence in the owner's segment (index + 1; 0: none). The fence goes
  // back to the owner when the memory does: no device write for this buffer
  // is still queued then.
  uint32_t fence = 0;
  std::weak_ptr<ClientState> owner;
  // Called once the memory went back (an import: ferryd no longer maps it),
  // on the io thread, from the last reference's release: it must only post.
  std::function<void()> released;
};

using BufferRef = std::shared_ptr<Buffer>;

}  // namespace ferry::ferryd
