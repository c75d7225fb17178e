// SPDX-License-Identifier: MIT
// The C ABI of direct uploads, the staging that grows for them, and the
// counts a program that stands in for another's GPU calls publishes.
#include <cerrno>
#include <string>

#include "client.hpp"

namespace fc = ferry::client;
namespace proto = ferry::proto;

// The public names of proto::Pass and the roles, number for number.
static_assert(FERRY_PASS_REASONS == proto::kPassReasons);
static_assert(FERRY_PASS_SMALL == static_cast<int>(proto::Pass::small));
static_assert(FERRY_PASS_NO_DAEMON == static_cast<int>(proto::Pass::no_daemon));
static_assert(FERRY_PASS_BUSY == static_cast<int>(proto::Pass::busy));
static_assert(FERRY_RUN_LEAD == proto::kRunLead && FERRY_RUN_LANE == proto::kRunLane);

extern "C" {

int ferry_upload_direct(ferry_client* c, const void* src, uint64_t bytes, const ferry_direct_ops* ops,
                        ferry_ticket* out) {
  if (int e = fc::owner_check(c); e != 0) return e;
  return fc::upload_direct(c, src, bytes, ops, out);
}

int ferry_set_staging_hooks(ferry_client* c, const ferry_staging_hooks* hooks) {
  if (int e = fc::owner_check(c); e != 0) return e;
  const char* fn = "ferry_set_staging_hooks";
  if (hooks != nullptr) {
    if (hooks->size < sizeof(ferry_staging_hooks))
      return fc::misuse(-EINVAL, fn,
                        "hooks->size is " + std::to_string(hooks->size) + ": set it to sizeof(ferry_staging_hooks)");
    if (hooks->flags != 0) return fc::misuse(-EINVAL, fn, "hooks->flags is " + std::to_string(hooks->flags) + ": 0");
    if (hooks->attach == nullptr || hooks->detach == nullptr)
      return fc::misuse(-EFAULT, fn, "hooks->attach or hooks->detach is NULL");
  }
  std::lock_guard lock(c->direct_mu);
  c->areas.set_hooks(hooks);
  return 0;
}

int ferry_staging_grow(ferry_client* c, uint64_t bytes) {
  if (int e = fc::owner_check(c); e != 0) return e;
  if (bytes == 0 || bytes > fc::Areas::kMaxBytes)
    return fc::misuse(-EINVAL, "ferry_staging_grow",
                      std::to_string(bytes) + " bytes: from 1 to " + std::to_string(fc::Areas::kMaxBytes));
  if (const int gone = c->conn.ended(); gone != 0) return gone;
  std::lock_guard lock(c->direct_mu);
  const int r = c->areas.grow_later(bytes, c->tickets.direct_completed(), c->conn);
  if (r == -ENOTSUP)
    return fc::misuse(r, "ferry_staging_grow", "no staging hooks are set (ferry_set_staging_hooks): nothing to attach an area with");
  return r;
}

const char* ferry_pass_reason_name(int why) {
  return why >= 0 && why < FERRY_PASS_REASONS ? proto::kPassNames[why] : nullptr;
}

int ferry_publish_run(ferry_client* c, const ferry_run_counts* counts) {
  if (int e = fc::owner_check(c); e != 0) return e;
  const char* fn = "ferry_publish_run";
  if (counts == nullptr) return fc::misuse(-EFAULT, fn, "counts is NULL");
  if (counts->size < sizeof(ferry_run_counts))
    return fc::misuse(-EINVAL, fn,
                      "counts->size is " + std::to_string(counts->size) + ": set it to sizeof(ferry_run_counts)");
  if (counts->role != FERRY_RUN_LEAD && counts->role != FERRY_RUN_LANE)
    return fc::misuse(-EINVAL, fn,
                      "counts->role is " + std::to_string(counts->role) + ": FERRY_RUN_LEAD or FERRY_RUN_LANE");
  // Words only ferryctl shows (proto::RunWords): ferryd trusts none of them.
  auto* w = reinterpret_cast<proto::RunWords*>(reinterpret_cast<char*>(c->seg) + proto::kRunOffset);
  w->staged.store(counts->staged, std::memory_order_relaxed);
  w->staged_bytes.store(counts->staged_bytes, std::memory_order_relaxed);
  for (uint32_t i = 0; i < proto::kPassReasons; ++i) w->passed[i].store(counts->passed[i], std::memory_order_relaxed);
  w->passed_bytes.store(counts->passed_bytes, std::memory_order_relaxed);
  w->role.store(counts->role, std::memory_order_release);
  return 0;
}

}  // extern "C"
