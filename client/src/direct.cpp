// SPDX-License-Identifier: MIT
// ferry_upload_direct: staged by libferry, copied by the caller's own queue.
//
// Two places an upload's bytes can go. The staging area (the segment's
// FIFO, shared with ring uploads): each piece gets a number of its own, and
// the queue writes it after the piece's copy, so the bytes come free piece
// by piece behind the queue. Or, when the staging area has no room now and
// the caller set staging hooks, an area of its own (areas.hpp): the upload
// is staged there whole, copied in as few copies as its pieces allow, and
// gets one number, which frees the whole area.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "client.hpp"
#include "gather.hpp"
#include "pieces.hpp"
#include "staging_plan.hpp"
#include "tsan.hpp"

namespace ferry::client {

namespace {

constexpr uint32_t kKnownFlags =
    FERRY_DIRECT_NO_WAIT | FERRY_DIRECT_CALLER_THREAD | FERRY_DIRECT_NO_GROW | FERRY_DIRECT_GROW_LATER;

int check_ops(const void* src, uint64_t bytes, const ferry_direct_ops* ops) {
  const char* fn = "ferry_upload_direct";
  if (ops == nullptr) return misuse(-EFAULT, fn, "ops is NULL");
  if (ops->size < sizeof(ferry_direct_ops))
    return misuse(-EINVAL, fn, "ops->size is " + std::to_string(ops->size) + ": set it to sizeof(ferry_direct_ops)");
  if ((ops->flags & ~kKnownFlags) != 0)
    return misuse(-EINVAL, fn,
                  "ops->flags is " + std::to_string(ops->flags) +
                      ": FERRY_DIRECT_NO_WAIT, FERRY_DIRECT_CALLER_THREAD, FERRY_DIRECT_NO_GROW and "
                      "FERRY_DIRECT_GROW_LATER are all there are");
  if (ops->copy == nullptr || ops->write == nullptr) return misuse(-EFAULT, fn, "ops->copy or ops->write is NULL");
  if (src == nullptr) return misuse(-EFAULT, fn, "the source is NULL");
  if (bytes == 0) return misuse(-EINVAL, fn, "0 bytes (nothing to copy)");
  return 0;
}

// One upload's pieces, appended to the queue in order as they are staged
// (by any thread): the copies, and the writes of the numbers after them.
class Appender {
 public:
  // shared: pieces may be staged by several threads at once (the stager's).
  Appender(ferry_client* c, const ferry_direct_ops* ops, const StagingPlan& plan, uint64_t bytes, uint64_t first,
           bool area, bool shared)
      : c_(c), ops_(ops), plan_(plan), bytes_(bytes), first_(first), area_(area), shared_(shared),
        at_(plan.pieces, nullptr) {}

  // Piece i is staged at `to`: appends what is now appendable. 0, or the
  // queue's refusal of a write (the client is done for then).
  int staged(uint64_t i, const char* to) {
    std::unique_lock lock(mu_, std::defer_lock);
    if (shared_) lock.lock();  // staged on this thread alone: nothing to order but its own calls
    at_[i] = to;
    while (next_ < plan_.pieces && at_[next_] != nullptr && broken_ == 0) {
      // The pieces staged so far that lie back to back (in an area always;
      // in the staging area unless it wrapped between them) go as one copy,
      // and one number, the last piece's, says they are all done: each copy
      // and each write is a command the device runs (16 copies and 16 writes
      // per 16 MiB upload cost the H200's loop about a tenth).
      uint64_t end = next_ + 1;
      while (end < plan_.pieces && at_[end] != nullptr && at_[end] == at_[end - 1] + plan_.length(end - 1, bytes_))
        ++end;
      const uint64_t off = plan_.offset(next_);
      const uint64_t n = (end == plan_.pieces ? bytes_ : plan_.offset(end)) - off;
      copy(off, at_[next_], n);
      next_ = end;
      // An area's one number comes after its last copy.
      if (!area_ || next_ == plan_.pieces) write(area_ ? first_ : first_ + next_ - 1);
    }
    return broken_;
  }
  int refused() const { return refused_; }
  int broken() const { return broken_; }
  uint64_t last() const { return area_ ? first_ : first_ + plan_.pieces - 1; }

 private:
  void copy(uint64_t off, const char* from, uint64_t n) {
    const int e = refused_ != 0 ? refused_ : ops_->copy(ops_->ctx, off, from, n);
    if (e != 0 && refused_ == 0) {
      refused_ = e < 0 ? e : -EIO;
      // Recorded before the number can be written: a flush that sees it done sees the failure.
      c_->tickets.fail_direct(last(), refused_);
    }
  }
  // Written after a refused copy too: the number is done all the same.
  void write(uint64_t number) {
    proto::DirectWords& words = c_->tickets.direct_words();
    c_->tickets.direct_appended(number);
    if (const int w = ops_->write(ops_->ctx, reinterpret_cast<volatile uint64_t*>(&words.completed), number); w != 0) {
      broken_ = w < 0 ? w : -EIO;
      c_->tickets.ended(-EIO);  // at once: other threads wait for these bytes
      return;
    }
    words.issued.store(number, std::memory_order_relaxed);
  }

  ferry_client* c_;
  const ferry_direct_ops* ops_;
  const StagingPlan& plan_;
  uint64_t bytes_, first_;
  bool area_;
  bool shared_;
  std::mutex mu_;  // at_ and what follows, when shared_
  std::vector<const char*> at_;
  uint64_t next_ = 0;
  int refused_ = 0, broken_ = 0;
};

}  // namespace

namespace {
// The queue writes the numbers in its own order: another queue's could pass
// this one's, so a switch waits until the last queue is done (its failures
// stay for their own tickets' waits).
int use_queue(ferry_client* c, const ferry_direct_ops* ops, bool no_wait) {
  Tickets& tickets = c->tickets;
  const bool same_queue = ops->queue == c->direct_queue && ops->queue_context == c->direct_queue_context;
  if (!same_queue && tickets.direct_completed() < tickets.direct_issued()) {
    if (no_wait) return -EAGAIN;
    if (int r = tickets.wait_direct_done(tickets.direct_issued(), int64_t{c->conn.timeout_ms()} * 1'000'000); r != 0)
      return misuse(r, "ferry_upload_direct",
                    "direct uploads of another queue (or context) are still in flight, and did not finish within "
                    "$FERRY_TIMEOUT_MS: one client per queue never waits");
  }
  c->direct_queue = ops->queue;
  c->direct_queue_context = ops->queue_context;
  return 0;
}

// Where the pieces go: the staging area, where they fit now (placed there
// already: to->claimed) or, without an area to be had, once they fit; or an
// area of their own (returned, its plan in *plan). Their first number and
// placement in *turn. -EAGAIN: neither now, no_wait.
int place_upload(ferry_client* c, const ferry_direct_ops* ops, bool no_wait, uint64_t bytes, StagingPlan* plan,
                 Turn* turn, Areas::Area** area, Destination* to) {
  Tickets& tickets = c->tickets;
  *area = nullptr;
  if (c->areas.enabled() || no_wait) {
    // Room now: numbered and placed at once, one lock in all (an upload of
    // more pieces is numbered, then placed piece by piece, as below).
    if (plan->pieces <= Destination::kClaimed) {
      if (c->fifo.claim_now(*plan, bytes, turn, to->offsets)) {
        to->claimed = true;
        return 0;
      }
    } else if (c->fifo.room_now(*plan, bytes)) {
      return tickets.take(plan->pieces, true, turn);
    }
    int why = 0;
    const bool later = (ops->flags & (FERRY_DIRECT_NO_GROW | FERRY_DIRECT_GROW_LATER)) == FERRY_DIRECT_GROW_LATER;
    const bool grow = (ops->flags & (FERRY_DIRECT_NO_GROW | FERRY_DIRECT_GROW_LATER)) == 0;
    *area = c->areas.take(bytes, tickets.direct_completed(), c->conn, grow, &why);
    // Made on the grower's thread for the uploads after this one, which
    // goes on as it would without areas.
    if (*area == nullptr && later) (void)c->areas.grow_later(bytes, tickets.direct_completed(), c->conn);
    // No room now: the caller goes elsewhere, told why when the daemon is
    // gone (no area will ever come from it: a new client is the way back).
    if (*area == nullptr && no_wait) return c->conn.ended() != 0 ? c->conn.ended() : -EAGAIN;
  }
  if (*area == nullptr) return tickets.take(plan->pieces, true, turn);
  to->area = (*area)->base;
  // No slot bounds the pieces here: they are cut to share the staging among
  // threads and small enough that the queue copies the first ones while the
  // threads stage the rest (each run of pieces staged back to back goes as
  // one copy, so small pieces cost few commands).
  *plan = plan_for(c, bytes, std::min(bytes, tuning().area_piece));
  turn->direct = true;
  return tickets.take_direct(1, &turn->ticket);
}
}  // namespace

int upload_direct(ferry_client* c, const void* src, uint64_t bytes, const ferry_direct_ops* ops, ferry_ticket* out) {
  if (int r = check_ops(src, bytes, ops); r != 0) return r;
  const bool no_wait = (ops->flags & FERRY_DIRECT_NO_WAIT) != 0;
  Tickets& tickets = c->tickets;
  std::lock_guard one_call(c->direct_mu);
  c->areas.trim(tickets.direct_completed(), c->conn, false);
  if (int r = use_queue(c, ops, no_wait); r != 0) return r;
  const ferry_iovec whole{src, bytes};
  Gather from;
  if (int r = from.init(&whole, 1); r != 0) return r;
  StagingPlan plan = plan_for(c, bytes);
  Turn turn;
  Areas::Area* area = nullptr;
  Destination to;
  if (int r = place_upload(c, ops, no_wait, bytes, &plan, &turn, &area, &to); r != 0) return r;
  // Pieces are staged in any order (several threads for a large upload)
  // but appended in order: each number the queue writes says every one
  // before it is done too.
  const bool threads = (ops->flags & FERRY_DIRECT_CALLER_THREAD) == 0;
  Appender appender(c, ops, plan, bytes, turn.ticket, area != nullptr, on_stager(plan, threads, false));
  const int r = stage_pieces(c, plan, bytes, turn, from, to, threads, false,
                             [&](const Piece& p) { return appender.staged(p.index, p.at); });
  if (area != nullptr) {
    // Free again once the queue wrote the number (whatever came of the copies).
    area->busy_until = appender.last();
    area->used = Areas::Clock::now();
  }
  if (const int broken = appender.broken(); broken != 0)
    return misuse(broken, "ferry_upload_direct",
                  "the queue refused the write of ferry's timeline word (" + std::string(std::strerror(-broken)) +
                      "): this client can no longer tell when its staging is free; disconnect and connect again");
  if (r != 0) return r;
  tickets.direct_words().uploads.fetch_add(1, std::memory_order_relaxed);
  tickets.direct_words().bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (out != nullptr) *out = FERRY_DIRECT_TICKET | appender.last();
  return appender.refused();
}

}  // namespace ferry::client
