// SPDX-License-Identifier: MIT
#include "policy.hpp"

namespace ferry::run {

Verdict decide(const Copy& c) {
  auto pass = [](int why) { return Verdict{false, why}; };
  if (small(c.bytes, c.min_bytes)) return pass(FERRY_PASS_SMALL);
  // Only host-to-device copies read a source the program may reuse.
  if (c.dst != Mem::device || c.src == Mem::device) return pass(FERRY_PASS_NOT_UPLOAD);
  if (c.queue >= 0) return pass(c.queue);
  if (c.src == Mem::pinned) return pass(FERRY_PASS_PINNED);
  if (c.src != Mem::pageable) return pass(FERRY_PASS_UNSUPPORTED);
  return Verdict{true, -1};
}

}  // namespace ferry::run
