// SPDX-License-Identifier: MIT
// The client's connection to ferryd: the socket, the Hello/Welcome exchange,
// the receiver thread, and requests answered by replies told apart by type.
// Transfers and their outcomes never pass here: they are in the segment.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/proto.hpp"
#include "tickets.hpp"

namespace ferry::client {

// Which answer each request type waits for.
template <class Reply>
constexpr proto::Type answer_type();
template <>
constexpr proto::Type answer_type<proto::Reply>() { return proto::Type::reply; }
template <>
constexpr proto::Type answer_type<proto::TokenReply>() { return proto::Type::token_reply; }
template <>
constexpr proto::Type answer_type<proto::BufferReply>() { return proto::Type::buffer_reply; }
template <>
constexpr proto::Type answer_type<proto::ExportReply>() { return proto::Type::export_reply; }
template <>
constexpr proto::Type answer_type<proto::StagingReply>() { return proto::Type::staging_reply; }

class Connection {
 public:
  explicit Connection(Tickets& tickets) : tickets_(tickets) {}

  // How long a request may wait for its answer, and connect for the
  // Welcome: $FERRY_TIMEOUT_MS when the client connected, else 30 s. A
  // stalled daemon becomes -ETIMEDOUT.
  int timeout_ms() const { return timeout_ms_; }
  // The text of the daemon's refusal of the Hello (its Error), if open() got one.
  const std::string& refusal() const { return refusal_; }
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects, says Hello, and receives the Welcome with the segment's fd
  // (*segment_fd, the caller's to close) and the doorbell's (kept here).
  // 0 or -errno; the daemon's refusal comes as its error code.
  int open(const std::string& path, const proto::Hello& hello, proto::Welcome* welcome, int* segment_fd);
  // Starts the receiver thread.
  void start();
  // Ends the connection and joins the receiver.
  void close();
  // The server broke the protocol where the receiver could not see it (a
  // descriptor that lies): the connection ends with `why` (ended(), and
  // every call from now on), as it would for a bad message; `what` is
  // written once to stderr: the program goes on, without ferry's staging.
  void fail(int why, const char* what);
  // In a forked child: closes this process's copy of the socket, sends
  // nothing and joins nothing (the receiver thread is the parent's).
  void abandon();

  // One whole message on the socket (with `fd` when >= 0). 0 or -ECONNRESET.
  int send(const void* data, size_t n, int fd = -1);
  // Wakes ferryd's data thread (a byte on the doorbell of the Welcome): 0, or -ECONNRESET.
  int ring();
  // 0 while connected; why the connection ended once it did.
  int ended() const { return ended_.load(std::memory_order_acquire); }
  // The daemon's pid as the kernel saw it at connect (SO_PEERCRED; 0: out of sight).
  pid_t peer_pid() const { return peer_pid_; }

  // Sends a request and waits for its answer, copied into *out; the request
  // id is written to *request_field first. *reply_fd gets a descriptor that
  // came with the answer. A refusal (a Reply or Error with a status, whatever
  // was asked) returns that status.
  // Why the daemon refused this thread's last request (a bound of its
  // user, say), or empty when it gave no reason.
  static std::string& refusal_text();

  // wait_ms > 0: wait that long for the answer at most, not timeout_ms().
  template <class Reply>
  int request(void* msg, size_t n, uint64_t* request_field, Reply* out, int fd = -1, int* reply_fd = nullptr,
              int wait_ms = 0) {
    Answer a;
    refusal_text().clear();
    if (int r = exchange(msg, n, request_field, fd, &a, wait_ms > 0 ? wait_ms : timeout_ms()); r != 0) return r;
    refusal_text() = std::move(a.text);
    if (a.type != answer_type<Reply>() || a.bytes.size() != sizeof(Reply)) {
      if (a.fd >= 0) ::close(a.fd);
      proto::Reply refused{};
      if (a.type != proto::Type::reply || a.bytes.size() != sizeof refused) return -EPROTO;
      std::memcpy(&refused, a.bytes.data(), sizeof refused);
      return refused.status != 0 ? refused.status : -EPROTO;
    }
    std::memcpy(out, a.bytes.data(), sizeof(Reply));
    if (reply_fd != nullptr) {
      *reply_fd = a.fd;
    } else if (a.fd >= 0) {
      ::close(a.fd);
    }
    return 0;
  }

 private:
  struct Answer {
    proto::Type type{};
    std::vector<uint8_t> bytes;
    int fd = -1;  // came with it (ExportReply, StagingReply)
    std::string text{};  // a refusal's reason (an Error), if the daemon gave one
  };
  int exchange(void* msg, size_t n, uint64_t* request_field, int fd, Answer* out, int wait_ms);
  // A staging area granted after its request was given up: given back.
  void release_late_area(uint64_t area);

 public:
  // Sends a request whose answer nobody waits for (it is dropped when it
  // comes); the request id is written to *request_field first.
  void tell(void* msg, size_t n, uint64_t* request_field);

 private:
  void receive_loop();
  // Handles one message; false when the connection must end (*why set).
  bool dispatch(proto::Type type, const uint8_t* m, size_t n, int* why);
  void take_answer(proto::Type type, const uint8_t* m, size_t n);
  bool take_error(const uint8_t* m, int* why);

  Tickets& tickets_;
  int fd_ = -1;
  int bell_ = -1;  // the doorbell of the Welcome (a socket)
  int timeout_ms_ = 30'000;
  pid_t peer_pid_ = 0;
  std::string refusal_;
  std::thread receiver_;
  std::mutex send_mu_;  // one message at a time on the socket

  std::mutex mu_;  // everything below
  std::condition_variable cv_;
  uint64_t next_request_ = 1;
  std::map<uint64_t, Answer> answers_;  // by request id
  std::set<uint64_t> abandoned_;        // timed out: their answers are dropped when they come
  std::deque<int> fds_in_;              // received, not yet claimed
  int dead_ = 0;                        // why the connection ended
  std::atomic<int> ended_{0};           // the same, read without mu_ (ended())
  std::atomic<int> failed_{0};          // fail(): why, for the receiver to say
};

}  // namespace ferry::client
