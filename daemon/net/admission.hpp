// SPDX-License-Identifier: MIT
// Who may become a client: the one rule a Hello must pass, with the counts
// of both owners it reads (the engine's client states, the net layer's
// Hellos under way).
#pragma once

#include <sys/types.h>

#include <optional>

#include "net/answer.hpp"
#include "net/server_context.hpp"

namespace ferry::ferryd {

// The refusal of one more client of `uid` (an admin's: only the bound of
// all users), or nothing. Bounds: --max-clients for all users, and the
// user's share of it. Each counts the client states kept after their
// sessions for held transfers too; at a bound such holds are given up
// first, so departed clients never lock out live ones.
std::optional<Answer> refuse_admission(Context& ctx, uid_t uid, bool admin);

}  // namespace ferry::ferryd
