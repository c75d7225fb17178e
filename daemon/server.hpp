// The server: the listening socket, the signals, the sessions and the
// transfer engine, all on one io_context thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "engine.hpp"
#include "options.hpp"

namespace ferry {

class Session;

class Server {
 public:
  Server(boost::asio::io_context& io, const Options& opts, std::unique_ptr<Backend> backend);
  ~Server();

  // Binds the socket (or adopts fd, when >= 0). Returns 0 or -errno with `why`.
  int listen(const std::string& path, int fd, std::string& why);
  void run();

  const Options& options() const { return opts_; }
  TransferEngine& engine() { return engine_; }
  bool stopping() const { return stopping_; }

  // Session bookkeeping.
  uint64_t next_client_id() { return ++client_ids_; }
  size_t client_count() const;
  void closed(const std::shared_ptr<Session>& s);

  // The status document for a viewer: every client for root and the daemon's
  // own user, the viewer's own clients otherwise.
  std::string status_json(uid_t viewer, gid_t viewer_gid) const;
  // Root, the daemon's own user, and members of --admin-group.
  bool is_admin(uid_t uid, gid_t gid) const;

  // Starts the orderly stop: no new connections, in-flight copies drain
  // (bounded by Options::drain_seconds), clients are told, run() returns.
  void stop();

 private:
  void accept();
  void drain_tick();
  void status_tick();
  std::string status_line() const;

  boost::asio::io_context& io_;
  Options opts_;
  TransferEngine engine_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer status_timer_;  // STATUS= for systemd
  std::set<std::shared_ptr<Session>> sessions_;
  std::string path_;
  bool owns_path_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point drain_deadline_;
  std::chrono::system_clock::time_point started_ = std::chrono::system_clock::now();
  uint64_t client_ids_ = 0;
  uint64_t connections_ = 0;
};

}  // namespace ferry
