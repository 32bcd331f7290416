// Test doubles for data-parallel training without MPI: the ranks of a job as threads of this
// process (ThreadProcessGroup, collectives through a shared barrier that gives up after a
// timeout or when a rank fails), and ThreadDDPStrategy, a small strategy that does DDP's work
// (rank 0's parameters broadcast, gradients averaged after every synchronised backward) so that
// the Trainer's wiring can be tested on cpu:0.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tessera/tessera.h"
#include "tessera/train/train.h"

namespace tessera::train::testing {

// What the ranks of one job share: a barrier and a slot per rank.
class ThreadWorld {
 public:
  explicit ThreadWorld(int size, std::vector<std::string> hosts = {})
      : size_(size), hosts_(std::move(hosts)), slots_(static_cast<std::size_t>(size)) {
    if (hosts_.empty()) hosts_.assign(static_cast<std::size_t>(size), "localhost");
  }
  int size() const { return size_; }
  const std::string& host(int rank) const { return hosts_.at(static_cast<std::size_t>(rank)); }

  // Waits until every rank arrives. Throws DistributedError when a rank failed (abort) or after
  // 60 s (a collective that some rank never reaches: a test failure, not a hang).
  void arrive_and_wait(int rank) {
    std::unique_lock lock(mutex_);
    if (!failure_.empty()) throw DistributedError(failure_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    const bool woke = cv_.wait_for(lock, std::chrono::seconds(60),
                                   [&] { return generation_ != generation || !failure_.empty(); });
    if (generation_ != generation) return;
    throw DistributedError(woke ? failure_
                                : fmt::format("rank {}: a collective timed out (60 s)", rank));
  }
  // A rank failed: every waiting and later collective throws (MPI_Abort's part).
  void abort(int rank, const std::string& what) {
    std::lock_guard lock(mutex_);
    if (failure_.empty())
      failure_ = fmt::format("rank {} (host {}) failed: {}", rank, host(rank), what);
    cv_.notify_all();
  }

  // Each rank's contribution to the collective under way.
  std::vector<std::vector<std::byte>>& slots() { return slots_; }

 private:
  int size_;
  std::vector<std::string> hosts_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string failure_;
  std::vector<std::vector<std::byte>> slots_;
};

// One rank of a ThreadWorld. Collectives: every rank writes its slot, waits, computes the result
// from every slot in rank order (the same on every rank), waits again before the slots are reused.
class ThreadProcessGroup final : public ProcessGroup {
 public:
  ThreadProcessGroup(std::shared_ptr<ThreadWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  int local_rank() const override { return rank_; }
  int local_size() const override { return world_->size(); }
  std::string host() const override { return world_->host(rank_); }

  void all_reduce_sum(std::span<float> values) override { reduce(values, false); }
  void all_reduce_sum(std::span<double> values) override { reduce(values, false); }
  void all_reduce_max(std::span<double> values) override { reduce(values, true); }
  void broadcast(std::span<std::byte> bytes, int root) override {
    exchange(bytes.data(), bytes.size(), [&](auto& slots) {
      const auto& from = slots.at(static_cast<std::size_t>(root));
      if (from.size() != bytes.size())
        throw DistributedError(fmt::format("broadcast: {} bytes from rank {}, {} here", from.size(),
                                           root, bytes.size()));
      std::memcpy(bytes.data(), from.data(), bytes.size());
    });
  }
  std::vector<std::string> all_gather(const std::string& value) override {
    std::vector<std::string> out;
    exchange(value.data(), value.size(), [&](auto& slots) {
      for (const auto& s : slots)
        out.emplace_back(reinterpret_cast<const char*>(s.data()), s.size());
    });
    return out;
  }
  void barrier() override { world_->arrive_and_wait(rank_); }
  ThreadWorld& world() { return *world_; }

 private:
  template <typename F>
  void exchange(const void* data, std::size_t bytes, F&& read) {
    auto& slot = world_->slots().at(static_cast<std::size_t>(rank_));
    slot.resize(bytes);
    if (bytes) std::memcpy(slot.data(), data, bytes);
    world_->arrive_and_wait(rank_);
    read(world_->slots());
    world_->arrive_and_wait(rank_);
  }
  template <typename T>
  void reduce(std::span<T> values, bool max) {
    exchange(values.data(), values.size_bytes(), [&](auto& slots) {
      for (std::size_t r = 0; r < slots.size(); ++r) {
        if (slots[r].size() != values.size_bytes())
          throw DistributedError(fmt::format("all_reduce: rank {} gave {} bytes, rank {} {}", r,
                                             slots[r].size(), rank_, values.size_bytes()));
        const T* v = reinterpret_cast<const T*>(slots[r].data());
        for (std::size_t i = 0; i < values.size(); ++i)
          values[i] = r == 0 ? v[i] : max ? std::max(values[i], v[i]) : values[i] + v[i];
      }
    });
  }

  std::shared_ptr<ThreadWorld> world_;
  int rank_;
};

// DDP's gradient averaging, without buckets or overlap: after a synchronised backward every
// parameter's gradient (zeros when it has none) is summed over the ranks and divided by their
// number. setup_module broadcasts rank 0's parameters. Counts its calls for the tests.
class ThreadDDPStrategy final : public Strategy {
 public:
  ThreadDDPStrategy(std::shared_ptr<ThreadWorld> world, int rank)
      : group_(std::move(world), rank) {}
  std::string name() const override { return "thread_ddp"; }
  ProcessGroup* process_group() override { return &group_; }
  Device& device(const std::string&, int) override { return tessera::device("cpu"); }
  void setup_module(Module& module) override {
    params_ = module.parameters();
    for (Variable& p : params_) {
      std::vector<float> host = p.value().to_vector<float>();
      group_.broadcast(std::as_writable_bytes(std::span<float>(host)), 0);
      copy_(p.value(), Tensor::from(host, p.value().shape(), &p.value().device()));
    }
  }
  void after_backward(bool sync) override {
    ++(sync ? synced : local);
    if (!sync) return;
    for (Variable& p : params_) {
      std::vector<float> g = p.grad().defined()
                                 ? p.grad().to_vector<float>()
                                 : std::vector<float>(static_cast<std::size_t>(p.value().numel()));
      group_.all_reduce_sum(std::span<float>(g));
      for (float& v : g) v /= static_cast<float>(group_.size());
      p.set_grad(Tensor::from(g, p.value().shape(), &p.value().device()));
    }
  }
  void on_exception(const std::exception& error) override {
    group_.world().abort(group_.rank(), error.what());
  }
  void teardown() override { ++teardowns; }

  int synced = 0, local = 0, teardowns = 0;

 private:
  ThreadProcessGroup group_;
  std::vector<Variable> params_;
};

// Runs |fn(rank)| on |n| threads at once and rethrows the first exception (by rank) after all
// have ended.
inline void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tessera::train::testing
