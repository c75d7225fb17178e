// One connection. A session that sent Hello owns a ClientState (its staging
// segment and buffers); one that did not (ferryctl) may only ask for status.
// A malformed message closes this session and touches nothing else.
#pragma once

#include <sys/types.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine.hpp"
#include "ferry/proto.hpp"

namespace ferry {

class Server;

class Session : public std::enable_shared_from_this<Session> {
 public:
  using socket_type = boost::asio::local::stream_protocol::socket;

  Session(socket_type socket, Server& server);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();
  // Closes the connection now; queued bytes are dropped.
  void close();
  // Sends Shutdown, then closes once it is written.
  void shut_down();

  const std::shared_ptr<ClientState>& client() const { return client_; }
  uid_t peer_uid() const { return uid_; }
  pid_t peer_pid() const { return pid_; }

  // Called by the engine when this client's tickets moved.
  void progress(const std::vector<std::pair<uint64_t, int>>& failed);

 private:
  void read();
  void handle(proto::Type type, const uint8_t* msg);
  // Handlers, one per message type a client may send (public for the dispatcher).
 public:
  void on_hello(const proto::Hello& m);
  void on_upload(const proto::Transfer& m);
  void on_download(const proto::Transfer& m);
  void on_upload_signal(const proto::UploadSignal& m);
  void on_alloc(const proto::Alloc& m);
  void on_free(const proto::Free& m);
  void on_transfer(const proto::Transfer& m, bool download, const proto::UploadSignal* sig = nullptr);
  void on_status(const proto::StatusRequest& m);
  void on_grant(const proto::Grant& m);
  void on_revoke(const proto::Revoke& m);
  void on_open(const proto::Open& m);
  void on_export(const proto::Export& m);
  void on_import(const proto::Import& m);
  void on_event_pool(const proto::EventPool& m);

 private:
  void buffer_reply(uint64_t request, int status, uint32_t rights, uint64_t buffer, uint64_t bytes);
  // A file descriptor that arrived with the message being handled, or -1.
  int take_fd();
  void close_fds();
  void fatal(int code, const char* why);
  void reply(uint64_t request, int status, uint64_t value);

  // Outgoing bytes, written one batch at a time. Bounded: a client that stops
  // reading is closed instead of holding the daemon's memory.
  // `fd` (>= 0): sent with this message (SCM_RIGHTS); the session owns it until then.
  void queue(const void* data, size_t bytes, int fd = -1);
  void flush();
  void send_with_fd();

  socket_type socket_;
  Server& server_;
  std::shared_ptr<ClientState> client_;
  pid_t pid_ = 0;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::vector<uint8_t> in_;
  size_t in_used_ = 0;
  std::vector<uint8_t> pending_;    // not yet handed to the socket
  std::vector<uint8_t> writing_;    // being written
  size_t completion_at_ = SIZE_MAX; // offset of a Completion in pending_ that may be updated
  std::deque<std::pair<size_t, int>> fd_marks_;  // offsets in pending_ of messages that carry an fd
  bool sending_fd_ = false;
  std::deque<int> fds_in_;          // received, not yet claimed by a message
  bool closing_after_write_ = false;
  bool closed_ = false;
};

}  // namespace ferry
