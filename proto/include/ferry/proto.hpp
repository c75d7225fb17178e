// SPDX-License-Identifier: MIT
// ferry wire protocol, version 8 (one data plane): every message between
// libferry and ferryd, and the layout of a client's staging segment. This
// file is the single source of truth; both sides include it.
//
// Two planes. The socket carries control only: Hello, buffers, grants,
// import/export, event pools, status and admin requests. Every
// transfer (upload, download, held, signalled, fenced, committed, cancelled)
// is an entry in the client's submission ring, and every ticket's outcome is
// in the segment: `completed` (and the device's `device_completed`) say it is
// done, a Result record of the ticket says it failed and why.
//
// Compatibility rule: a Hello carries kVersion; the daemon serves exactly
// its own version and refuses any other with a fatal Error
// (-EPROTONOSUPPORT) whose text names both versions, before anything else
// is sent. The version goes up whenever a message, the segment layout or
// the meaning of a word changes; within one version only Welcome::flags
// differs from daemon to daemon.
//
// Transport: a Unix stream socket. Every message starts with a Header whose
// `size` counts the whole message. All fields are little-endian fixed-width
// integers (client and daemon share one machine). Reserved fields are sent as
// zero and ignored on receipt.
//
// Flow:
//   client -> Hello                daemon -> Welcome + segment fd + doorbell (SCM_RIGHTS)
//   client -> Alloc/Free           daemon -> Reply (value = buffer id; a Free of an
//                                  import once ferryd unmapped it: the client may free its memory then)
//   client -> StatusRequest        daemon -> StatusReply (JSON text follows the fixed part)
//   client -> Grant / Revoke       daemon -> TokenReply / Reply   (sharing a buffer)
//   client -> Open (a token)       daemon -> BufferReply          (a granted buffer, by local id)
//   client -> Export               daemon -> ExportReply (+ the IPC handle's fd, Level Zero)
//   client -> Import (+ fd)        daemon -> BufferReply          (the client's own allocation)
//   client -> EventPool (+ fd)     daemon -> Reply (value = pool id)
//   client -> StagingGrow          daemon -> StagingReply (+ the area's memfd)
//   client -> StagingRelease       daemon -> Reply
//   The doorbell is no message: while the segment's `doorbell` word asks for
//   it (ferryd's poller sleeps), a client that published a ring entry adds 1
//   sends a byte on the doorbell of its Welcome (a stream socket; EAGAIN
//   means a wake-up is pending already).
//   daemon -> Error                a request was refused; `fatal` closes the session
//   daemon -> Shutdown             the daemon is stopping; the session ends next
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ferry::proto {

inline constexpr uint32_t kMagic = 0x59524546;  // "FERY"
// 3: transfers and outcomes only in the segment; 4: staging_threads; 5: DirectWords;
// 6: the doorbell a socket of the Welcome, no message; Welcome::flags for feature bits;
// 7: staging areas beyond the segment (StagingGrow), RunWords in the header page;
// 8: an import has a fence (BufferReply::fence) and may be granted; a Free
// of an import is answered once ferryd no longer maps it
inline constexpr uint16_t kVersion = 8;

// Welcome::flags: the one thing that differs between daemons of this
// version. Everything else the protocol names is always there (the
// timeline counter, downloads, status, upload_after, fences: the feature bits
// of protocols 1 to 5, which a Hello no longer sends).
//   kDeviceTimeline: Segment::device_completed is written by the device
//   itself, in queue order (where the backend can and the segment is
//   registered; the daemon keeps the word otherwise).
inline constexpr uint64_t kDeviceTimeline = 1u << 0;

// Message types. The kinds of ring entry share the numbering (upload,
// download, upload_signal, upload_after, upload_fenced: SubmitEntry::type);
// they, completion and ticket_failed are no messages since protocol 3,
// doorbell none since protocol 6, and a peer that sends one is refused as
// for any unknown type.
enum class Type : uint16_t {
  hello = 1,
  welcome = 2,
  error = 3,
  alloc = 4,
  free = 5,
  reply = 6,
  upload = 7,
  download = 8,
  completion = 9,
  ticket_failed = 10,
  status_request = 11,
  status_reply = 12,
  shutdown = 13,
  grant = 14,
  revoke = 15,
  open = 16,
  token_reply = 17,
  buffer_reply = 18,
  export_buffer = 19,
  export_reply = 20,
  import_buffer = 21,
  event_pool = 22,
  upload_signal = 23,
  upload_after = 24,
  doorbell = 25,  // no message: see the Flow above
  admin_request = 26,
  upload_fenced = 27,
  staging_grow = 28,
  staging_reply = 29,
  staging_release = 30,
};
// The highest type number; every number from 1 to it is a message or a ring
// entry kind (tests check).
inline constexpr Type kLastType = Type::staging_release;

struct Header {
  uint16_t type;   // Type
  uint16_t flags;  // per message; 0 unless stated
  uint32_t size;   // bytes of the whole message, header included
};
static_assert(sizeof(Header) == 8);

inline constexpr size_t kNameBytes = 16;
inline constexpr size_t kDeviceNameBytes = 64;

struct Hello {
  Header h;
  uint32_t magic;           // kMagic
  uint16_t version;         // kVersion
  uint16_t reserved0;
  uint64_t reserved3;       // 0 (protocols up to 5: the feature bits wanted)
  uint32_t slots_wanted;    // 0: the daemon's default
  uint32_t reserved1;
  char name[kNameBytes];    // program name, for ferryctl; NUL-padded
  uint64_t reserved2[2];
};
static_assert(sizeof(Hello) == 64);
static_assert(offsetof(Hello, slots_wanted) == 24);
static_assert(offsetof(Hello, name) == 32);

struct Welcome {
  Header h;
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint64_t flags;           // kDeviceTimeline, or 0
  uint64_t client_id;
  uint64_t segment_bytes;   // size of the memfd that comes with this message
  uint64_t slot_bytes;      // the largest transfer
  uint32_t slot_count;      // the staging area is slot_count * slot_bytes
  uint32_t ring_entries;    // tickets in flight at once (ring_entries(slot_count))
  uint64_t slots_offset;    // byte offset of the staging area in the segment
  uint64_t max_buffer_bytes;
  char device[kDeviceNameBytes];
  char backend[kNameBytes];
  uint64_t ring_offset;     // byte offset of the submission ring
  uint64_t fences_offset;   // byte offset of the kFences fences
  uint64_t results_offset;  // byte offset of the ring_entries Result records
};
static_assert(sizeof(Welcome) == 176);
static_assert(offsetof(Welcome, slot_bytes) == 40);
static_assert(offsetof(Welcome, device) == 72);

struct Alloc {
  Header h;
  uint64_t request;         // echoed in the Reply
  uint64_t bytes;
};
static_assert(sizeof(Alloc) == 24);

struct Free {
  Header h;
  uint64_t request;
  uint64_t buffer;
};
static_assert(sizeof(Free) == 24);

struct Reply {
  Header h;
  uint64_t request;
  int32_t status;           // 0 or a negative errno
  uint32_t fence;           // Alloc: the buffer's fence, index + 1 (0: none); 0 otherwise
  uint64_t value;           // Alloc: the buffer id
};
static_assert(sizeof(Reply) == 32);

// Tickets are numbered by the client from 1, one per transfer; at most
// ring_entries of them are in flight (ticket t only once every ticket up to
// t - ring_entries completed). Where in the staging area a transfer lies is
// the client's choice (libferry: a FIFO of byte ranges, so small transfers
// share what one slot would hold); the daemon checks that it lies inside,
// and that a transfer of a quarter slot or more has at most slot_count such
// transfers in flight before it.
// SubmitEntry flags: this piece is the last of one ferry_upload call (the
// daemon counts calls by it; pieces are counted apart).
constexpr uint32_t kTransferLastPiece = 1;
inline constexpr uint64_t kStagingAlign = 64;
// An upload to buffer 0 copies nothing: its ticket completes, with no error
// (a reservation given up, ferry_upload_cancel), inside the window as every
// other ticket. Buffer ids start at 1.
inline constexpr uint64_t kNoBuffer = 0;
// The smallest upload libferry stages with threads (StagingTuning's
// parallel_from). ferryd counts a client as transferring, for
// Segment::staging_threads, once one upload call of this many bytes into a
// buffer it may write was accepted.
inline constexpr uint64_t kThreadedUpload = 1ull << 20;

inline constexpr uint16_t kErrorFatal = 1;  // Header.flags of Error: the session closes
inline constexpr size_t kErrorTextBytes = 112;

struct Error {
  Header h;
  uint64_t request;         // the request refused, 0 if none
  int32_t code;             // negative errno
  uint32_t reserved;
  char text[kErrorTextBytes];
};
static_assert(sizeof(Error) == 136);

struct StatusRequest {
  Header h;
  uint64_t request;
};
static_assert(sizeof(StatusRequest) == 16);

// An administrator's action (ferryctl disconnect), allowed without Hello;
// answered by a Reply: 0, -EPERM (not one of the daemon's admins), -ENOENT
// (no such connected client), -EINVAL (unknown action).
inline constexpr uint32_t kAdminDisconnect = 1;  // end client `client`'s session
inline constexpr uint32_t kAdminDrain = 2;       // stop as on SIGTERM: copies drain, clients are told, exit 0
struct AdminRequest {
  Header h;
  uint64_t request;
  uint32_t action;
  uint32_t reserved;
  uint64_t client;
};
static_assert(sizeof(AdminRequest) == 32);

// Followed by `json_bytes` of UTF-8 JSON (the schema in ferryctl(1)).
struct StatusReply {
  Header h;
  uint64_t request;
  uint32_t json_bytes;
  uint32_t reserved;
};
static_assert(sizeof(StatusReply) == 24);
inline constexpr uint32_t kMaxStatusJson = 1u << 20;

struct Shutdown {
  Header h;
  int32_t reason;           // negative errno, -ESHUTDOWN when stopping
  uint32_t reserved;
};
static_assert(sizeof(Shutdown) == 16);

// ---------------------------------------------------------------- staging areas
// More staging for direct uploads, on demand: an area is a memfd of `bytes`
// (rounded up to kStagingAreaStep, sealed against resizing) that only this
// client maps; its queue copies from it (ferry_upload_direct), so ferryd
// never maps or reads it. ferryd counts each area against its user's bounds
// (--user-staging bytes, kMaxStagingAreas areas) until the client releases
// it, and then punches its pages out (a client that kept its mapping reads
// zeros; what it writes there after is its own memory), or, when its
// session ends without that, until the client's process exits: ferryd only
// closes its descriptor (copies the client's queue has yet to run from an
// area still read its bytes) and counts the areas while the process may map
// them. Answered by a
// StagingReply: status 0 and the memfd, or -EDQUOT past a bound (the Error
// before it says which), -EINVAL for 0 bytes or more than kMaxStagingArea.
inline constexpr uint64_t kMaxStagingArea = 1ull << 34;  // 16 GiB
inline constexpr uint64_t kStagingAreaStep = 2ull << 20;  // areas come in whole 2 MiB
inline constexpr uint32_t kMaxStagingAreas = 64;           // per user: each holds a descriptor of ferryd's
struct StagingGrow {
  Header h;
  uint64_t request;
  uint64_t bytes;           // rounded up to whole pages by the daemon
};
static_assert(sizeof(StagingGrow) == 24);

struct StagingReply {
  Header h;
  uint64_t request;
  int32_t status;           // 0 or a negative errno
  uint32_t reserved;
  uint64_t area;            // names it in StagingRelease; per client, from 1
  uint64_t bytes;           // the memfd's size
};
static_assert(sizeof(StagingReply) == 40);

// The client unmapped area `area` (its queue finished with it): a Reply, 0
// or -ENOENT for an area it does not hold.
struct StagingRelease {
  Header h;
  uint64_t request;
  uint64_t area;
};
static_assert(sizeof(StagingRelease) == 24);

// ---------------------------------------------------------------- sharing
inline constexpr size_t kTokenBytes = 32;  // 256 random bits
inline constexpr size_t kIpcBytes = 64;    // ZE_MAX_IPC_HANDLE_SIZE, CU_IPC_HANDLE_SIZE

enum Rights : uint32_t {
  kRightUpload = 1u << 0,
  kRightDownload = 1u << 1,
};

// The owner of `buffer` lets whoever presents the returned token use it.
struct Grant {
  Header h;
  uint64_t request;
  uint64_t buffer;
  uint32_t rights;          // Rights
  uint32_t reserved;
};
static_assert(sizeof(Grant) == 32);

struct TokenReply {
  Header h;
  uint64_t request;
  int32_t status;
  uint32_t reserved;
  uint8_t token[kTokenBytes];
};
static_assert(sizeof(TokenReply) == 56);

// Ends one grant (that token) or, with an all-zero token, every grant of the buffer.
struct Revoke {
  Header h;
  uint64_t request;
  uint64_t buffer;
  uint8_t token[kTokenBytes];
};
static_assert(sizeof(Revoke) == 56);

struct Open {
  Header h;
  uint64_t request;
  uint8_t token[kTokenBytes];
};
static_assert(sizeof(Open) == 48);

// A buffer in the receiver's own namespace: opened through a grant, or imported.
struct BufferReply {
  Header h;
  uint64_t request;
  int32_t status;
  uint32_t rights;
  uint64_t buffer;
  uint64_t bytes;
  uint32_t fence;           // Import: the buffer's fence, index + 1 (0: none); Open: 0 (its owner's)
  uint32_t reserved;
};
static_assert(sizeof(BufferReply) == 48);
static_assert(offsetof(BufferReply, fence) == 40);

enum IpcKind : uint32_t {
  kIpcNone = 0,
  kIpcLevelZero = 1,        // ze_ipc_mem_handle_t; its first 4 bytes are an fd, sent with SCM_RIGHTS
  kIpcCuda = 2,             // CUipcMemHandle; no fd
};

struct Export {
  Header h;
  uint64_t request;
  uint64_t buffer;
};
static_assert(sizeof(Export) == 24);

struct ExportReply {
  Header h;
  uint64_t request;
  int32_t status;
  uint32_t kind;            // IpcKind
  uint64_t bytes;
  uint8_t handle[kIpcBytes];
};
static_assert(sizeof(ExportReply) == 96);

// The client's own device allocation, given to the daemon to upload into.
// Level Zero: sent with the allocation's fd (SCM_RIGHTS).
struct Import {
  Header h;
  uint64_t request;
  uint64_t bytes;
  uint32_t kind;            // IpcKind
  uint32_t reserved;
  uint8_t handle[kIpcBytes];
};
static_assert(sizeof(Import) == 96);

// An IPC event pool of the client's context (ZE_EVENT_POOL_FLAG_IPC), sent with its fd.
struct EventPool {
  Header h;
  uint64_t request;
  uint32_t count;           // events in the pool
  uint32_t kind;            // IpcKind
  uint8_t handle[kIpcBytes];
};
static_assert(sizeof(EventPool) == 88);


// ---------------------------------------------------------------- submission ring
// A transfer is not a message: the client describes it in the ring entry of
// its ticket (ticket t: entry (t - 1) % ring_entries,
// at Welcome::ring_offset) and stores `ticket` last, with release. ferryd takes
// tickets strictly in order: it reads entry (next - 1) % ring_entries, copies
// every word out of shared memory, and uses the copy only if its `ticket` is
// `next`. The client can rewrite an entry at any moment: ferryd checks the
// copy as it would a message, and a bad one closes only that session.
struct SubmitEntry {
  std::atomic<uint64_t> ticket;   // stored last: the entry describes this ticket
  // kind (Type: upload, download, upload_signal, upload_after,
  // upload_fenced) | flags (kTransferLastPiece) << 16 | staging << 32, the
  // transfer's first byte in the staging area in units of kStagingAlign
  std::atomic<uint64_t> type;
  std::atomic<uint64_t> length;   // bytes, 1 to slot_bytes
  std::atomic<uint64_t> buffer;   // the buffer's id (kNoBuffer: nothing to copy, an upload only)
  std::atomic<uint64_t> offset;   // in the buffer
  // upload_after: held until the segment's app_value >= after (the
  // application's queue got there); upload_fenced: the same, 0 for no wait.
  std::atomic<uint64_t> after;
  // upload_signal: the event pool's id; upload_fenced: held until the
  // destination's fence `released` >= this (0: no wait).
  std::atomic<uint64_t> pool;
  // upload_signal: the event's index, signalled after the copy;
  // upload_fenced: the value the device writes into the destination's fence
  // `ready` after the copy (0: none; a failed copy writes it too, after
  // `failed`). A destination without a fence fails the ticket (-ENOTSUP).
  std::atomic<uint64_t> event;
};
static_assert(sizeof(SubmitEntry) == 64);

// One transfer as a ring entry carries it: the client writes it with
// write_entry, ferryd copies it out with read_entry (and then checks every
// value, as it would a message's). The one place the entry's words are
// packed and unpacked.
struct Transfer {
  Type kind = Type::upload;  // upload, download, upload_signal, upload_after, upload_fenced
  uint32_t flags = 0;        // kTransferLastPiece
  uint64_t staging = 0;      // the first byte in the staging area, a multiple of kStagingAlign
  uint64_t length = 0, buffer = 0, offset = 0;
  uint64_t after = 0, pool = 0, event = 0;  // by kind, as SubmitEntry says
};

// Fills e with t for `ticket`, the ticket stored last (release): once
// ferryd sees the ticket, it sees the rest.
inline void write_entry(SubmitEntry& e, uint64_t ticket, const Transfer& t) {
  const uint64_t staging = t.staging / kStagingAlign;
  e.type.store(static_cast<uint64_t>(t.kind) | uint64_t{t.flags} << 16 | staging << 32, std::memory_order_relaxed);
  e.length.store(t.length, std::memory_order_relaxed);
  e.buffer.store(t.buffer, std::memory_order_relaxed);
  e.offset.store(t.offset, std::memory_order_relaxed);
  e.after.store(t.after, std::memory_order_relaxed);
  e.pool.store(t.pool, std::memory_order_relaxed);
  e.event.store(t.event, std::memory_order_relaxed);
  e.ticket.store(ticket, std::memory_order_release);
}

// Every word of e copied out once (the client may be rewriting it: only
// the copy counts), after its ticket was seen with acquire. Unchecked.
inline Transfer read_entry(const SubmitEntry& e) {
  Transfer t;
  const uint64_t word = e.type.load(std::memory_order_relaxed);
  t.kind = static_cast<Type>(word & 0xffffu);
  t.flags = static_cast<uint32_t>((word >> 16) & 0xffffu);
  t.staging = (word >> 32) * kStagingAlign;
  t.length = e.length.load(std::memory_order_relaxed);
  t.buffer = e.buffer.load(std::memory_order_relaxed);
  t.offset = e.offset.load(std::memory_order_relaxed);
  t.after = e.after.load(std::memory_order_relaxed);
  t.pool = e.pool.load(std::memory_order_relaxed);
  t.event = e.event.load(std::memory_order_relaxed);
  return t;
}

// ---------------------------------------------------------------- outcomes
// The outcome of a failed ticket, written by ferryd alone into the record
// of its ring entry's index ((ticket - 1) % ring_entries, at
// Welcome::results_offset): `error` (a negative errno) first, then `ticket`
// with release, then Segment::failures, all before either timeline word
// passes the ticket. A ticket that succeeds writes no record. The record of
// ticket t is overwritten only by a failure of ticket t + ring_entries,
// which the client sends only once t completed: it reads the records up to
// `completed` whenever `failures` moved, before it sends beyond the window.
struct Result {
  std::atomic<uint64_t> ticket;  // the ticket this record is of (stored last)
  std::atomic<int64_t> error;    // negative errno
};
static_assert(sizeof(Result) == 16);

// ---------------------------------------------------------------- fences
// Ordering across processes, on the device: each allocation has a fence,
// two words in its owner's segment. Whoever uploads into the buffer (its
// owner, or a producer that opened it through a grant) may have the device
// write a value into `ready` right after the copy (an upload_fenced entry's publish),
// so that the owner's queue waits for the bytes with no host round trip;
// the owner's queue (or the owner) writes `released` once it is done
// reading, and an upload may be held until it is (its release).
// ferryd writes `ready` (or has the device write it) and `failed`, and
// zeroes the words when it hands the fence to a new allocation; it reads
// `released` as a number that decides only when uploads into that owner's
// buffer start.
struct alignas(64) Fence {
  std::atomic<uint64_t> ready;     // the last value published, in queue order
  std::atomic<uint64_t> released;  // the owner's
  std::atomic<uint64_t> failed;    // the value of the last publishing upload that failed (0: none)
  uint64_t reserved[5];
};
static_assert(sizeof(Fence) == 64);
static_assert(offsetof(Fence, failed) == 16);
inline constexpr uint32_t kFences = 1024;  // per client: its allocations at once

// ---------------------------------------------------------------- segment
// The staging segment: this header, the submission ring (ring_entries
// entries), the results (ring_entries records), the fences (kFences of
// them), then the staging
// area of slot_count * slot_bytes at slots_offset. The daemon creates it (memfd), maps it, and hands the fd to
// exactly one client.
//
// Ownership: the daemon alone writes `completed`, `failures`, the Result
// records and `doorbell`, and bumps `wake` (so may the client, for its own
// threads); the device (or, where it cannot, the daemon) alone writes
// `device_completed`; the client (or its application's queue) alone writes
// the ring, the slots, `app_value`, `sleepers` and `wake_at`, and reads a
// slot used by a download only after that ticket completed. The daemon
// never reads back what it wrote, and what it reads (ring entries, checked
// as they are copied out; `app_value`, `sleepers`, `wake_at`, fences'
// `released`) only decides for this client.
struct alignas(64) Segment {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint32_t slot_count;
  uint32_t ring_entries;
  uint64_t slot_bytes;
  uint64_t slots_offset;
  uint64_t segment_bytes;
  uint64_t reserved2[3];
  // Every ticket <= completed is done. Stored with release after the
  // failures among them are recorded (Result, `failures`); a client may spin
  // on it.
  alignas(64) std::atomic<uint64_t> completed;
  // Result records written so far; raised after the record and before
  // either timeline word passes the failed ticket: a client that sees this
  // unchanged knows no ticket it sees done failed since it last looked.
  alignas(64) std::atomic<uint64_t> failures;
  // 1 while the daemon serves this client, 2 once it is stopping.
  alignas(64) std::atomic<uint32_t> daemon_state;
  // Every ticket <= device_completed has been executed by the device's queue
  // (copied, or refused with its failure already counted above). Written by
  // the device right after the copies, so it may run ahead of `completed`;
  // a queue of the application may wait on it (read after upload).
  alignas(64) std::atomic<uint64_t> device_completed;
  // The application's own timeline, written by its queue (or by the client);
  // An upload_after entry waits for it (write after read).
  alignas(64) std::atomic<uint64_t> app_value;
  // A futex word: the daemon bumps it and wakes it after moving `completed`
  // while `sleepers` is non-zero.
  alignas(64) std::atomic<uint32_t> wake;
  std::atomic<uint32_t> sleepers;  // threads of the client asleep on `wake`
  // The smallest `completed` a sleeper waits for (the client lowers it before
  // it sleeps; the daemon wakes only once `completed` reaches it, then sets
  // it to UINT64_MAX). Read by the daemon as a number that decides only
  // this client's wake-ups.
  std::atomic<uint64_t> wake_at;
  // 1 while ferryd's poller sleeps (or never polls): a client that published
  // a ring entry then sends a byte on its doorbell. The daemon stores 1, then looks at
  // the ring once more; the client stores its entry, then looks here (both
  // with seq_cst fences): one of them sees the other.
  alignas(64) std::atomic<uint32_t> doorbell;
  // The threads this client may stage one upload with, its caller's
  // included, decided by ferryd for all its clients at once (0: the client
  // is the only one transferring, and uses its whole pool). A quarter of the
  // host's cores is shared out by user first, then among one user's clients
  // that transfer now (an upload of kThreadedUpload or more into a buffer
  // within the last 0.5-1 s), at least 1 each:
  // no user's connections shrink another user's share. Stored when those
  // numbers change; a hint (a client that ignores it competes for the cores).
  std::atomic<uint32_t> staging_threads;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(offsetof(Segment, completed) == 64);
static_assert(offsetof(Segment, failures) == 128);
static_assert(offsetof(Segment, daemon_state) == 192);
static_assert(offsetof(Segment, device_completed) == 256);
static_assert(offsetof(Segment, app_value) == 320);
static_assert(offsetof(Segment, wake) == 384);
static_assert(offsetof(Segment, sleepers) == 388);
static_assert(offsetof(Segment, wake_at) == 392);
static_assert(offsetof(Segment, doorbell) == 448);
static_assert(offsetof(Segment, staging_threads) == 452);
static_assert(sizeof(Segment) == 512);
// Wakes every thread asleep on seg.wake, if any sleeps, once the words they
// wait on were written: the one wake both sides use (libferry's own threads,
// ferryd after moving `completed` or a fence's word). proto/src/wake.cpp.
void wake_sleepers(Segment& seg);
inline constexpr uint64_t kSegmentHeaderBytes = 4096;  // the ring starts on the next page

// Tickets a client may have in flight: four per slot's worth of staging, so
// that small transfers, which share the staging area's bytes, are not held
// to one per slot (a stream of 1 KiB uploads then sleeps once per ~48 of
// them rather than once per 12).
inline constexpr uint32_t ring_entries(uint32_t slot_count) { return slot_count * 4; }
// The window's other rule: a transfer of a quarter slot or more is large, and
// at most large_bound(slot_count) large transfers of a client are in flight
// at once (a deeper queue of large copies only adds to every client's wait
// on a shared device). libferry waits for room before it writes such an
// entry; ferryd leaves an entry past the bound in the ring until one retires.
inline constexpr bool is_large(uint64_t length, uint64_t slot_bytes) { return length * 4 >= slot_bytes; }
inline constexpr uint32_t large_bound(uint32_t slot_count) { return slot_count; }
// Where the ring and the staging area lie in a segment of `slot_count` slots:
// the ring right after the header page, then the results, each on pages of
// its own.
inline constexpr uint64_t ring_offset() { return kSegmentHeaderBytes; }
inline constexpr uint64_t page_up(uint64_t n) { return (n + 4095) / 4096 * 4096; }
inline constexpr uint64_t results_offset(uint32_t slot_count) {
  return kSegmentHeaderBytes + page_up(uint64_t{ring_entries(slot_count)} * sizeof(SubmitEntry));
}
// The fences on the pages after the results: a page-aligned range a
// consumer registers with its own context alone, not the whole segment.
inline constexpr uint64_t fences_offset(uint32_t slot_count) {
  return results_offset(slot_count) + page_up(uint64_t{ring_entries(slot_count)} * sizeof(Result));
}
inline constexpr uint64_t kFencesBytes = uint64_t{kFences} * sizeof(Fence);
inline constexpr uint64_t slots_offset(uint32_t slot_count) { return fences_offset(slot_count) + kFencesBytes; }

// Latency histograms (ferryctl metrics): upper bounds of the buckets in
// nanoseconds; a last bucket counts everything above.
inline constexpr uint64_t kLatencyBoundsNs[] = {10'000,     50'000,     100'000,     500'000,
                                                1'000'000,  5'000'000,  10'000'000,  50'000'000,
                                                100'000'000, 500'000'000, 1'000'000'000};
inline constexpr size_t kLatencyBuckets = sizeof(kLatencyBoundsNs) / sizeof(kLatencyBoundsNs[0]) + 1;

inline size_t latency_bucket(uint64_t ns) {
  size_t i = 0;
  while (i < kLatencyBuckets - 1 && ns > kLatencyBoundsNs[i]) ++i;
  return i;
}

// Written by the client alone, at kClientMetricsOffset in the segment's
// header page; the daemon only reads it, for metrics, and trusts nothing in it.
struct ClientMetrics {
  std::atomic<uint64_t> slot_waits;    // pieces that waited (or not) for their slot
  std::atomic<uint64_t> slot_wait_ns;  // total time they waited
  std::atomic<uint64_t> buckets[kLatencyBuckets];  // per bucket, not cumulative
};
inline constexpr uint64_t kClientMetricsOffset = 2048;
static_assert(kClientMetricsOffset >= sizeof(Segment));
static_assert(kClientMetricsOffset + sizeof(ClientMetrics) <= kSegmentHeaderBytes);

// ---------------------------------------------------------------- direct uploads
// A client with a GPU context of its own may append the copy from its
// staging on its own queue (ferry_upload_direct): such transfers are no ring
// entries and ferryd takes no part in them. They are numbered apart from the
// ring's tickets (1, 2, ... per client) and complete in that order: the
// client's queue writes each one's number into `completed` right after its
// copy. The client writes the rest, for ferryctl: the last number appended,
// and how many calls and bytes so far. ferryd only reads these words, to
// show them in this client's own row, and trusts none of them.
struct DirectWords {
  alignas(64) std::atomic<uint64_t> completed;  // the client's queue (its device)
  alignas(64) std::atomic<uint64_t> issued;     // the client: the last number appended
  std::atomic<uint64_t> uploads;                // the client: ferry_upload_direct calls that appended
  std::atomic<uint64_t> bytes;                  // the client: their bytes
};
inline constexpr uint64_t kDirectOffset = 1024;
static_assert(kDirectOffset >= sizeof(Segment));
static_assert(kDirectOffset % 64 == 0 && kDirectOffset + sizeof(DirectWords) <= 2048);

// ---------------------------------------------------------------- ferry-run
// A process run under ferry-run (its interposers make the clients) marks
// its clients and counts, in the first one it connected (its lead), the
// copies it left to the driver and why. Written by the client alone, at
// kRunOffset; ferryd only reads the words, to show them in that client's
// row (status "run"), and trusts none of them.
enum class Pass : uint32_t {
  small = 0,        // below the size from which staging pays (--min-bytes)
  pinned,           // the source is pinned, registered or the device's host memory already
  not_upload,       // not host to device (device to device, to the host, host to host)
  captured,         // the stream is being captured into a graph (a replay would read recycled staging)
  replayable,       // a regular Level Zero command list (it may be executed again)
  no_daemon,        // ferryd absent, stopped, or it refused the connection
  no_room,          // staging full and no more granted (--user-staging), or the queue holds it
  error,            // a call of ferry's failed: the copy went to the driver instead
  unsupported,      // a shape or memory ferry does not stage (strided 2D, an unknown context)
  busy,             // every client of the process is busy with another queue
};
inline constexpr uint32_t kPassReasons = 10;
inline constexpr const char* kPassNames[kPassReasons] = {"small",     "pinned",    "not_upload", "captured", "replayable",
                                                         "no_daemon", "no_room",   "error",      "unsupported", "busy"};
inline constexpr uint32_t kRunLead = 1;       // RunWords::role: this client counts its process's copies
inline constexpr uint32_t kRunLane = 2;       // one more client of such a process (another queue)
struct RunWords {
  std::atomic<uint32_t> role;                     // 0: not under ferry-run; kRunLead or kRunLane
  uint32_t reserved;
  std::atomic<uint64_t> staged;                   // lead: copies staged by ferry (every client of the process)
  std::atomic<uint64_t> staged_bytes;
  std::atomic<uint64_t> passed[kPassReasons];     // lead: copies left to the driver, by Pass
  std::atomic<uint64_t> passed_bytes;
};
inline constexpr uint64_t kRunOffset = 1536;
static_assert(kRunOffset >= kDirectOffset + sizeof(DirectWords));
static_assert(kRunOffset + sizeof(RunWords) <= kClientMetricsOffset);

// ---------------------------------------------------------------- decoder
enum class Decode { good, bad, need_more };

struct Decoded {
  Decode result = Decode::need_more;
  size_t consumed = 0;      // bytes of the message (good), 0 otherwise
  Type type{};
  const char* why = "";     // for bad
};

// Looks at the front of `data`: a whole valid message (good), the start of
// one (need_more), or bytes that can never become one (bad). Checks the
// header and the message's size for its type, and Hello's magic and version;
// field values are the receiver's to check against its own state.
Decoded decode(const void* data, size_t bytes);

// Fixed size of a message of `t`, or 0 for an unknown type.
size_t fixed_size(Type t);

// Returns a message of type T with its header filled in.
template <class T>
T make(Type t) {
  T m{};
  m.h.type = static_cast<uint16_t>(t);
  m.h.size = sizeof(T);
  return m;
}

// Copies a C string into a fixed field, NUL-padded, always terminated.
template <size_t N>
void set_text(char (&dst)[N], const std::string& s) {
  size_t n = s.size() < N - 1 ? s.size() : N - 1;
  for (size_t i = 0; i < N; ++i) dst[i] = i < n ? s[i] : '\0';
}

// Reads a fixed field that may lack its terminator.
template <size_t N>
std::string get_text(const char (&src)[N]) {
  size_t n = 0;
  while (n < N && src[n] != '\0') ++n;
  return std::string(src, n);
}

}  // namespace ferry::proto
