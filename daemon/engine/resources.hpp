// SPDX-License-Identifier: MIT
// What clients hold besides their staging segment, and each user's bounds:
// device memory lent to them (allocations and imports), IPC event pools,
// grants and the buffers opened through them.
//
// Contract: every call runs on the io thread and returns 0 or -errno; on an
// error nothing the client holds changed (only the refusal's text is kept). A call that would take a user past a bound of
// Limits returns -EDQUOT and take_refusal() says which bound, whose, and
// its flag. A user's holdings are the sum over all its clients (those still
// draining included): nothing is counted twice, nothing is kept apart. A
// buffer's memory returns to the backend when its last reference goes
// (its owner's table, a grant, an opener, or a copy in flight).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "device/backend.hpp"
#include <boost/asio/io_context.hpp>

#include "engine/area_watch.hpp"
#include "engine/buffer.hpp"
#include "engine/client.hpp"
#include "engine/grants.hpp"
#include "log.hpp"
#include "options.hpp"
#include "engine/stats.hpp"

namespace ferry::ferryd {

// What one user's clients hold together, those still draining included.
struct Usage {
  // Connected, and departed ones whose state lives on (transfers held for a
  // fence's release, copies in flight): a user's bound counts both.
  uint32_t clients = 0;
  uint64_t buffers = 0, device_bytes = 0;  // its own allocations
  uint64_t grants = 0, opens = 0, imports = 0, event_pools = 0;
  uint64_t staging_bytes = 0;  // staging areas beyond the segments (StagingAreas)
  uint64_t staging_areas = 0;
  // Allocations whose IPC handle went out (ferry_buffer_export): another
  // process may keep their memory alive whatever ferryd does, so they stay
  // charged to the user until ferryd restarts. exported_bytes: all of them,
  // bounded by the export allowance (--user-memory); exports_kept_bytes: of
  // those, the ones freed already (held by nobody ferryd can see).
  uint64_t exported_bytes = 0, exports_kept_bytes = 0;
};

class Resources {
 public:
  // `clients`: every client whose resources exist (the engine's table).
  Resources(boost::asio::io_context& io, Backend& backend, const std::map<uint64_t, ClientState*>& clients)
      : backend_(backend), clients_(clients), areas_(io, [this](uint64_t key) { departed_areas_.erase(key); }) {}

  // The bounds kept here (per user, and allocations of all): user_memory and
  // max_buffers_total already resolved to numbers.
  void set_limits(const Limits& l) { limits_ = l; }
  // After the device is lost no memory is lent (-ENODEV).
  void device_lost() { lost_ = true; }
  const Holdings& holdings() const { return holdings_; }
  // Users charged for exports (Usage::exported_bytes), clients or none.
  std::vector<uid_t> exporters() const;
  size_t grants() const { return grants_.size(); }
  // What the clients of `uid` hold (ClientState::uid, set at its Hello).
  Usage usage(uid_t uid) const;
  // Why the last call refused past a bound, for the client; empty for any
  // other error. Cleared by reading.
  std::string take_refusal() { return std::exchange(refusal_, {}); }

  // *fence (may be null): the allocation's fence, index + 1, 0 if none was free.
  int alloc(ClientState& c, uint64_t bytes, uint64_t* id, uint32_t* fence = nullptr);
  // Drops `id` from c's table. An import is unmapped once no copy in flight
  // holds it: -EINPROGRESS when that is later than now, and then `unmapped`
  // (if set) is called once it is (its owner may free its memory only then:
  // freeing memory another process maps is undefined in CUDA's IPC).
  int free(ClientState& c, uint64_t id, std::function<void()> unmapped = {});
  // A client's own allocation from its IPC handle (h.fd, if any, stays the
  // caller's); the whole mapping counts against the user's memory while
  // ferryd maps it (until its free, or its client's end, and the last copy
  // into it). It has a fence, as an allocation (*fence, may be null), and
  // its owner may grant it.
  int import_buffer(ClientState& c, const IpcHandle& h, uint64_t bytes, uint64_t* id, uint32_t* fence = nullptr);
  // An IPC handle of the client's own allocation `id`; h->fd belongs to the driver.
  // Its first export charges its bytes to the user's export allowance, for
  // good (until ferryd restarts): -EDQUOT past it.
  // *first: this was its first export (the one that charged it), and then
  // *charge (may be null) names that charge, for export_unsent.
  struct ExportCharge {
    std::weak_ptr<Buffer> buffer;
    uid_t uid = 0;
    uint64_t bytes = 0;
  };
  int export_buffer(ClientState& c, uint64_t id, IpcHandle* h, uint64_t* bytes, bool* first,
                    ExportCharge* charge = nullptr);
  // The handle of a first export could not be sent after all (ferryd had no
  // descriptor left for the reply, or the reply was dropped): nothing left
  // ferryd, so its charge goes, whether the buffer was freed meanwhile or
  // not. A user charged nothing any more has no row left.
  void export_unsent(const ExportCharge& charge);
  int open_event_pool(ClientState& c, const IpcHandle& h, uint32_t count, uint64_t* id);
  int grant(ClientState& c, uint64_t buffer, uint32_t rights, Token* token);
  // One grant (token) or, with token == nullptr, every grant of the buffer. *n: how many.
  int revoke(ClientState& c, uint64_t buffer, const uint8_t* token, size_t* n);
  int open(ClientState& c, const uint8_t* token, uint64_t* id, uint64_t* bytes, uint32_t* rights);
  // A staging area of `bytes` (rounded up to pages) for c: its id, size and
  // a descriptor for the client; -EINVAL for 0 or more than
  // proto::kMaxStagingArea, -EDQUOT past the user's --user-staging.
  int grow_staging(ClientState& c, uint64_t bytes, uint64_t* id, uint64_t* size, int* fd);
  // Area `id` leaves c's session: its pages are freed now, and it counts
  // against the user until no process holds a file of it (AreaWatch).
  int release_staging(ClientState& c, uint64_t id);
  // c's session ended: each of its areas counts against its user until no
  // process holds a file of it (the client, a child, whoever it passed the
  // descriptor to: disconnecting and connecting again buys no more staging).
  void areas_gone(ClientState& c);
  // Users with areas whose session ended, still charged.
  std::vector<uid_t> area_holders() const;
  size_t departed_area_charges() const { return departed_areas_.size(); }
  size_t area_watches() const { return areas_.watched(); }

  // A client came, or its last reference went: its grants end, its event
  // pools close (its buffers go with the ClientState itself).
  void client_came() { ++holdings_.clients; }
  void client_gone(ClientState& c);

 private:
  enum class Quota { buffers, memory, exports, grants, opens, imports, event_pools, staging };
  // 0 when one more of `q` (`bytes` more, for memory) keeps c's user within
  // its bounds; else -EDQUOT with refusal_ set.
  int within(const ClientState& c, Quota q, uint64_t bytes = 0);
  std::string bytes_refusal(Quota q, const Usage& u, uint64_t bytes, const std::string& who) const;
  std::string count_refusal(const ClientState& c, Quota q, const Usage& u, const std::string& who);
  BufferRef lend(void* ptr, uint64_t bytes, bool imported);

  Backend& backend_;
  const std::map<uint64_t, ClientState*>& clients_;
  Holdings holdings_;  // before grants_: counted in as buffers go, whatever goes last
  struct Exports {
    uint64_t bytes = 0, kept = 0;  // Usage::exported_bytes, exports_kept_bytes
  };
  // Before grants_ too. A row only grows (ferryd cannot see an export end),
  // but for a charge whose handle never left (export_unsent): at most one per
  // user of the machine that exported, each at most --user-memory.
  std::map<uid_t, Exports> exports_;
  GrantRegistry grants_;
  Limits limits_;
  struct Departed {
    uid_t uid;
    uint64_t bytes;
  };
  std::map<uint64_t, Departed> departed_areas_;  // by AreaWatch key; before areas_, whose callback erases here
  AreaWatch areas_;
  uint64_t next_area_ = 0;  // AreaWatch keys
  std::string refusal_;
  bool lost_ = false;
  log::Every refused_total_{std::chrono::seconds(10)};
};

}  // namespace ferry::ferryd
