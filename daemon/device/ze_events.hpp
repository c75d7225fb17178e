// SPDX-License-Identifier: MIT
// The Level Zero backend's own events, which its copies signal: host-visible,
// in pools of kPoolEvents made as copies in flight need them. The pools a
// burst made go again once every event has been back for kTrimAfter, so a
// burst does not keep them (driver memory; in the simulation a descriptor
// each) for the daemon's life, and bursts in a row do not remake them.
// The data thread's alone.
#pragma once

#include <chrono>
#include <vector>

#include "log.hpp"
#include "device/ze_api.hpp"

namespace ferry::ferryd::ze {

class OwnEvents {
 public:
  static constexpr uint32_t kPoolEvents = 256;
  static constexpr auto kTrimAfter = std::chrono::seconds(1);

  OwnEvents(const Ze& ze) : ze_(ze) {}
  void open(ze_context_handle_t ctx, ze_device_handle_t device) { ctx_ = ctx, device_ = device; }
  // Destroys every event and pool (none may be in use), before the context goes.
  void clear() {
    for (auto& p : pools_) destroy(p);
    pools_.clear(), free_.clear(), count_ = 0;
  }
  ~OwnEvents() { clear(); }

  ze_event_handle_t take() {
    if (!free_.empty()) {
      ze_event_handle_t e = free_.back();
      free_.pop_back();
      return e;
    }
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, kPoolEvents};
    Pool made;
    if (ze_.zeEventPoolCreate(ctx_, &pd, 1, &device_, &made.pool) != ZE_RESULT_SUCCESS) return nullptr;
    for (uint32_t i = 0; i < kPoolEvents; ++i) {
      ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, 0, ZE_EVENT_SCOPE_FLAG_HOST};
      ze_event_handle_t e = nullptr;
      if (ze_.zeEventCreate(made.pool, &ed, &e) == ZE_RESULT_SUCCESS) made.events.push_back(e);
    }
    if (made.events.empty()) return destroy(made), nullptr;
    free_.insert(free_.end(), made.events.begin(), made.events.end() - 1);
    ze_event_handle_t first = made.events.back();
    count_ += made.events.size();
    pools_.push_back(std::move(made));
    return first;
  }

  // An event back (its copy retired, or it was never queued).
  void give(ze_event_handle_t e) {
    free_.push_back(e);
    if (free_.size() == count_) all_back_ = std::chrono::steady_clock::now();
  }

  // The pools past the first go if every event has been back for
  // kTrimAfter.
  void trim() {
    if (pools_.size() < 2 || free_.size() != count_ || std::chrono::steady_clock::now() - all_back_ < kTrimAfter)
      return;
    for (auto p = pools_.begin() + 1; p != pools_.end(); ++p) destroy(*p);
    pools_.resize(1);
    free_ = pools_[0].events;
    count_ = free_.size();
  }

 private:
  struct Pool {
    ze_event_pool_handle_t pool = nullptr;
    std::vector<ze_event_handle_t> events;
  };
  void destroy(Pool& p) {
    for (auto* e : p.events) ze_.zeEventDestroy(e);
    if (p.pool != nullptr && ze_.zeEventPoolDestroy(p.pool) != ZE_RESULT_SUCCESS)
      FERRY_LOG(error, "the driver refused to destroy an event pool");
  }

  const Ze& ze_;
  ze_context_handle_t ctx_ = nullptr;
  ze_device_handle_t device_ = nullptr;
  std::vector<ze_event_handle_t> free_;
  std::vector<Pool> pools_;
  size_t count_ = 0;  // events in pools_
  std::chrono::steady_clock::time_point all_back_;
};

}  // namespace ferry::ferryd::ze
