// SPDX-License-Identifier: MIT
// The two systemd protocols ferryd speaks, implemented directly (they are a
// datagram and an environment convention) so that ferryd needs no libsystemd
// at run time: readiness notification and socket activation.
#pragma once

#include <string>

namespace ferry::ferryd::systemd {

// Sends `state` (e.g. "READY=1\nSTATUS=...") to $NOTIFY_SOCKET, if set.
// Returns false when there is no such socket or the send failed.
bool notify(const std::string& state);

// The listening socket systemd passed (LISTEN_PID/LISTEN_FDS, fd 3), or -1.
// Clears those variables so children do not inherit them.
int listen_fd();

}  // namespace ferry::ferryd::systemd
