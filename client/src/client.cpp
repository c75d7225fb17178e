// libferry: the client side of the upload path.
//
// Slots: ticket t uses slot (t - 1) % slot_count, and is written only once
// every ticket up to t - slot_count is done, so a slot is never rewritten
// before the device has read it. A receiver thread reads the daemon's
// messages; waiters spin briefly on the segment's counter, then sleep.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.h"
#include "ferry/fdpass.hpp"
#include "ferry/proto.hpp"

namespace proto = ferry::proto;
using Clock = std::chrono::steady_clock;

// A slot passes from one writer to the next through the daemon, another
// process: ThreadSanitizer cannot see that order, so we state it.
#if defined(__SANITIZE_THREAD__)
#define FERRY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_TSAN 1
#endif
#endif
#ifdef FERRY_TSAN
#include <sanitizer/tsan_interface.h>
#define FERRY_SLOT_HANDED_ON(p) __tsan_release(p)
#define FERRY_SLOT_TAKEN(p) __tsan_acquire(p)
#else
#define FERRY_SLOT_HANDED_ON(p) (void)(p)
#define FERRY_SLOT_TAKEN(p) (void)(p)
#endif

namespace {

// Runs the pieces of a large upload on several threads at once: one
// thread's memcpy from pageable memory is slower than a PCIe link (9.5 GB/s
// against 55 on the H200 machine). Each thread stages whole pieces, so no
// piece waits on a barrier. Threads: $FERRY_STAGING_THREADS, else half the
// cores, at most 8; started on the first large upload.
class Stager {
 public:
  ~Stager() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Calls fn(i) for every i < count, on this thread and the pool's. Returns
  // the first non-zero result (the rest still run). If another upload holds
  // the pool, this one runs alone.
  int run(uint64_t count, const std::function<int(uint64_t)>& fn) {
    std::unique_lock busy(use_, std::try_to_lock);
    if (!busy.owns_lock() || count < 2 || workers() == 0) {
      int first = 0;
      for (uint64_t i = 0; i < count; ++i)
        if (int r = fn(i); r != 0 && first == 0) first = r;
      return first;
    }
    {
      std::lock_guard lock(mu_);
      fn_ = &fn;
      count_ = count;
      next_ = 0;
      result_ = 0;
      active_ = threads_.size();
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
    return result_;
  }

  size_t workers() {
    std::call_once(started_, [&] {
      unsigned n = std::thread::hardware_concurrency() / 2;
      if (const char* e = std::getenv("FERRY_STAGING_THREADS")) n = static_cast<unsigned>(std::atoi(e));
      n = std::min(8u, std::max(1u, n));
      for (unsigned i = 1; i < n; ++i) threads_.emplace_back([this] { work(); });
    });
    return threads_.size();
  }

 private:
  // Takes pieces until none is left.
  void drain() {
    for (;;) {
      uint64_t i;
      const std::function<int(uint64_t)>* fn;
      {
        std::lock_guard lock(mu_);
        if (next_ >= count_) return;
        i = next_++;
        fn = fn_;
      }
      int r = (*fn)(i);
      if (r != 0) {
        std::lock_guard lock(mu_);
        if (result_ == 0) result_ = r;
      }
    }
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      std::lock_guard lock(mu_);
      if (--active_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex use_;  // one upload on the pool at a time
  std::once_flag started_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<int(uint64_t)>* fn_ = nullptr;
  uint64_t count_ = 0, next_ = 0, generation_ = 0;
  size_t active_ = 0;
  int result_ = 0;
  bool stop_ = false;
};

}  // namespace

struct ferry_client {
  int fd = -1;
  proto::Segment* seg = nullptr;
  char* slots = nullptr;
  uint64_t seg_bytes = 0;
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;
  proto::Welcome welcome{};

  std::mutex send_mu;  // one message at a time on the socket

  std::mutex mu;  // everything below
  std::condition_variable cv;
  uint64_t next_ticket = 1;
  uint64_t next_request = 1;
  uint64_t failures_seen = 0;                       // TicketFailed messages received
  std::map<uint64_t, int> failed;                   // ticket -> error, until reported
  std::map<uint64_t, std::vector<uint64_t>> groups; // last ticket of an upload -> its other tickets
  std::map<uint64_t, std::vector<uint8_t>> replies;  // answers to requests, by request id
  std::map<uint64_t, int> reply_fds;                       // an ExportReply's descriptor
  std::deque<int> fds_in;                                  // received, not yet claimed
  std::map<uint64_t, uint64_t> buffer_sizes;        // buffers this client allocated
  int dead = 0;                                     // why the connection ended
  std::unique_ptr<std::atomic<uint32_t>[]> hold;    // downloads still reading a slot
  Stager stager;

  std::thread receiver;
};

namespace {

constexpr auto kSpin = std::chrono::microseconds(50);

int send_all(ferry_client* c, const void* data, size_t n) {
  std::lock_guard lock(c->send_mu);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(c->fd, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      return -ECONNRESET;
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return 0;
}

// Sends one message with a file descriptor (SCM_RIGHTS).
int send_with_fd(ferry_client* c, const void* data, size_t n, int fd) {
  std::lock_guard lock(c->send_mu);
  ssize_t k;
  do {
    k = proto::send_fd(c->fd, data, n, fd, MSG_NOSIGNAL);
  } while (k < 0 && errno == EINTR);
  return k == static_cast<ssize_t>(n) ? 0 : -ECONNRESET;
}

// Folds the errors of an upload's earlier pieces into its last ticket, once
// the last ticket is done. Caller holds mu.
void settle_groups(ferry_client* c, uint64_t completed) {
  while (!c->groups.empty() && c->groups.begin()->first <= completed) {
    auto node = c->groups.extract(c->groups.begin());
    int err = 0;
    for (uint64_t t : node.mapped()) {
      auto it = c->failed.find(t);
      if (it == c->failed.end()) continue;
      if (err == 0) err = it->second;
      c->failed.erase(it);
    }
    if (err != 0) c->failed.emplace(node.key(), err);  // keeps the last piece's own error if it has one
  }
}

void receive_loop(ferry_client* c) {
  std::vector<uint8_t> buf(64 * 1024);
  size_t used = 0;
  int why = -ECONNRESET;
  for (;;) {
    ssize_t n = proto::recv_fds(c->fd, buf.data() + used, buf.size() - used, 0, [&](int fd) {
      std::lock_guard lock(c->mu);
      c->fds_in.push_back(fd);
    });
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<size_t>(n);
    size_t off = 0;
    bool stop = false;
    while (!stop) {
      proto::Decoded d = proto::decode(buf.data() + off, used - off);
      if (d.result == proto::Decode::need_more) break;
      if (d.result == proto::Decode::bad) {
        why = -EPROTO;
        stop = true;
        break;
      }
      const uint8_t* m = buf.data() + off;
      std::unique_lock lock(c->mu);
      switch (d.type) {
        case proto::Type::reply:
        case proto::Type::token_reply:
        case proto::Type::buffer_reply: {
          uint64_t request;
          std::memcpy(&request, m + sizeof(proto::Header), sizeof request);
          c->replies[request].assign(m, m + d.consumed);
          break;
        }
        case proto::Type::ticket_failed: {
          proto::TicketFailed f;
          std::memcpy(&f, m, sizeof f);
          c->failed[f.ticket] = f.error;
          ++c->failures_seen;
          break;
        }
        case proto::Type::completion: {
          proto::Completion k;
          std::memcpy(&k, m, sizeof k);
          settle_groups(c, k.completed);
          break;
        }
        case proto::Type::error: {
          proto::Error e;
          std::memcpy(&e, m, sizeof e);
          if (e.h.flags & proto::kErrorFatal) {
            why = e.code != 0 ? e.code : -EPROTO;
            stop = true;
          } else if (e.request != 0) {
            // A refused request: answered as a Reply with the error.
            auto r = proto::make<proto::Reply>(proto::Type::reply);
            r.request = e.request;
            r.status = e.code;
            const auto* p = reinterpret_cast<const uint8_t*>(&r);
            c->replies[e.request].assign(p, p + sizeof r);
          }
          break;
        }
        case proto::Type::shutdown:
          why = -ESHUTDOWN;
          stop = true;
          break;
        case proto::Type::export_reply: {
          uint64_t request;
          std::memcpy(&request, m + sizeof(proto::Header), sizeof request);
          c->replies[request].assign(m, m + d.consumed);
          if (d.type == proto::Type::export_reply) {
            proto::ExportReply e;
            std::memcpy(&e, m, sizeof e);
            // Its descriptor came with these bytes, so it is the oldest unclaimed one.
            if (e.status == 0 && e.kind == proto::kIpcLevelZero && !c->fds_in.empty()) {
              c->reply_fds[request] = c->fds_in.front();
              c->fds_in.pop_front();
            }
          }
          break;
        }
        default:
          break;  // nothing else is meant for a client; ignore it
      }
      lock.unlock();
      c->cv.notify_all();
      off += d.consumed;
    }
    if (stop) break;
    std::memmove(buf.data(), buf.data() + off, used - off);
    used -= off;
    if (used == buf.size()) break;  // cannot happen with fixed-size messages
  }
  {
    std::lock_guard lock(c->mu);
    c->dead = why;
  }
  c->cv.notify_all();
}

uint64_t completed_now(const ferry_client* c) { return c->seg->completed.load(std::memory_order_acquire); }

// Waits until `ready()` holds, or the deadline passes, or the connection dies.
// Spins a little first: completions usually arrive within microseconds.
template <class Ready>
int wait_for(ferry_client* c, Clock::time_point deadline, bool forever, Ready ready) {
  const auto spin_end = Clock::now() + kSpin;
  while (Clock::now() < spin_end) {
    if (ready()) return 0;
    if (!forever && Clock::now() >= deadline) break;
  }
  std::unique_lock lock(c->mu);
  for (;;) {
    if (ready()) return 0;
    if (c->dead != 0) return c->dead;
    if (forever) {
      // The daemon updates the counter before sending the Completion that
      // wakes us; the timed wait only guards against a lost wake-up.
      c->cv.wait_for(lock, std::chrono::milliseconds(100));
    } else {
      if (Clock::now() >= deadline) return -ETIMEDOUT;
      c->cv.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
  }
}

// How much of an upload goes in one slot. An upload of a few slots or less is
// cut into at least kMinPieces pieces (of at least kMinPiece bytes) so that
// staging the next piece overlaps with the device copying this one.
constexpr uint64_t kMinPieces = 4;
constexpr uint64_t kMinPiece = 64 * 1024;
uint64_t piece_bytes(uint64_t slot_bytes, uint64_t bytes) {
  if (bytes >= kMinPieces * slot_bytes) return slot_bytes;
  uint64_t p = (bytes + kMinPieces - 1) / kMinPieces;
  p = (p + 4095) / 4096 * 4096;
  return std::min(slot_bytes, std::max(p, kMinPiece));
}

// Uploads at least this large stage several pieces at once (see Stager).
constexpr uint64_t kParallelFrom = 8ull << 20;

// Waits until ticket t's slot may be written: every ticket up to
// t - slot_count is done, and no download still reads the slot.
int wait_slot(ferry_client* c, uint64_t t) {
  const uint32_t s = static_cast<uint32_t>((t - 1) % c->slot_count);
  const uint64_t need = t > c->slot_count ? t - c->slot_count : 0;
  const auto t0 = Clock::now();
  int r = wait_for(c, {}, true, [&] { return completed_now(c) >= need && c->hold[s].load() == 0; });
  // Published for the daemon's metrics (histogram of slot wait time).
  const auto ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  auto* m = reinterpret_cast<proto::ClientMetrics*>(reinterpret_cast<char*>(c->seg) + proto::kClientMetricsOffset);
  m->slot_waits.fetch_add(1, std::memory_order_relaxed);
  m->slot_wait_ns.fetch_add(ns, std::memory_order_relaxed);
  m->buckets[proto::latency_bucket(ns)].fetch_add(1, std::memory_order_relaxed);
  FERRY_SLOT_TAKEN(c->slots + uint64_t{s} * c->slot_bytes);
  return r;
}

// Takes the next ticket and waits until its slot may be written.
int take_slot(ferry_client* c, uint64_t* ticket) {
  {
    std::lock_guard lock(c->mu);
    if (c->dead != 0) return c->dead;
    *ticket = c->next_ticket++;
  }
  return wait_slot(c, *ticket);
}

int send_transfer(ferry_client* c, proto::Type type, uint64_t ticket, uint64_t length, uint64_t buffer,
                  uint64_t offset) {
  auto m = proto::make<proto::Transfer>(type);
  m.ticket = ticket;
  m.slot = static_cast<uint32_t>((ticket - 1) % c->slot_count);
  m.length = length;
  m.buffer = buffer;
  m.offset = offset;
  return send_all(c, &m, sizeof m);
}

char* slot_of(ferry_client* c, uint64_t ticket) {
  return c->slots + ((ticket - 1) % c->slot_count) * c->slot_bytes;
}

int check_range(ferry_client* c, ferry_buffer buf, uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return -EINVAL;
  if (offset + bytes < offset) return -EINVAL;  // 64-bit wrap
  std::lock_guard lock(c->mu);
  auto it = c->buffer_sizes.find(buf);
  if (it == c->buffer_sizes.end()) return -ENOENT;
  if (offset > it->second || bytes > it->second - offset) return -EINVAL;
  return 0;
}

// Sends a request (with fd, if >= 0) and waits for its answer (a Reply,
// TokenReply, BufferReply or ExportReply), copied into *out; *reply_fd gets
// an fd that came with it.
template <class Reply>
int request(ferry_client* c, void* msg, size_t n, uint64_t* request_field, Reply* out, int fd = -1,
            int* reply_fd = nullptr) {
  uint64_t id;
  {
    std::lock_guard lock(c->mu);
    if (c->dead != 0) return c->dead;
    id = c->next_request++;
  }
  *request_field = id;
  if (int r = fd >= 0 ? send_with_fd(c, msg, n, fd) : send_all(c, msg, n); r != 0) return r;
  std::unique_lock lock(c->mu);
  c->cv.wait(lock, [&] { return c->replies.count(id) != 0 || c->dead != 0; });
  auto it = c->replies.find(id);
  if (it == c->replies.end()) return c->dead;
  if (it->second.size() != sizeof(Reply)) {
    // A refusal comes as a plain Reply whatever was asked: report its error.
    proto::Reply refused{};
    int err = -EPROTO;
    if (it->second.size() == sizeof refused) {
      std::memcpy(&refused, it->second.data(), sizeof refused);
      if (refused.status != 0) err = refused.status;
    }
    c->replies.erase(it);
    return err;
  }
  std::memcpy(out, it->second.data(), sizeof(Reply));
  c->replies.erase(it);
  if (auto f = c->reply_fds.find(id); f != c->reply_fds.end()) {
    if (reply_fd != nullptr) {
      *reply_fd = f->second;
    } else {
      ::close(f->second);
    }
    c->reply_fds.erase(f);
  }
  return 0;
}

// The ticket's outcome, once done: its error (reported once) or 0.
int outcome(ferry_client* c, uint64_t t) {
  std::unique_lock lock(c->mu);
  // Failure messages are counted in the segment before `completed` passes
  // them: wait until we hold as many as the daemon sent.
  c->cv.wait(lock, [&] { return c->failures_seen >= c->seg->failures.load(std::memory_order_acquire) || c->dead != 0; });
  settle_groups(c, completed_now(c));
  auto it = c->failed.find(t);
  if (it == c->failed.end()) return 0;
  int err = it->second;
  c->failed.erase(it);
  return err;
}

std::string default_socket() {
  const char* env = std::getenv("FERRY_SOCKET");
  return env != nullptr && *env != '\0' ? env : "/run/ferry/ferryd-0.sock";
}


// Receives the Welcome and the segment's fd (or the daemon's refusal).
int receive_welcome(int fd, proto::Welcome* w, int* seg_fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  union {
    proto::Welcome w;
    proto::Error e;
    char raw[256];
  } u{};
  size_t got = 0;
  *seg_fd = -1;
  while (got < sizeof(proto::Header) || got < reinterpret_cast<proto::Header*>(u.raw)->size) {
    ssize_t n = proto::recv_fds(fd, u.raw + got, sizeof u.raw - got, 0, [&](int f) {
      if (*seg_fd >= 0) ::close(*seg_fd);  // only one is expected; keep the last
      *seg_fd = f;
    });
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? -ECONNRESET : (errno == EAGAIN ? -ETIMEDOUT : -errno);
    got += static_cast<size_t>(n);
    if (got >= sizeof(proto::Header) && reinterpret_cast<proto::Header*>(u.raw)->size > sizeof u.raw) break;
  }
  proto::Decoded d = proto::decode(u.raw, got);
  int r = 0;
  if (d.result != proto::Decode::good || d.consumed != got) {
    r = -EPROTO;
  } else if (d.type == proto::Type::error) {
    r = u.e.code != 0 ? u.e.code : -EPROTO;
  } else if (d.type != proto::Type::welcome || *seg_fd < 0) {
    r = -EPROTO;
  } else {
    *w = u.w;
  }
  timeval zero{0, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
  if (r != 0 && *seg_fd >= 0) {
    ::close(*seg_fd);
    *seg_fd = -1;
  }
  return r;
}

}  // namespace

extern "C" {

int ferry_connect(const char* socket_path, ferry_client** out) {
  if (out == nullptr) return -EINVAL;
  *out = nullptr;
  const std::string path = socket_path != nullptr ? socket_path : default_socket();
  auto c = std::make_unique<ferry_client>();
  if (int r = proto::connect_unix(path, &c->fd); r != 0) return r;
  auto fail = [&](int r) {
    ::close(c->fd);
    return r;
  };
  auto hello = proto::make<proto::Hello>(proto::Type::hello);
  hello.magic = proto::kMagic;
  hello.version = proto::kVersion;
  hello.features = proto::kFeaturesV1;
  char comm[proto::kNameBytes + 1] = {};
  if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(comm, sizeof comm, f) != nullptr) comm[std::strcspn(comm, "\n")] = '\0';
    std::fclose(f);
  }
  proto::set_text(hello.name, comm);
  if (int r = send_all(c.get(), &hello, sizeof hello); r != 0) return fail(r);
  int seg_fd = -1;
  if (int r = receive_welcome(c->fd, &c->welcome, &seg_fd); r != 0) return fail(r);
  const proto::Welcome& w = c->welcome;
  // Populated now, so the first uploads do not pay a page fault per 4 KiB.
  void* p = ::mmap(nullptr, w.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, seg_fd, 0);
  ::close(seg_fd);
  if (p == MAP_FAILED) return fail(-ENOMEM);
  c->seg = static_cast<proto::Segment*>(p);
  if (c->seg->magic != proto::kMagic || w.slot_count == 0 || w.slots_offset + w.slot_count * w.slot_bytes > w.segment_bytes) {
    ::munmap(p, w.segment_bytes);
    return fail(-EPROTO);
  }
  c->seg_bytes = w.segment_bytes;
  c->slot_count = w.slot_count;
  c->slot_bytes = w.slot_bytes;
  c->slots = static_cast<char*>(p) + w.slots_offset;
  c->hold = std::make_unique<std::atomic<uint32_t>[]>(c->slot_count);
  ferry_client* raw = c.get();
  c->receiver = std::thread([raw] { receive_loop(raw); });
  *out = c.release();
  return 0;
}

void ferry_disconnect(ferry_client* c) {
  if (c == nullptr) return;
  ::shutdown(c->fd, SHUT_RDWR);
  if (c->receiver.joinable()) c->receiver.join();
  ::close(c->fd);
  for (int fd : c->fds_in) ::close(fd);
  for (auto& [r, fd] : c->reply_fds) ::close(fd);
  if (c->seg != nullptr) ::munmap(c->seg, c->seg_bytes);
  delete c;
}

int ferry_buffer_alloc(ferry_client* c, uint64_t bytes, ferry_buffer* out) {
  if (c == nullptr || out == nullptr || bytes == 0) return -EINVAL;
  auto m = proto::make<proto::Alloc>(proto::Type::alloc);
  m.bytes = bytes;
  proto::Reply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r); e != 0) return e;
  if (r.status != 0) return r.status;
  std::lock_guard lock(c->mu);
  c->buffer_sizes[r.value] = bytes;
  *out = r.value;
  return 0;
}

int ferry_buffer_free(ferry_client* c, ferry_buffer buf) {
  if (c == nullptr) return -EINVAL;
  auto m = proto::make<proto::Free>(proto::Type::free);
  m.buffer = buf;
  proto::Reply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r); e != 0) return e;
  if (r.status == 0) {
    std::lock_guard lock(c->mu);
    c->buffer_sizes.erase(buf);
  }
  return r.status;
}

int ferry_buffer_size(ferry_client* c, ferry_buffer buf, uint64_t* bytes) {
  if (c == nullptr || bytes == nullptr) return -EINVAL;
  std::lock_guard lock(c->mu);
  auto it = c->buffer_sizes.find(buf);
  if (it == c->buffer_sizes.end()) return -ENOENT;
  *bytes = it->second;
  return 0;
}

namespace {
int upload(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
           const proto::UploadSignal* signal, ferry_ticket* out) {
  if (c == nullptr || src == nullptr) return -EINVAL;
  if (int r = check_range(c, dst, dst_offset, bytes); r != 0) return r;
  const uint64_t piece = piece_bytes(c->slot_bytes, bytes);
  const uint64_t pieces = (bytes + piece - 1) / piece;
  const char* from = static_cast<const char*>(src);
  // Every piece's ticket is taken now, in one run, so the last one is known
  // before any is sent: the upload's outcome is that of all its pieces.
  uint64_t first;
  {
    std::lock_guard lock(c->mu);
    if (c->dead != 0) return c->dead;
    first = c->next_ticket;
    c->next_ticket += pieces;
    if (pieces > 1) {
      std::vector<uint64_t> earlier(pieces - 1);
      for (uint64_t i = 0; i + 1 < pieces; ++i) earlier[i] = first + i;
      c->groups.emplace(first + pieces - 1, std::move(earlier));
    }
  }
  // Piece i: wait for its slot, stage it, send it. While one piece is staged
  // the device copies earlier ones; large uploads stage several at once.
  auto one = [&](uint64_t i) {
    const uint64_t t = first + i;
    const uint64_t off = i * piece;
    const uint64_t n = std::min(piece, bytes - off);
    if (int r = wait_slot(c, t); r != 0) return r;
    std::memcpy(slot_of(c, t), from + off, n);
    FERRY_SLOT_HANDED_ON(slot_of(c, t));
    return send_transfer(c, proto::Type::upload, t, n, dst, dst_offset + off);
  };
  int r = 0;
  // With a signal, the last piece goes last: it carries the event, and the
  // in-order queue then signals it after every earlier piece.
  const uint64_t parallel = signal != nullptr ? pieces - 1 : pieces;
  if (parallel >= 4 && bytes >= kParallelFrom) {
    r = c->stager.run(parallel, one);
  } else {
    for (uint64_t i = 0; i < parallel && r == 0; ++i) r = one(i);
  }
  if (r == 0 && signal != nullptr) {
    const uint64_t t = first + pieces - 1;
    const uint64_t off = (pieces - 1) * piece;
    const uint64_t n = bytes - off;
    r = wait_slot(c, t);
    if (r == 0) {
      std::memcpy(slot_of(c, t), from + off, n);
      FERRY_SLOT_HANDED_ON(slot_of(c, t));
      proto::UploadSignal m = *signal;
      m.t = proto::make<proto::Transfer>(proto::Type::upload_signal);
      m.t.h.size = sizeof m;
      m.t.ticket = t;
      m.t.slot = static_cast<uint32_t>((t - 1) % c->slot_count);
      m.t.length = n;
      m.t.buffer = dst;
      m.t.offset = dst_offset + off;
      r = send_all(c, &m, sizeof m);
    }
  }
  if (r != 0) return r;
  if (out != nullptr) *out = first + pieces - 1;
  return 0;
}
}  // namespace

int ferry_upload(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
                 ferry_ticket* out) {
  return upload(c, dst, dst_offset, src, bytes, nullptr, out);
}

int ferry_upload_signal(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
                        uint64_t pool, uint32_t event, ferry_ticket* out) {
  proto::UploadSignal s{};
  s.pool = pool;
  s.event = event;
  return upload(c, dst, dst_offset, src, bytes, &s, out);
}

int ferry_buffer_grant(ferry_client* c, ferry_buffer buf, uint32_t rights, ferry_token* out) {
  if (c == nullptr || out == nullptr) return -EINVAL;
  auto m = proto::make<proto::Grant>(proto::Type::grant);
  m.buffer = buf;
  m.rights = rights;
  proto::TokenReply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r); e != 0) return e;
  if (r.status == 0) std::memcpy(out->bytes, r.token, sizeof out->bytes);
  return r.status;
}

int ferry_buffer_revoke(ferry_client* c, ferry_buffer buf, const ferry_token* token) {
  if (c == nullptr) return -EINVAL;
  auto m = proto::make<proto::Revoke>(proto::Type::revoke);
  m.buffer = buf;
  if (token != nullptr) std::memcpy(m.token, token->bytes, sizeof m.token);
  proto::Reply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r); e != 0) return e;
  return r.status;
}

int ferry_buffer_open(ferry_client* c, const ferry_token* token, ferry_buffer* out, uint64_t* bytes) {
  if (c == nullptr || token == nullptr || out == nullptr) return -EINVAL;
  auto m = proto::make<proto::Open>(proto::Type::open);
  std::memcpy(m.token, token->bytes, sizeof m.token);
  proto::BufferReply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r); e != 0) return e;
  if (r.status != 0) return r.status;
  {
    std::lock_guard lock(c->mu);
    c->buffer_sizes[r.buffer] = r.bytes;
  }
  *out = r.buffer;
  if (bytes != nullptr) *bytes = r.bytes;
  return 0;
}

int ferry_buffer_export(ferry_client* c, ferry_buffer buf, ferry_ipc_handle* out) {
  if (c == nullptr || out == nullptr) return -EINVAL;
  auto m = proto::make<proto::Export>(proto::Type::export_buffer);
  m.buffer = buf;
  proto::ExportReply r{};
  int fd = -1;
  if (int e = request(c, &m, sizeof m, &m.request, &r, -1, &fd); e != 0) return e;
  if (r.status != 0) return r.status;
  std::memset(out, 0, sizeof *out);
  out->kind = r.kind;
  out->bytes = r.bytes;
  std::memcpy(out->data, r.handle, sizeof out->data);
  out->fd = -1;
  if (r.kind == proto::kIpcLevelZero) {
    if (fd < 0) return -EPROTO;
    out->fd = fd;
    std::memcpy(out->data, &fd, sizeof fd);  // the handle names this process's descriptor
  }
  return 0;
}

int ferry_buffer_import(ferry_client* c, const ferry_ipc_handle* h, ferry_buffer* out) {
  if (c == nullptr || h == nullptr || out == nullptr || h->bytes == 0) return -EINVAL;
  if (h->kind == proto::kIpcLevelZero && h->fd < 0) return -EINVAL;
  auto m = proto::make<proto::Import>(proto::Type::import_buffer);
  m.bytes = h->bytes;
  m.kind = h->kind;
  std::memcpy(m.handle, h->data, sizeof m.handle);
  proto::BufferReply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r, h->kind == proto::kIpcLevelZero ? h->fd : -1); e != 0)
    return e;
  if (r.status != 0) return r.status;
  {
    std::lock_guard lock(c->mu);
    c->buffer_sizes[r.buffer] = r.bytes;
  }
  *out = r.buffer;
  return 0;
}

int ferry_event_pool_register(ferry_client* c, const ferry_ipc_handle* h, uint32_t count, uint64_t* pool) {
  if (c == nullptr || h == nullptr || pool == nullptr || count == 0) return -EINVAL;
  if (h->kind != proto::kIpcLevelZero || h->fd < 0) return -EINVAL;
  auto m = proto::make<proto::EventPool>(proto::Type::event_pool);
  m.count = count;
  m.kind = h->kind;
  std::memcpy(m.handle, h->data, sizeof m.handle);
  proto::Reply r{};
  if (int e = request(c, &m, sizeof m, &m.request, &r, h->fd); e != 0) return e;
  if (r.status == 0) *pool = r.value;
  return r.status;
}

int ferry_wait(ferry_client* c, ferry_ticket t, int64_t timeout_ns) {
  if (c == nullptr || t == 0) return -EINVAL;
  {
    std::lock_guard lock(c->mu);
    if (t >= c->next_ticket) return -EINVAL;  // not issued yet
  }
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  if (int r = wait_for(c, deadline, forever, [&] { return completed_now(c) >= t; }); r != 0) return r;
  return outcome(c, t);
}

int ferry_flush(ferry_client* c, int64_t timeout_ns) {
  if (c == nullptr) return -EINVAL;
  uint64_t last;
  {
    std::lock_guard lock(c->mu);
    last = c->next_ticket - 1;
  }
  if (last == 0) return 0;
  const bool forever = timeout_ns < 0;
  const auto deadline = Clock::now() + std::chrono::nanoseconds(forever ? 0 : timeout_ns);
  if (int r = wait_for(c, deadline, forever, [&] { return completed_now(c) >= last; }); r != 0) return r;
  outcome(c, last);  // brings failure bookkeeping up to date
  std::lock_guard lock(c->mu);
  auto it = c->failed.begin();
  if (it == c->failed.end() || it->first > last) return 0;
  int err = it->second;
  // Report the oldest; the flush covers the rest.
  c->failed.erase(c->failed.begin(), c->failed.upper_bound(last));
  return err;
}

int ferry_download(ferry_client* c, ferry_buffer src, uint64_t src_offset, void* dst, uint64_t bytes) {
  if (c == nullptr || dst == nullptr) return -EINVAL;
  if (int r = check_range(c, src, src_offset, bytes); r != 0) return r;
  char* to = static_cast<char*>(dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(c->slot_bytes, bytes - done);
    uint64_t t = 0;
    if (int r = take_slot(c, &t); r != 0) return r;
    auto& hold = c->hold[(t - 1) % c->slot_count];
    hold.fetch_add(1);  // before the ticket can complete: no upload may reuse the slot until we read it
    int r = send_transfer(c, proto::Type::download, t, n, src, src_offset + done);
    if (r == 0) r = wait_for(c, {}, true, [&] { return completed_now(c) >= t; });
    if (r == 0) r = outcome(c, t);
    if (r == 0) std::memcpy(to + done, slot_of(c, t), n);
    FERRY_SLOT_HANDED_ON(slot_of(c, t));
    hold.fetch_sub(1);
    c->cv.notify_all();
    if (r != 0) return r;
    done += n;
  }
  return 0;
}

int ferry_get_info(ferry_client* c, ferry_info* out) {
  if (c == nullptr || out == nullptr) return -EINVAL;
  std::memset(out, 0, sizeof *out);
  out->client_id = c->welcome.client_id;
  out->slot_bytes = c->slot_bytes;
  out->slot_count = c->slot_count;
  std::snprintf(out->device, sizeof out->device, "%s", proto::get_text(c->welcome.device).c_str());
  std::snprintf(out->backend, sizeof out->backend, "%s", proto::get_text(c->welcome.backend).c_str());
  return 0;
}

ferry_ticket ferry_completed(ferry_client* c) { return c == nullptr ? 0 : completed_now(c); }

const char* ferry_strerror(int err) {
  switch (err) {
    case 0: return "success";
    case -ENOENT: return "no such buffer, or no daemon socket at that path";
    case -ECONNREFUSED: return "no daemon accepts on that socket (stale socket file?)";
    case -ECONNRESET: return "the daemon closed the connection";
    case -ESHUTDOWN: return "the daemon is shutting down";
    case -EUSERS: return "the daemon serves its maximum number of clients";
    case -EPROTO: return "protocol error: client and daemon do not agree";
    case -EDQUOT: return "over this client's device-memory quota";
    case -EIO: return "the device failed the transfer";
    case -ETIMEDOUT: return "timed out";
    case -EINVAL: return "invalid argument (offset or length out of range?)";
    default: break;
  }
  if (err < 0) {
    const char* s = strerrordesc_np(-err);
    if (s != nullptr) return s;
  }
  return "unknown error";
}

const char* ferry_version(void) { return FERRY_VERSION_STRING; }

}  // extern "C"
