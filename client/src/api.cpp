// SPDX-License-Identifier: MIT
// The C ABI (ferry/ferry.h): argument checks, then the connection, the
// tickets, the staging FIFO and the transfer paths do the work.
#include <grp.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client.hpp"
#include "ferry/wire.hpp"

namespace proto = ferry::proto;
namespace fc = ferry::client;

namespace {

// Bumped in every child that fork() makes: a client remembers the value it
// connected under, so one inherited across a fork is told apart without a
// system call on the hot path (getpid() is one).
std::atomic<uint64_t> fork_generation{0};
[[maybe_unused]] const bool atfork_registered = [] {
  return pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1, std::memory_order_relaxed); }) == 0;
}();

proto::Hello hello_message(const char* given) {
  auto hello = proto::make<proto::Hello>(proto::Type::hello);
  hello.magic = proto::kMagic;
  hello.version = proto::kVersion;
  // What ferryctl shows for this client: the name given to
  // ferry_connect_named (ferry.torch names its trainer and workers so), else
  // $FERRY_CLIENT_NAME, else the program's name.
  char comm[proto::kNameBytes + 1] = {};
  const char* name = given != nullptr && *given != '\0' ? given : std::getenv("FERRY_CLIENT_NAME");
  if (name != nullptr && *name != '\0') {
    std::strncpy(comm, name, proto::kNameBytes);
  } else if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(comm, sizeof comm, f) != nullptr) comm[std::strcspn(comm, "\n")] = '\0';
    std::fclose(f);
  }
  proto::set_text(hello.name, comm);
  return hello;
}

// Whether the layout a Welcome gives (a server's word, not trusted) fits
// its segment: the slots aligned and inside it; the ring, then the
// results, then the fences, each inside the segment and before the slots.
static bool layout_fits(const proto::Welcome& w) {
  if (w.slot_count == 0 || w.ring_entries == 0 || w.slot_bytes == 0 || w.slot_bytes % proto::kStagingAlign != 0 ||
      w.slots_offset % proto::kStagingAlign != 0 ||
      uint64_t{w.slot_count} * w.slot_bytes / proto::kStagingAlign > UINT32_MAX ||
      w.slots_offset + uint64_t{w.slot_count} * w.slot_bytes > w.segment_bytes)
    return false;
  const uint64_t ring_end = w.ring_offset + uint64_t{w.ring_entries} * sizeof(proto::SubmitEntry);
  const uint64_t results_end = w.results_offset + uint64_t{w.ring_entries} * sizeof(proto::Result);
  if (w.ring_offset < sizeof(proto::Segment) || w.ring_offset % alignof(proto::SubmitEntry) != 0 ||
      ring_end > w.slots_offset || w.results_offset < ring_end || w.results_offset % alignof(proto::Result) != 0 ||
      results_end > w.slots_offset)
    return false;
  return w.fences_offset >= results_end && w.fences_offset % alignof(proto::Fence) == 0 &&
         w.fences_offset + proto::kFencesBytes <= w.slots_offset;
}

// Maps the segment the Welcome describes. 0 or -errno.
int map_segment(ferry_client* c, int seg_fd) {
  const proto::Welcome& w = c->welcome;
  // Populated now, so the first uploads do not pay a page fault per 4 KiB;
  // never past the memfd's end, nor one that could shrink later (-EPROTO:
  // the Welcome and the file disagree, or the server could kill us).
  if (int r = ferry::util::sealed_for(seg_fd, w.segment_bytes); r != 0) return r;
  if (int r = c->mapping.map(seg_fd, w.segment_bytes); r != 0) return r == -EPROTO ? r : -ENOMEM;
  char* p = static_cast<char*>(c->mapping.data());
  // A forked child does not inherit the segment: bytes it wrote there would
  // land in the parent's staging area (owner_check refuses its calls; this
  // makes a stray pointer fault instead of corrupting an upload).
  (void)::madvise(p, w.segment_bytes, MADV_DONTFORK);
  auto* seg = reinterpret_cast<proto::Segment*>(p);
  if (seg->magic != proto::kMagic || !layout_fits(w)) {
    c->mapping.reset();
    return -EPROTO;
  }
  c->ring = reinterpret_cast<proto::SubmitEntry*>(p + w.ring_offset);
  c->fence_words = reinterpret_cast<proto::Fence*>(p + w.fences_offset);
  c->seg = seg;
  c->seg_bytes = w.segment_bytes;
  c->slot_count = w.slot_count;
  c->slot_bytes = w.slot_bytes;
  c->ring_entries = w.ring_entries;
  c->reserved = std::make_unique<std::atomic<uint64_t>[]>(w.ring_entries);
  c->tickets.attach(seg, reinterpret_cast<proto::Result*>(p + w.results_offset), w.ring_entries);
  c->fifo.attach(p + w.slots_offset, w.slot_count, w.slot_bytes, w.ring_entries);
  return 0;
}

using fc::last_error;

int connect_failed(const std::string& path, int r, const std::string& refusal = {}) {
  std::string& s = last_error();
  switch (r) {
    case -ENXIO:
      s = "no daemon socket at " + path + ": is ferryd running? (libferry uses $FERRY_SOCKET, else " +
          proto::default_socket_path() + ")";
      break;
    case -EACCES:
    case -EPERM:
      s = proto::access_refusal(path);
      break;
    case -ECONNREFUSED:
      s = "nothing accepts on " + path + ": a socket file left by a stopped ferryd? start ferryd again";
      break;
    case -EPROTONOSUPPORT:
    case -EPROTO:
      // Another release's ferryd: a newer one names both protocol versions,
      // an older one says only that it does not know this one.
      s = "ferryd at " + path + " refused this libferry (protocol " + std::to_string(proto::kVersion) + ")" +
          (refusal.empty() ? std::string() : ": " + refusal) +
          "; libferry and ferryd must come from the same release";
      break;
    default:
      s = "connect to " + path + ": " + (refusal.empty() ? std::string(ferry_strerror(r)) : "ferryd refused: " + refusal);
  }
  return r;
}

}  // namespace

ferry_client::ferry_client()
    : conn(tickets), pid(::getpid()), generation(fork_generation.load(std::memory_order_relaxed)) {
  // Areas of a client that stopped uploading go back too: the grower's
  // thread trims them while no upload holds the lock (it never waits for it).
  areas.set_idle([this] {
    std::unique_lock one_call(direct_mu, std::try_to_lock);
    if (one_call.owns_lock()) areas.trim(tickets.direct_completed(), conn, false);
  });
}

namespace ferry::client {

std::string& last_error() {
  thread_local std::string s;
  return s;
}

int misuse(int err, const char* fn, const std::string& what) {
  last_error() = std::string(fn) + ": " + what;
  return err;
}

int owner_check(const ferry_client* c) {
  // Every call on a client starts here: ferry_last_error says only what this call adds.
  if (std::string& e = last_error(); !e.empty()) e.clear();
  if (c == nullptr) return misuse(-EBADF, "ferry", "the client is NULL (ferry_connect gives one)");
  if (c->generation == fork_generation.load(std::memory_order_relaxed)) [[likely]]
    return 0;
  last_error() = "this ferry client was connected by process " + std::to_string(c->pid) + "; process " +
                 std::to_string(::getpid()) +
                 " is a fork of it and may not use it (its staging memory and socket are the parent's): "
                 "connect a client of its own with ferry_connect";
  return -ECHILD;
}

}  // namespace ferry::client

extern "C" {

int ferry_connect(const char* socket_path, ferry_client** out) {
  return ferry_connect_named(socket_path, nullptr, out);
}

int ferry_connect_named(const char* socket_path, const char* name, ferry_client** out) {
  last_error().clear();
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_connect", "out is NULL (where the client is returned)");
  *out = nullptr;
  const std::string path = socket_path != nullptr ? socket_path : proto::socket_path_from_env();
  auto c = std::make_unique<ferry_client>();
  int seg_fd = -1;
  int r = c->conn.open(path, hello_message(name), &c->welcome, &seg_fd);
  // No socket file: no daemon there. Said apart from -ENOENT, which means
  // "no such buffer" everywhere else.
  if (r == -ENOENT) r = -ENXIO;
  if (r != 0) return connect_failed(path, r, c->conn.refusal());
  c->socket_path = path;
  r = map_segment(c.get(), seg_fd);
  ::close(seg_fd);
  if (r == -EPROTO) {
    last_error() = "ferryd at " + path +
                   " sent a staging segment that does not match its Welcome, or that it could shrink (not sealed): "
                   "not used (is something other than ferryd listening there?)";
    return r;
  }
  if (r != 0) return connect_failed(path, r);
  c->conn.start();
  *out = c.release();
  return 0;
}

void ferry_disconnect(ferry_client* c) {
  if (c == nullptr) return;
  if (fc::owner_check(c) == -ECHILD) {
    // In a forked child: the connection is the parent's (a shutdown() here
    // would end it for the parent too) and the threads this struct would
    // join exist only there. Close this process's copy of the socket and
    // let the rest go with the process.
    c->conn.abandon();
    return;
  }
  {
    std::lock_guard lock(c->direct_mu);
    c->areas.drop_all(c->conn);  // detached while the caller's contexts still exist
  }
  c->conn.close();
  delete c;  // the segment is unmapped last (ferry_client::mapping)
}

int ferry_upload(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
                 ferry_ticket* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  const ferry_iovec one{src, bytes};
  return fc::upload(c, dst.id, dst_offset, &one, 1, {}, out);
}

int ferry_upload_gather(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const ferry_iovec* src,
                        size_t count, const ferry_upload_opts* opts, ferry_ticket* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  fc::UploadOptions o;
  if (opts != nullptr) {
    // Sized: a caller built against an older header passes a shorter struct.
    if (opts->size < offsetof(ferry_upload_opts, publish) + sizeof opts->publish)
      return fc::misuse(-EINVAL, "ferry_upload_gather",
                        "opts->size is " + std::to_string(opts->size) + ": set it to sizeof(ferry_upload_opts)");
    if (opts->flags != 0)
      return fc::misuse(-EINVAL, "ferry_upload_gather", "opts->flags must be 0 (no flags are defined)");
    o.after = opts->after;
    o.release = opts->after_release;
    o.publish = opts->publish;
    o.fenced = o.release != 0 || o.publish != 0;
    if (o.fenced && c->fence_words == nullptr)
      return fc::misuse(-ENOTSUP, "ferry_upload_gather", "this daemon has no fences (an older ferryd): no after_release or publish");
  }
  return fc::upload(c, dst.id, dst_offset, src, count, o, out);
}

int ferry_upload_reserve(ferry_client* c, uint64_t bytes, ferry_reservation* r) {
  if (int e = fc::owner_check(c); e != 0) return e;
  return fc::reserve(c, bytes, r);
}

int ferry_upload_commit(ferry_client* c, ferry_reservation* r, ferry_buffer dst, uint64_t dst_offset,
                        ferry_ticket* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  return fc::commit(c, r, dst.id, dst_offset, out);
}

int ferry_upload_cancel(ferry_client* c, ferry_reservation* r) {
  if (int e = fc::owner_check(c); e != 0) return e;
  return fc::cancel(c, r);
}

int ferry_upload_after(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
                       uint64_t after, ferry_ticket* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  const ferry_iovec one{src, bytes};
  fc::UploadOptions o;
  o.after = after;
  return fc::upload(c, dst.id, dst_offset, &one, 1, o, out);
}

int ferry_signal(ferry_client* c, uint64_t value) {
  if (int e = fc::owner_check(c); e != 0) return e;
  // Only forward: a value the application's queue already passed stays.
  uint64_t seen = c->seg->app_value.load(std::memory_order_relaxed);
  while (seen < value && !c->seg->app_value.compare_exchange_weak(seen, value, std::memory_order_release)) {
  }
  return 0;
}

int ferry_get_timeline(ferry_client* c, ferry_timeline* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_get_timeline", "out is NULL");
  ferry_timeline t{};
  t.segment = c->seg;
  t.segment_bytes = c->seg_bytes;
  t.device_completed = reinterpret_cast<volatile uint64_t*>(&c->seg->device_completed);
  t.app_value = reinterpret_cast<volatile uint64_t*>(&c->seg->app_value);
  t.direct_completed = reinterpret_cast<volatile uint64_t*>(&c->tickets.direct_words().completed);
  t.device_written = (c->welcome.flags & proto::kDeviceTimeline) != 0;
  return fc::fill_versioned(out, t, "ferry_get_timeline");
}

int ferry_upload_signal(ferry_client* c, ferry_buffer dst, uint64_t dst_offset, const void* src, uint64_t bytes,
                        uint64_t pool, uint32_t event, ferry_ticket* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  const ferry_iovec one{src, bytes};
  fc::UploadOptions o;
  o.signal = true;
  o.pool = pool;
  o.event = event;
  return fc::upload(c, dst.id, dst_offset, &one, 1, o, out);
}

int ferry_download(ferry_client* c, ferry_buffer src, uint64_t src_offset, void* dst, uint64_t bytes) {
  if (int e = fc::owner_check(c); e != 0) return e;
  return fc::download(c, src.id, src_offset, dst, bytes);
}

int ferry_wait(ferry_client* c, ferry_ticket t, int64_t timeout_ns) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (t == 0) return fc::misuse(-EINVAL, "ferry_wait", "ticket 0 is no ticket (an upload gives one)");
  if ((t & FERRY_DIRECT_TICKET) != 0) {
    const uint64_t n = t & ~FERRY_DIRECT_TICKET, last = c->tickets.direct_issued();
    if (n == 0) return fc::misuse(-EINVAL, "ferry_wait", "direct ticket 0 is no ticket (an upload gives one)");
    if (n > last)
      return fc::misuse(-ESRCH, "ferry_wait",
                        "direct ticket " + std::to_string(n) + " was never issued by this client (its last is " +
                            std::to_string(last) + ")");
    return c->tickets.wait_direct(n, timeout_ns);
  }
  if (const uint64_t last = c->tickets.issued(); t > last)
    return fc::misuse(-ESRCH, "ferry_wait",
                      "ticket " + std::to_string(t) + " was never issued by this client (its last is " +
                          std::to_string(last) + ")");
  return c->tickets.wait(t, timeout_ns);
}

int ferry_flush(ferry_client* c, int64_t timeout_ns) {
  if (int e = fc::owner_check(c); e != 0) return e;
  return c->tickets.flush(timeout_ns);
}

int ferry_get_info(ferry_client* c, ferry_info* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (out == nullptr) return fc::misuse(-EFAULT, "ferry_get_info", "out is NULL");
  ferry_info i{};
  i.client_id = c->welcome.client_id;
  i.slot_bytes = c->slot_bytes;
  i.slot_count = c->slot_count;
  std::snprintf(i.device, sizeof i.device, "%s", proto::get_text(c->welcome.device).c_str());
  std::snprintf(i.backend, sizeof i.backend, "%s", proto::get_text(c->welcome.backend).c_str());
  i.daemon_pid = c->conn.peer_pid();
  return fc::fill_versioned(out, i, "ferry_get_info");
}

int ferry_connection_error(ferry_client* c) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (int e = c->conn.ended(); e != 0) return e;
  // Stopping: it serves what it has, takes no new client, and goes.
  return c->seg->daemon_state.load(std::memory_order_acquire) == 2 ? -ESHUTDOWN : 0;
}

ferry_ticket ferry_completed(ferry_client* c) { return fc::owner_check(c) != 0 ? 0 : c->tickets.completed(); }

const char* ferry_strerror(int err) {
  switch (err) {
    case 0: return "success";
    case -ENOENT: return "no such buffer (or not one of this client's)";
    case -ENXIO: return "no daemon socket at that path: is ferryd running? (ferry_last_error names the path)";
    case -EACCES: return "not allowed to connect: ask to join the group of ferryd's socket (ferry_last_error names it)";
    case -ECONNREFUSED: return "no daemon accepts on that socket (stale socket file?)";
    case -ECONNRESET: return "the daemon closed the connection";
    case -ESHUTDOWN: return "the daemon is shutting down";
    case -ECONNABORTED: return "disconnected by an administrator of the daemon (ferryctl disconnect): connect again";
    case -EUSERS: return "ferryd serves the most clients it may, of all users or of yours (ferry_last_error says which)";
    case -EPROTO: return "protocol error: client and daemon do not agree";
    case -EDQUOT: return "past a bound on what one user may hold in ferryd (ferry_last_error names it and its flag)";
    case -EIO: return "the device failed the transfer";
    case -ETIMEDOUT: return "timed out";
    case -EINVAL: return "invalid argument: a zero or contradictory value (ferry_last_error names it)";
    case -EBADF: return "no client (NULL), or a handle's descriptor is not open";
    case -EFAULT: return "a pointer argument is NULL (ferry_last_error names it)";
    case -ERANGE: return "past the end of the buffer (ferry_last_error gives offset, length and size)";
    case -ESRCH: return "no such ticket: this client never issued it";
    case -EMSGSIZE: return "more bytes than a staging slot holds";
    case -EOVERFLOW: return "the source ranges total more than 2^64 bytes";
    case -ECHILD: return "this client belongs to the process that connected it: a forked child must connect its own (ferry_last_error names both)";
    default: break;
  }
  if (err < 0) {
    const char* s = strerrordesc_np(-err);
    if (s != nullptr) return s;
  }
  return "unknown error";
}

const char* ferry_version(void) { return FERRY_VERSION_STRING; }

const char* ferry_last_error(void) { return last_error().c_str(); }

const char* ferry_socket_path(const ferry_client* c) {
  if (c != nullptr) return c->socket_path.c_str();
  thread_local std::string resolved;
  resolved = proto::socket_path_from_env();
  return resolved.c_str();
}

}  // extern "C"
