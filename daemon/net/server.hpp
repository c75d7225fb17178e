// SPDX-License-Identifier: MIT
// The server: the listening socket, the signals and the orderly stop. It
// owns the engine (through the Context it hands to sessions) and the
// session manager; everything runs on one io_context thread.
#pragma once

#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "net/server_context.hpp"
#include "engine/engine.hpp"
#include "options.hpp"
#include "net/session_manager.hpp"

namespace ferry::ferryd {

class Server {
 public:
  Server(boost::asio::io_context& io, const Options& opts, std::unique_ptr<Backend> backend);
  ~Server();

  // Binds the socket (or adopts fd, when >= 0). Returns 0 or -errno with `why`.
  int listen(const std::string& path, int fd, std::string& why);
  // Serves until stopped. Returns how many copies are still queued on the
  // device once --drain is over: the caller then ends the process without
  // tearing the device down (which would wait for them).
  size_t run();
  // Removes the socket file now (it is removed at destruction otherwise).
  void unlink_socket();

  TransferEngine& engine() { return engine_; }

  // Starts the orderly stop: no new connections, in-flight copies drain
  // (bounded by Options::drain_seconds), clients are told, run() returns.
  void stop();

 private:
  // --socket-group and --socket-mode on the socket file at `path`: 0, or -EPERM with why.
  int apply_perms(const std::string& path, std::string& why);
  int adopt(int fd, std::string& why);
  int bind_path(const std::string& path, std::string& why);
  // The acceptor bound at `at`, given its group and mode, listening: 0, or
  // -errno and why (no file left at `at` then).
  int bind_listen(const std::string& at, std::string& why);
  void accept();
  void wait_signal();
  // Why a new connection (its socket) is refused, or empty: the bounds of
  // Limits on connections, all users' and its user's, and the admins' seats.
  std::string admit(int fd);
  // Logs why a connection was refused, at most once per 10 s.
  void refused(const char* why);
  void drain_tick();
  void status_tick();

  boost::asio::io_context& io_;
  Options opts_;
  TransferEngine engine_;
  Context ctx_;
  SessionManager sessions_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer status_timer_;  // STATUS= for systemd
  boost::asio::steady_timer accept_pause_;  // out of descriptors: accept again later, not at once
  std::chrono::steady_clock::time_point last_refusal_log_{};
  std::string path_;
  bool owns_path_ = false;
  struct stat bound_ {};  // the socket file this daemon bound (unlink_socket)
  std::chrono::steady_clock::time_point drain_deadline_;
  std::chrono::steady_clock::time_point drain_from_;  // when the clients were told "stopping"
};

}  // namespace ferry::ferryd
