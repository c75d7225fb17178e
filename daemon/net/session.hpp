// SPDX-License-Identifier: MIT
// One connection: reads and decodes messages, hands each to its Requests
// handler, and writes through its Outbox. A malformed message closes this
// session and touches nothing else. io thread only.
#pragma once

#include <sys/types.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <chrono>
#include <memory>
#include <vector>

#include "net/server_context.hpp"
#include "net/outbox.hpp"
#include "net/requests.hpp"

namespace ferry::ferryd {

class Session final : public std::enable_shared_from_this<Session>, public Peer, public ProgressSink {
 public:
  using socket_type = boost::asio::local::stream_protocol::socket;

  // `closed` is told once the session closed (the session manager forgets it).
  Session(socket_type socket, Context& ctx, std::function<void(const std::shared_ptr<Session>&)> closed);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start();
  // Closes the connection now; queued bytes are dropped.
  void close();
  // Sends Shutdown, then closes once it is written.
  void shut_down();

  // The client's state, once Hello succeeded.
  const ClientRef& client() const { return requests_.client(); }

  // Peer
  Flow flow() const override;
  int take_fd() override;
  std::weak_ptr<ProgressSink> sink() override { return std::static_pointer_cast<ProgressSink>(shared_from_this()); }
  Later defer() override;

  // ProgressSink
  void broken(const char* why) override { fatal(-EPROTO, why); }
  void end(int code, const char* why) override { fatal(code, why); }

 private:
  void read();
  // Carries out a handler's answer.
  void deliver(Answer a);
  // Ends the session with a fatal Error (Answer::error).
  void fatal(int code, const char* why);
  // Handles messages again after a deferred answer.
  void resume();
  // Handles the whole messages read so far (until paused), at most
  // kMessagesPerTurn of them: true when done, false when the session closed
  // or the rest waits for a turn of its own (which then reads on).
  bool consume();
  void close_fds();
  // Closes a connection that sent no Hello within --hello-timeout.
  void arm_hello_deadline();
  // A session that is to close once its last message is written closes by
  // kCloseWithin whether or not the peer reads it: a client that leaves its
  // socket full cannot keep its session (and what it holds) alive.
  void close_soon();
  static constexpr auto kCloseWithin = std::chrono::seconds(1);

  socket_type socket_;
  Context& ctx_;
  std::function<void(const std::shared_ptr<Session>&)> closed_hook_;
  bool backlog_admin_ = false;  // an admin's unread replies count against no per-user bound
  Outbox outbox_;
  Requests requests_;
  std::vector<uint8_t> in_;
  size_t in_used_ = 0;
  std::deque<int> fds_in_;  // received, not yet claimed by a message
  boost::asio::steady_timer hello_deadline_;
  boost::asio::steady_timer close_deadline_;
  bool closed_ = false;
  bool reading_ = false;  // a read is armed
  bool paused_ = false;   // a Hello is being answered: messages wait
  bool consuming_ = false;  // consume() is on the stack
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace ferry::ferryd
