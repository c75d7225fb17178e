// SPDX-License-Identifier: MIT
// The poller: the io thread's main loop. While there is work it does not
// sleep: it looks at every client's submission ring and at the device's
// finished copies in turn, and lets Asio run what is ready on the sockets
// every few microseconds, a bounded amount each time. After Options::poll_idle_us with nothing to do it
// tells the clients it sleeps (they then ring their doorbell sockets) and
// sleeps in Asio: a doorbell, a message, a timer or the device's eventfd (a
// finished copy) wakes it.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>

#include "engine/engine.hpp"

namespace ferry::ferryd {

class Poller {
 public:
  Poller(boost::asio::io_context& io, TransferEngine& engine, uint32_t idle_us, uint32_t nap_us)
      : io_(io), engine_(engine), idle_us_(idle_us), nap_us_(nap_us) {}
  // Until the io_context stops.
  void run();

 private:
  using Clock = std::chrono::steady_clock;
  // Ready socket handlers, a bounded number (IdlePolicy::kIoBatch, kIoBudget): how many ran.
  size_t run_io(Clock::time_point start);
  boost::asio::io_context& io_;
  TransferEngine& engine_;
  uint32_t idle_us_;
  uint32_t nap_us_;  // per queued copy; 0: never nap
};

}  // namespace ferry::ferryd
