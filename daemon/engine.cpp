// The engine's copy path: check a transfer, queue it on the backend, and
// retire it when the device reports it done.
#include "engine.hpp"

#include <pthread.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>

#include "log.hpp"

namespace ferry::ferryd {

namespace {
uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
}  // namespace

TransferEngine::TransferEngine(boost::asio::io_context& io, std::unique_ptr<Backend> backend)
    : io_(io), backend_(std::move(backend)), retirer_([this] { retire_loop(); }) {}

TransferEngine::~TransferEngine() { stop(); }

void TransferEngine::stop() {
  if (stop_.exchange(true)) return;
  retirer_.join();
  records_.clear();
}

const char* TransferEngine::transfer(const ClientRef& c, const proto::Transfer& m, bool download,
                                     const proto::UploadSignal* sig) {
  // Breaking the slot protocol is a broken client: its session closes.
  if (const char* why = c->check_ticket(m.ticket, m.slot)) return why;
  if (m.length == 0 || m.length > c->slot_bytes()) return "transfer length outside one slot";
  // A wrong buffer or range is the caller's mistake: fail that ticket only.
  int err = 0;
  BufferRef buf = c->find(m.buffer, download ? proto::kRightDownload : proto::kRightUpload, &err);
  if (!buf) return fail(c, m.ticket, err), nullptr;
  if (m.offset > buf->bytes || m.length > buf->bytes - m.offset) return fail(c, m.ticket, -EINVAL), nullptr;
  Signal signal;
  if (sig != nullptr) {
    if (!c->event_pool(sig->pool, &signal.pool)) return fail(c, m.ticket, -ENOENT), nullptr;
    signal.index = sig->event;
  }
  char* slot = c->segment().slot(m.slot);
  // CUDA device addresses are not host pointers: plain integer arithmetic.
  auto* dev = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(buf->ptr) + m.offset);
  int r = download ? submit(c, m.ticket, true, slot, dev, m.length, buf)
                   : submit(c, m.ticket, false, dev, slot, m.length, buf, sig != nullptr ? &signal : nullptr);
  if (r != 0) fail(c, m.ticket, r);
  return nullptr;
}

int TransferEngine::submit(const ClientRef& client, uint64_t ticket, bool download, void* dst, const void* src,
                           uint64_t bytes, BufferRef buffer, const Signal* signal) {
  if (device_lost_) return -ENODEV;
  const uint64_t cookie = next_cookie_++;
  // Record first: the retire thread may report the copy before submit returns,
  // but its batch is handled on this thread, after we return.
  records_.push_back({cookie, client, std::move(buffer), ticket, bytes, download, now_ns()});
  if (int r = backend_->submit(dst, src, bytes, cookie, signal); r != 0) {
    records_.pop_back();
    return r;
  }
  client->mark_in_flight(ticket, bytes);
  ++stats_.in_flight;
  stats_.in_flight_bytes += bytes;
  return 0;
}

void TransferEngine::fail(const ClientRef& client, uint64_t ticket, int status) {
  client->mark_in_flight(ticket, 0);
  settle(client, ticket, 0, status);
}

// The one place a ticket's outcome goes out: the client's state, the
// segment's timeline words, then the session's messages.
void TransferEngine::settle(const ClientRef& client, uint64_t ticket, uint64_t bytes, int status) {
  Failed failed;
  const bool moved = client->finish(ticket, bytes, status, failed);
  if (!moved && failed.empty()) return;
  stats_.failed += failed.size();
  client->publish(failed.size());
  if (auto sink = client->sink.lock()) sink->progress(*client, failed);
}

void TransferEngine::retire(const std::vector<Done>& batch) {
  for (const Done& d : batch) {
    if (records_.empty() || records_.front().cookie != d.cookie) {
      FERRY_LOG(error, "retire: completion %llu out of order", static_cast<unsigned long long>(d.cookie));
      continue;
    }
    Record r = std::move(records_.front());
    records_.pop_front();
    --stats_.in_flight;
    stats_.in_flight_bytes -= r.bytes;
    if (d.status == 0) {
      ClientStats& cs = r.client->stats();
      if (r.download) {
        ++stats_.downloads;
        ++cs.downloads;
      } else {
        ++stats_.uploads;
        stats_.upload_bytes += r.bytes;
        stats_.upload_latency.add(now_ns() - r.submitted_ns);
        ++cs.uploads;
        cs.upload_bytes += r.bytes;
      }
    }
    settle(r.client, r.ticket, r.bytes, d.status);
    if (d.status != 0 && !device_lost_ && backend_->lost()) {
      device_lost_ = true;
      FERRY_LOG(error, "the device is lost: every later transfer and allocation is refused (-ENODEV); "
                       "restart ferryd once the device is back");
    }
  }
}

void TransferEngine::retire_loop() {
  pthread_setname_np(pthread_self(), "ferry-retire");
  std::vector<Done> batch;
  while (!stop_.load(std::memory_order_relaxed)) {
    batch.clear();
    // A short timeout keeps stop() prompt; a busy device returns at once.
    if (backend_->reap(batch, 50'000'000) == 0) continue;
    bool post;
    {
      std::lock_guard lock(done_mu_);
      post = done_.empty();  // else a posted handler has yet to run and will take these too
      done_.insert(done_.end(), batch.begin(), batch.end());
    }
    if (post) {
      boost::asio::post(io_, [this] {
        std::vector<Done> b;
        {
          std::lock_guard lock(done_mu_);
          b.swap(done_);
        }
        retire(b);
      });
    }
  }
}

}  // namespace ferry::ferryd
