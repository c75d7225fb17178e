// The transfer engine: queues copies on the backend, retires them when the
// device reports them done, and keeps per-client ticket state.
//
// Threads: everything here runs on the io_context's thread, except the
// retire thread, which only waits on the backend and posts finished batches.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "segment.hpp"

namespace ferry {

class Session;

// Device memory owned by one client. Freed when the last reference goes:
// the client's table, or a copy still in flight to or from it.
struct Buffer {
  Buffer(Backend* b, void* p, uint64_t n, bool imported_ = false) : backend(b), ptr(p), bytes(n), imported(imported_) {
    live_count.fetch_add(1);
    live_bytes.fetch_add(n);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (imported) {
      backend->release_import(ptr);
    } else {
      backend->free(ptr);
    }
    live_count.fetch_sub(1);
    live_bytes.fetch_sub(bytes);
  }
  Backend* backend;
  void* ptr;
  uint64_t bytes;
  bool imported;  // a client's own allocation, opened from its IPC handle
  // Device memory held by all clients, for status and for tests.
  static inline std::atomic<uint64_t> live_count{0};
  static inline std::atomic<uint64_t> live_bytes{0};
};

// A grant: whoever presents its token may use the owner's buffer. Held by
// the registry and by every client that opened it; it does not keep the
// buffer alive (the owner's table does).
struct GrantInfo {
  std::weak_ptr<Buffer> buffer;
  uint64_t owner = 0;         // client id
  uint64_t owner_buffer = 0;  // the buffer's id in the owner's table
  uint32_t rights = 0;        // proto::Rights
  bool revoked = false;
  std::array<uint8_t, proto::kTokenBytes> token{};
};

// Every live grant, by token. io thread only.
class GrantRegistry {
 public:
  std::shared_ptr<GrantInfo> add(const std::shared_ptr<Buffer>& b, uint64_t owner, uint64_t owner_buffer,
                                 uint32_t rights);
  std::shared_ptr<GrantInfo> find(const uint8_t* token) const;
  // Revokes one grant (token) or, with token == nullptr, all of owner's grants
  // on owner_buffer (or on every buffer when owner_buffer == 0). Returns how many.
  size_t revoke(uint64_t owner, uint64_t owner_buffer, const uint8_t* token);
  size_t size() const { return grants_.size(); }

 private:
  std::map<std::array<uint8_t, proto::kTokenBytes>, std::shared_ptr<GrantInfo>> grants_;
};
GrantRegistry& grants();

struct ClientStats {
  uint64_t uploads = 0;
  uint64_t upload_bytes = 0;
  uint64_t downloads = 0;
  uint64_t errors = 0;
};

// What one client holds. Lives while its session is open or any of its copies
// is in flight, whichever is longer; the destructor gives everything back.
class ClientState {
 public:
  ClientState(Backend* backend, uint64_t id) : backend_(backend), id_(id) { live.fetch_add(1); }
  ClientState(const ClientState&) = delete;
  ClientState& operator=(const ClientState&) = delete;
  ~ClientState();

  int create_segment(uint32_t slots, uint64_t slot_bytes);

  uint64_t id() const { return id_; }
  StagingSegment& segment() { return segment_; }
  uint32_t slot_count() const { return slot_count_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t completed() const { return completed_; }
  uint32_t in_flight() const { return in_flight_; }
  uint64_t in_flight_bytes() const { return in_flight_bytes_; }
  uint64_t device_bytes() const { return device_bytes_; }
  size_t buffer_count() const { return buffers_.size(); }
  ClientStats& stats() { return stats_; }

  // Buffers: owned (allocated or imported) and opened through grants.
  int alloc(uint64_t bytes, uint64_t limit, uint64_t* id);
  int adopt(std::shared_ptr<Buffer> b, uint64_t* id);  // an imported allocation
  int open(const std::shared_ptr<GrantInfo>& g, uint64_t* id, uint64_t* bytes);
  int free(uint64_t id);
  // The buffer `id` names for this client if it may use it for `rights`:
  // nullptr with *err = -ENOENT (no such buffer, or its owner freed it) or
  // -EACCES (revoked, or a right not granted).
  std::shared_ptr<Buffer> find(uint64_t id, uint32_t rights, int* err) const;
  std::shared_ptr<Buffer> owned(uint64_t id) const;

  // IPC event pools this client registered: our id -> the backend's.
  int add_event_pool(uint64_t backend_id, uint64_t* id);
  bool event_pool(uint64_t id, uint64_t* backend_id) const;

  // Checks a transfer's ticket and slot against this client's window.
  // Returns nullptr or the reason it is refused.
  const char* check_ticket(uint64_t ticket, uint32_t slot) const;
  void mark_in_flight(uint64_t ticket, uint64_t bytes);
  // Records the outcome of one ticket; returns true when `completed` moved.
  // Failed tickets that became contiguous are appended to `failed`.
  bool finish(uint64_t ticket, uint64_t bytes, int status, std::vector<std::pair<uint64_t, int>>& failed);

  std::weak_ptr<Session> session;
  pid_t pid = 0;
  uid_t uid = 0;
  std::string name;
  std::chrono::system_clock::time_point since = std::chrono::system_clock::now();
  // Clients whose resources still exist (connected, or draining copies).
  static inline std::atomic<uint64_t> live{0};

 private:
  enum SlotState : uint8_t { kFree, kBusy, kDone };
  Backend* backend_;
  uint64_t id_;
  StagingSegment segment_;
  bool registered_ = false;
  uint32_t slot_count_ = 0;
  uint64_t slot_bytes_ = 0;
  std::vector<uint8_t> slot_state_;
  std::vector<int> slot_status_;
  uint64_t completed_ = 0;
  uint32_t in_flight_ = 0;
  uint64_t in_flight_bytes_ = 0;
  uint64_t device_bytes_ = 0;
  uint64_t next_buffer_ = 0;
  struct Entry {
    std::shared_ptr<Buffer> owned;     // set for the owner
    std::shared_ptr<GrantInfo> grant;  // set for a buffer opened through a grant
  };
  std::map<uint64_t, Entry> buffers_;
  std::map<uint64_t, uint64_t> event_pools_;  // our id -> backend id
  uint64_t next_pool_ = 0;
  ClientStats stats_;
};

// A latency histogram in proto::kLatencyBoundsNs buckets.
struct Histogram {
  uint64_t count = 0;
  uint64_t sum_ns = 0;
  uint64_t buckets[proto::kLatencyBuckets] = {};
  void add(uint64_t ns) {
    ++count;
    sum_ns += ns;
    ++buckets[proto::latency_bucket(ns)];
  }
};

// Slot waits of clients already gone (live ones are read from their segments).
Histogram& departed_slot_waits();
// Adds what a client published in its segment to h.
void add_slot_waits(const StagingSegment& seg, Histogram& h);

struct EngineStats {
  uint64_t uploads = 0;
  uint64_t upload_bytes = 0;
  uint64_t downloads = 0;
  uint64_t failed = 0;
  uint32_t in_flight = 0;
  uint64_t in_flight_bytes = 0;
  Histogram upload_latency;  // from the daemon's receipt of an upload to its retirement
};

class TransferEngine {
 public:
  TransferEngine(boost::asio::io_context& io, std::unique_ptr<Backend> backend);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  Backend& backend() { return *backend_; }
  // True once the device reported itself lost: new transfers and buffers are refused.
  bool device_lost() const { return device_lost_; }
  const EngineStats& stats() const { return stats_; }

  // Queues one transfer of `client`'s ticket. On a non-zero return nothing was
  // queued and the caller fails the ticket itself.
  int submit(const std::shared_ptr<ClientState>& client, uint64_t ticket, bool download, void* dst, const void* src,
             uint64_t bytes, std::shared_ptr<Buffer> buffer, const Signal* signal = nullptr);

  // Fails a ticket without touching the device (a refused transfer).
  void fail(const std::shared_ptr<ClientState>& client, uint64_t ticket, int status);

  // Called when a client's completion moved or a ticket failed.
  std::function<void(ClientState&, const std::vector<std::pair<uint64_t, int>>&)> on_progress;

  void stop();

 private:
  struct Record {
    uint64_t cookie;
    std::shared_ptr<ClientState> client;
    std::shared_ptr<Buffer> buffer;
    uint64_t ticket;
    uint64_t bytes;
    bool download;
    uint64_t submitted_ns;
  };
  void retire_loop();
  void retire(const std::vector<Done>& batch);
  void settle(const std::shared_ptr<ClientState>& client, uint64_t ticket, uint64_t bytes, int status);

  boost::asio::io_context& io_;
  std::unique_ptr<Backend> backend_;
  std::deque<Record> records_;  // io thread only, in submission order
  uint64_t next_cookie_ = 1;
  bool device_lost_ = false;
  EngineStats stats_;
  std::atomic<bool> stop_{false};
  // Finished copies not yet handled on the io thread; one post drains them all.
  std::mutex done_mu_;
  std::vector<Done> done_;
  std::thread retirer_;
};

}  // namespace ferry
