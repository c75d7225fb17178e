// SPDX-License-Identifier: MIT
#include "net/admission.hpp"

#include <cerrno>
#include <string>

namespace ferry::ferryd {

std::optional<Answer> refuse_admission(Context& ctx, uid_t uid, bool admin) {
  TransferEngine& engine = ctx.engine;
  const Limits& l = ctx.options.limits;
  auto states = [&] { return engine.clients().connected() + engine.clients().departed() + ctx.users.hellos(); };
  if (states() >= l.max_clients) engine.drop_departed_holds(std::nullopt);
  if (states() >= l.max_clients) {
    const std::string why = "ferryd serves " + std::to_string(l.max_clients) +
                            " clients of all users, those still finishing copies included (--max-clients)";
    return Answer::error(0, -EUSERS, why, true);
  }
  if (admin) return std::nullopt;
  auto mine = [&] { return engine.resources().usage(uid).clients + ctx.users.of(uid).hellos; };
  if (mine() >= l.share_of(l.max_clients)) engine.drop_departed_holds(uid);
  if (const uint64_t n = mine(); n >= l.share_of(l.max_clients)) {
    const std::string why = "uid " + std::to_string(uid) + " has " + std::to_string(n) +
                            " clients, its most of --max-clients " + std::to_string(l.max_clients) + " (--user-share " +
                            std::to_string(l.user_share) + "%)";
    return Answer::error(0, -EUSERS, why, true);
  }
  return std::nullopt;
}

}  // namespace ferry::ferryd
