// SPDX-License-Identifier: MIT
// The request handler: what ferryd does with each message a client may send.
// One per session; it holds the session's client state (after Hello) and
// answers through the Peer, which the session implements. io thread only.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "net/server_context.hpp"
#include "ferry/proto.hpp"
#include "admin/credentials.hpp"

namespace ferry::ferryd {

// The session as the handler sees it.
class Peer {
 public:
  virtual ~Peer() = default;
  // Queues a message (with `fd` and `fd2`, >= 0, which the peer then owns)
  // and starts writing. False when it will never be written (the session
  // failed for it: its peer does not read, or its user is past the bound of
  // unread replies); the descriptors are closed then.
  virtual bool send(const void* data, size_t bytes, int fd = -1, int fd2 = -1) = 0;
  // Refuses the session: an Error marked fatal, then the connection closes.
  virtual void fatal(int code, const char* why) = 0;
  // The peer shut its end already (a connect, Hello and close): nothing it
  // asked for is worth doing, a staging segment least of all.
  virtual bool hung_up() const = 0;
  // Closes the connection now, quietly.
  virtual void close() = 0;
  // A descriptor that arrived with the message being handled, or -1.
  virtual int take_fd() = 0;
  // Nothing was sent to this peer yet (the Welcome must come first).
  virtual bool untouched() const = 0;
  // Descriptors queued for this peer and not yet sent.
  virtual size_t queued_fds() const = 0;
  // Bytes written to the peer's socket that it has not read yet (SIOCOUTQ).
  virtual size_t unread_bytes() const = 0;
  // Where the engine reports a broken ring.
  virtual std::weak_ptr<ProgressSink> sink() = 0;
  // Handles no further message until resume() (a Hello being answered).
  virtual void pause() = 0;
  virtual void resume() = 0;
  // Set once the peer is gone: work done for it later is dropped.
  virtual std::shared_ptr<std::atomic<bool>> cancelled() = 0;
  // Keeps the peer's object alive while a callback for it is pending.
  virtual std::shared_ptr<void> keep_alive() = 0;
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
  void handle(proto::Type type, const uint8_t* msg);
  // Set once Hello succeeded.
  const ClientRef& client() const { return client_; }

  void on_hello(const proto::Hello& m);
  // The rest of a Hello once its client exists (r == 0) or could not be made.
  void welcome(const proto::Hello& m, int r, ClientRef c);
  void on_alloc(const proto::Alloc& m);
  void on_free(const proto::Free& m);
  void on_status(const proto::StatusRequest& m);
  void on_admin(const proto::AdminRequest& m);
  void on_grant(const proto::Grant& m);
  void on_revoke(const proto::Revoke& m);
  void on_open(const proto::Open& m);
  void on_export(const proto::Export& m);
  void on_import(const proto::Import& m);
  void on_event_pool(const proto::EventPool& m);
  void on_staging_grow(const proto::StagingGrow& m);
  void on_staging_release(const proto::StagingRelease& m);

 private:
  void reply(uint64_t request, int status, uint64_t value, uint32_t fence = 0);
  void buffer_reply(uint64_t request, int status, uint32_t rights, uint64_t buffer, uint64_t bytes);
  // A request refused past a bound of Limits is answered with an Error that
  // says which (the engine's take_refusal): true when it was so answered;
  // false, and the caller sends its own reply, for any other outcome.
  bool refused_past_bound(uint64_t request, int status);
  // Fills h from a message's kind and handle; a Level Zero handle's fd came with it.
  IpcHandle ipc_handle(uint32_t kind, const uint8_t (&data)[proto::kIpcBytes]);

  Context& ctx_;
  Peer& peer_;
  ClientRef client_;
  bool admin_ = false;  // the peer is one of the daemon's admins (set at Hello)
};

}  // namespace ferry::ferryd
