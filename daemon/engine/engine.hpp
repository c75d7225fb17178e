// SPDX-License-Identifier: MIT
// The transfer engine: the only part of ferryd that talks to the device
// (through the Backend seam). Its parts, each with its contract at its top:
//   client.hpp       ClientState: what one client holds (its segment, its
//                    ticket window, its buffers)
//   client_table.hpp Clients: the clients and their segments (made, counted
//                    active or idle, given back at their end)
//   holds.hpp        Holds: transfers waiting for a value (after, fenced)
//   resources.hpp    Resources: what clients hold besides their segment
//                    (device memory, event pools, grants), each user's bounds
//   this header      the transfers and the copies in flight (engine.cpp, in
//                    two parts: ring intake, a client's entries copied out
//                    once and checked in ticket order, with the doorbells,
//                    the device's eventfd and the poller's sleep/wake; then
//                    submission and retirement, a checked transfer to the
//                    device and its outcome back into the client's segment)
// ClientState keeps what one client holds; the engine and its Holds alone
// write their marks (ClientState's friends), everyone else goes through verbs.
//
// Threads: everything here runs on the data thread (the io_context's, which
// also serves the sockets), with no lock. While it sleeps, in the
// io_context's wait on descriptors, three kinds of descriptor wake it: the
// sockets, each client's doorbell (a socket pair's end; the client sends
// a byte on its end when its
// segment's `doorbell` word asks), and the device's eventfd, which the
// backend's waiter writes when the oldest queued copy ends (InFlight; the
// waiter owns no data). The segment pool's thread (SegmentPool) makes
// segments under its own lock.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "device/backend.hpp"
#include "engine/buffer.hpp"
#include "engine/client.hpp"
#include "engine/client_table.hpp"
#include "engine/holds.hpp"
#include "ferry/proto.hpp"
#include "log.hpp"
#include "engine/resources.hpp"
#include "engine/segment_pool.hpp"
#include "engine/stats.hpp"

namespace ferry::ferryd {

class TransferEngine {
 public:
  TransferEngine(boost::asio::io_context& io, std::unique_ptr<Backend> backend);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // The io_context everything here runs on (for work posted to run later).
  boost::asio::io_context& io() { return io_; }
  const DeviceInfo& device() const { return backend_->info(); }
  // True once the device reported itself lost: new transfers and buffers are refused.
  bool device_lost() const { return device_lost_; }
  const EngineStats& stats() const { return stats_; }
  // Device memory, event pools and grants of the clients, and each user's
  // bounds (resources.hpp).
  Resources& resources() { return resources_; }
  const Resources& resources() const { return resources_; }
  // The clients and their segments (client_table.hpp).
  Clients& clients() { return clients_; }
  const Clients& clients() const { return clients_; }

  // ---- transfers (engine.cpp)
  // Checks and queues one ring entry of a client (held while its values
  // have not come: `after` of the client's app_value, `release` of the
  // destination's fence; the client's later transfers wait behind a hold).
  // Returns nullptr, or why the entry breaks the slot protocol (the caller
  // then ends the session). A wrong buffer, range or pool fails the ticket
  // only.
  const char* transfer(const ClientRef& c, const Entry& e);
  // How many of each thing the engine keeps now (status "kept"): each goes
  // back to its idle value once the clients that made it are gone, or stays
  // bounded (docs/DESIGN.md, "What ferryd keeps").
  struct Kept {
    size_t client_states = 0, departed_clients = 0, holders = 0, held_transfers = 0, rings = 0,
           copies_in_flight = 0, grants = 0, export_rows = 0, departed_area_charges = 0, area_watches = 0,
           run_rows = 0, run_exited = 0;
    SegmentPool::Counts segments;
  };
  Kept kept() const;
  // Rings of a client's doorbell in a row with nothing published since the
  // last (its listening pauses past IdlePolicy::kIdleRings); 0 without a ring.
  uint32_t doorbell_idle_rings(const ClientState& c) const;
  // Whether the device writes clients' timelines (else the daemon does, at retire).
  bool device_timeline() const { return device_writes_; }
  // Queues one copy of `client`'s ticket. On a non-zero return nothing was
  // queued and the caller fails the ticket itself.
  // A fence's ready word written after a copy (an upload_fenced entry's publish).
  struct FenceWrite {
    ClientRef owner;  // whose segment holds it: kept until the write is done
    uint32_t fence = 0;
    uint64_t value = 0;
  };
  int submit(const ClientRef& client, uint64_t ticket, bool download, void* dst, const void* src, uint64_t bytes,
             BufferRef buffer, const Signal* signal = nullptr, bool last_piece = true,
             const FenceWrite* fence = nullptr);
  // Fails a ticket without touching the device (a refused transfer); with
  // status 0 completes it so (an upload to proto::kNoBuffer). A fence write
  // still happens after the copies before it, the fence's failed word first.
  void fail(const ClientRef& client, uint64_t ticket, int status, const FenceWrite* fence = nullptr);

  // Stops listening to the device and the doorbells; leaves the copies
  // still recorded to the driver.
  void stop();
  // A request of c's session is about to be served: the ring entries c
  // published before it are taken first (a Free after an upload, say).
  void before_request(const ClientRef& c) { drain_ring(c); }

  // ---- polling (engine.cpp's intake), driven by the Poller on the data thread
  // Starts reading the client's submission ring (after its Welcome), and
  // listening to its doorbell: returns the end of it the client rings (its
  // copy, to send with the Welcome), or -errno.
  int use_ring(const ClientRef& c);
  // The client's session closed: what it published is taken, it stops
  // counting as connected, and its doorbell goes.
  void client_gone(const ClientRef& c);
  void count_nap() { ++stats_.poller_naps; }
  // Takes the client's published ring entries, in ticket order. A broken
  // entry ends its session (ProgressSink::broken).
  size_t drain_ring(const ClientRef& c);
  // The last ticket c's ring shows now, in order from the next one.
  uint64_t last_published(const ClientRef& c);
  // One round: every ring, the holds, then the copies the device finished.
  // Returns how much it found to do; never waits.
  size_t poll();
  // Whether the last wake-up of a sleeping poller only looked at holds and
  // released none (the poller then goes back to sleep at once); clears it.
  bool take_idle_wake() { return holds_.take_idle_wake(); }
  // Transfers held for a value (a consumer's release, say): a stop waits for
  // them as for copies in flight, within its drain time.
  bool holding() const { return !holds_.empty(); }
  // The holds of uid's departed clients given up (Holds::drop_departed).
  // std::nullopt: every user's (the daemon-wide bound).
  size_t drop_departed_holds(std::optional<uid_t> uid) { return holds_.drop_departed(uid); }
  // A hold came or moved within IdlePolicy::kHoldAwake: the value it waits for is likely near.
  bool hold_near() const { return holds_.near(); }
  // How long released holds waited (Holds::waited).
  const Histogram& hold_waits() const { return holds_.waited(); }
  // The poller goes to sleep: every ring asks for its doorbell, the rings
  // are looked at once more (false, and still awake, if that found work, or
  // a hold came or moved within IdlePolicy::kHoldAwake), and the backend's waiter is
  // lent the oldest copy, to write the device's eventfd when it ends.
  bool sleep_begin();
  // The poller woke up: no more doorbells.
  void sleep_end();
  // Set by a poller that polls after every wake-up (Poller with
  // --poll-idle-us > 0): what a wake-up queues is then lent to the device's
  // waiter only when the poller sleeps again, not at once.
  void set_polled(bool on) { polled_ = on; }

 private:
  struct Record {
    uint64_t cookie;
    ClientRef client;
    BufferRef buffer;
    uint64_t ticket;  // 0: a timeline write alone
    uint64_t bytes;
    bool download;
    bool last_piece;  // of an upload call (proto::kTransferLastPiece)
    uint64_t submitted_ns;
    // A fence to write after it: by the device (fence_on_device), else by
    // the retire path (which also marks it failed when the copy failed).
    FenceWrite fence{};
    bool fence_on_device = false;
  };
  // Stores a fence's ready word from the host (its failed word first, for a
  // failed upload) and wakes its owner's sleepers.
  static void write_fence(const FenceWrite& f, bool failed);
  static void mark_failed(const FenceWrite& f);
  // Whether the device can write words of this client's segment.
  bool device_can_write(const ClientState& c) const { return device_writes_ && c.registered() && !c.host_timeline(); }
  // Queues a checked transfer now (the buffer, range and pool are checked here).
  void issue(const ClientRef& c, const Entry& e);
  // One device write without a copy: the client's frontier, if it moved,
  // and the fence's value, if any. Whether it was queued (false: nothing to
  // write, or the device refused it and the host wrote the frontier).
  bool queue_lone_write(const ClientRef& c, const FenceWrite* fence);
  // The device write of the client's new frontier, if it moved and the
  // device writes timelines; nullptr otherwise.
  bool timeline_write(ClientState& c, DeviceWrites* w);
  // The write of f's value into its fence's ready word, after the copy.
  static void add_fence_write(const FenceWrite& f, DeviceWrites* w);
  void retire(const std::vector<Done>& batch);
  bool settle(const ClientRef& client, uint64_t ticket, uint64_t bytes, int status);
  void fence_done(const Record& r, int status);
  void count_done(const Record& r);
  // Asleep and not polled after this wake-up (no poller, or one that never
  // polls): the device's eventfd must say when the oldest copy ends.
  void rest();
  // Finished copies, asked of the device without waiting, retired.
  size_t reap_now();
  // A client's doorbell: ferryd's end of the socket pair, and how long its
  // listening pauses after rings that brought nothing (a client that rings
  // without pause costs ferryd a wake-up per pause, not one per byte).
  struct Bell {
    explicit Bell(boost::asio::io_context& io, int fd) : d(io, fd), pause(io) {}
    boost::asio::posix::stream_descriptor d;
    boost::asio::steady_timer pause;
    uint32_t idle_rings = 0;  // rings in a row with no entry published since the ring before
    uint64_t seen = 0;        // the ring's next ticket at the last ring (its progress since, whoever took it)
  };
  // Waits for the next write to a doorbell or the device's eventfd.
  void listen(std::shared_ptr<Bell> bell, std::weak_ptr<ClientState> c);
  void listen_device();

  boost::asio::io_context& io_;
  // The device's eventfd: declared before backend_, whose waiter writes it
  // until the backend goes, so that it is closed after.
  boost::asio::posix::stream_descriptor device_bell_;
  std::unique_ptr<Backend> backend_;
  EngineStats stats_;
  // Declared before everything that holds a ClientRef or BufferRef: the
  // deleters of those use both.
  Clients clients_{io_, *backend_, resources_, stats_};
  Resources resources_{io_, *backend_, clients_.all()};
  std::deque<Record> records_;  // io thread only, in submission order
  uint64_t next_cookie_ = 1;
  bool device_lost_ = false;
  bool device_writes_ = false;  // the backend writes timelines; off after a device failure
  bool asleep_ = true;  // the poller sleeps (or never polls): clients ring their doorbells; before holds_, which reads it
  Holds holds_{io_, asleep_, [this](const ClientRef& c, const Entry& e) { issue(c, e); },
               [](ClientRef owner, uint32_t fence, uint64_t value) {
                 write_fence(FenceWrite{std::move(owner), fence, value}, true);
               }};
  bool stopped_ = false;
  bool polled_ = false;  // set_polled
  // Connected clients with a submission ring, and their doorbells.
  struct Ring {
    ClientRef c;
    std::shared_ptr<Bell> bell;
  };
  std::vector<Ring> rings_;
  std::vector<Done> reaped_;  // reap_now's batch, kept for its capacity
};

}  // namespace ferry::ferryd
