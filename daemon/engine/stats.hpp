// SPDX-License-Identifier: MIT
// Counters and histograms the daemon keeps for status and metrics. Plain
// data, owned by whoever counts (the engine, a client's state); io thread only.
#pragma once

#include <cstdint>

#include "ferry/proto.hpp"

namespace ferry::ferryd {

// A latency histogram in proto::kLatencyBoundsNs buckets.
struct Histogram {
  uint64_t count = 0;
  uint64_t sum_ns = 0;
  uint64_t buckets[proto::kLatencyBuckets] = {};
  // Saturating: the sums of client-published waits (slot_wait) are the
  // clients' numbers, and a sum that wrapped would go down.
  void add(uint64_t ns) {
    ++count;
    sum_ns = sum_ns + ns < sum_ns ? UINT64_MAX : sum_ns + ns;
    ++buckets[proto::latency_bucket(ns)];
  }
  void add_sum(uint64_t ns) { sum_ns = sum_ns + ns < sum_ns ? UINT64_MAX : sum_ns + ns; }
};

// What one client did.
struct ClientStats {
  uint64_t uploads = 0;        // ferry_upload calls done (their last piece)
  uint64_t upload_pieces = 0;  // pieces (copies) of uploads done
  uint64_t upload_bytes = 0;
  uint64_t downloads = 0;
  uint64_t errors = 0;
};

// What the engine did, for every client.
struct EngineStats {
  uint64_t uploads = 0;        // calls, as ClientStats
  uint64_t upload_pieces = 0;
  uint64_t upload_bytes = 0;
  uint64_t downloads = 0;
  uint64_t failed = 0;
  uint32_t in_flight = 0;
  uint64_t in_flight_bytes = 0;
  Histogram upload_latency;  // from a piece's copy being queued (after any hold) to its retirement
  uint64_t ring_entries = 0;   // transfers taken from submission rings
  uint64_t doorbells = 0;      // wake-ups by a client's doorbell
  uint64_t device_wakes = 0;   // wake-ups by the device's eventfd (a copy ended while the poller slept)
  uint64_t poller_sleeps = 0;  // times the poller went to sleep
  uint64_t poller_naps = 0;    // naps while the device had copies queued (--poll-nap-us)
  uint64_t segments_pooled = 0;   // Hellos served a segment made ahead of time
  uint64_t segments_ordered = 0;  // made on the pool's thread for a Hello that found none ready
  uint64_t segments_made = 0;     // made on the io thread (no pool, or past its order bound)
};

// What the engine holds on behalf of clients right now, connected or gone
// with copies still in flight.
struct Holdings {
  uint64_t clients = 0;
  uint64_t buffers = 0;
  uint64_t device_bytes = 0;
};

// Counted by the server, shown in status.
struct ServerStats {
  int64_t started_unix = 0;  // seconds
  uint64_t connections = 0;  // accepted since start, status requests (ferryctl) included
  uint64_t clients = 0;      // Hellos since start: connections of clients
  uint64_t refused = 0;      // connections closed at once, past a bound of Limits
  uint64_t accept_failures = 0;  // accepts that failed for want of descriptors or memory (each then pauses)
  uint64_t hellos_gone = 0;      // Hellos whose peer had hung up already: closed, no segment taken
  uint64_t log_lines_left_out = 0;  // "closing session" lines past the rate limit (LogBudget)
};

}  // namespace ferry::ferryd
