// SPDX-License-Identifier: MIT
// The request handler: what ferryd does with each message a client may send.
// One per session; it holds the session's client state (after Hello) and
// answers through the Peer, which the session implements. io thread only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "net/answer.hpp"
#include "net/server_context.hpp"
#include "ferry/proto.hpp"
#include "admin/credentials.hpp"

namespace ferry::ferryd {

// What a session lends its handler.
class Peer {
 public:
  virtual ~Peer() = default;
  // The connection as it stands now.
  struct Flow {
    bool hung_up = false;     // the peer shut its end already (a connect, Hello and close)
    bool untouched = false;   // nothing was sent to it yet (the Welcome must come first)
    size_t queued_fds = 0;    // descriptors queued for it, not yet sent
    size_t unread_bytes = 0;  // written to its socket, not read yet (SIOCOUTQ)
  };
  virtual Flow flow() const = 0;
  // A descriptor that arrived with the message being handled, or -1.
  virtual int take_fd() = 0;
  // Where the engine reports a broken ring.
  virtual std::weak_ptr<ProgressSink> sink() = 0;
  // An answer that comes later (a Hello's segment, made off this thread):
  // the session handles no further message until `answer` is called, which
  // carries the answer out (nothing once the session is gone) and goes on.
  struct Later {
    std::shared_ptr<std::atomic<bool>> cancelled;  // set once the session is gone
    std::function<void(Answer)> answer;
  };
  virtual Later defer() = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  PeerCred cred;  // the same, with its groups (is_admin)
};

class Requests {
 public:
  Requests(Context& ctx, Peer& peer) : ctx_(ctx), peer_(peer) {}

  // Whether a client may send messages of this type at all: judged from the
  // header alone, before the rest of the message is read.
  static bool client_may_send(proto::Type type);
  // Handles one decoded message of `type` (its bytes at `msg`, unaligned).
  Answer handle(proto::Type type, const uint8_t* msg);
  // Set once Hello succeeded.
  const ClientRef& client() const { return client_; }

 private:
  Answer on_hello(const proto::Hello& m);
  // The rest of a Hello once its client exists (r == 0) or could not be made.
  Answer welcome(const proto::Hello& m, int r, ClientRef c);
  proto::Welcome welcome_message(const ClientState& c) const;
  Answer on_alloc(const proto::Alloc& m);
  Answer on_free(const proto::Free& m);
  Answer on_status(const proto::StatusRequest& m);
  Answer on_admin(const proto::AdminRequest& m);
  Answer on_grant(const proto::Grant& m);
  Answer on_revoke(const proto::Revoke& m);
  Answer on_open(const proto::Open& m);
  Answer on_export(const proto::Export& m);
  Answer on_import(const proto::Import& m);
  Answer on_event_pool(const proto::EventPool& m);
  Answer on_staging_grow(const proto::StagingGrow& m);
  Answer on_staging_release(const proto::StagingRelease& m);
  static Answer reply(uint64_t request, int status, uint64_t value, uint32_t fence = 0);
  static Answer buffer_reply(uint64_t request, int status, uint32_t rights, uint64_t buffer, uint64_t bytes,
                             uint32_t fence = 0);
  // A request refused past a bound of Limits is answered with an Error that
  // says which (the engine's take_refusal); nothing for any other outcome,
  // which the caller answers itself.
  std::optional<Answer> past_bound(uint64_t request, int status);
  // Export and StagingGrow replies carry a descriptor: -EAGAIN while the
  // client leaves too many unread (they would park in ferryd's table).
  bool too_much_unread() const;
  // Fills h from a message's kind and handle; a Level Zero handle's fd came with it.
  IpcHandle ipc_handle(uint32_t kind, const uint8_t (&data)[proto::kIpcBytes]);

  Context& ctx_;
  Peer& peer_;
  ClientRef client_;
  bool admin_ = false;  // the peer is one of the daemon's admins (set at Hello)
};

}  // namespace ferry::ferryd
