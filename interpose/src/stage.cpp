// SPDX-License-Identifier: MIT
#include "stage.hpp"

#include <cerrno>

namespace ferry::run {

int stage(const Copy& facts, const Queue& q, const void* src, ferry_direct_ops ops, BeforeUpload before,
          void* before_arg) {
  Lanes& lanes = Lanes::get();
  const Verdict v = decide(facts);
  if (!v.stage) {
    lanes.passed(v.why, facts.bytes);
    return v.why;
  }
  int why = FERRY_PASS_ERROR;
  ferry_client* c = lanes.acquire(q.id, q.context, q.key, q.prepare, q.unprepare, q.arg, &why, q.connect_wait);
  if (c == nullptr) {
    lanes.passed(why, facts.bytes);
    return why;
  }
  int r = before != nullptr ? before(c, before_arg) : 0;
  if (r == 0) {
    ops.size = sizeof ops;
    ops.queue = q.id;
    ops.queue_context = q.context;
    r = ferry_upload_direct(c, src, facts.bytes, &ops, nullptr);
  }
  lanes.done(c, r);
  if (r == 0) {
    lanes.staged(facts.bytes);
    return kStaged;
  }
  // Nothing appended (no room now), or part: the driver's copy, in full, after it.
  why = r == -EAGAIN ? FERRY_PASS_NO_ROOM : FERRY_PASS_ERROR;
  lanes.passed(why, facts.bytes);
  return why;
}

}  // namespace ferry::run
