// MpiProcessGroup: MPI_COMM_WORLD behind one communication thread.
#include "tessera/dist/process_group.h"

#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "tessera/checked.h"
#include "tessera/errors.h"

namespace tessera::dist {

struct MpiProcessGroup::Worker {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> tasks;
  bool stop = false;
  std::thread thread;
  std::thread::id id;

  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || !tasks.empty(); });
        if (tasks.empty()) return;  // stop, and nothing left to run
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }
};

namespace {

std::mutex g_start_mutex;
MpiProcessGroup* g_world = nullptr;

// Finalizes MPI and joins the communication thread when the process exits normally.
struct WorldOwner {
  std::unique_ptr<MpiProcessGroup> group;
  ~WorldOwner() {
    std::lock_guard lock(g_start_mutex);
    g_world = nullptr;
  }
};

// A chunk size that MPI's int counts can hold.
constexpr std::size_t kMaxCount = static_cast<std::size_t>(INT_MAX);

}  // namespace

MpiProcessGroup& MpiProcessGroup::world() {
  static WorldOwner owner;
  std::lock_guard lock(g_start_mutex);
  if (!g_world) {
    owner.group.reset(new MpiProcessGroup());
    g_world = owner.group.get();
  }
  return *g_world;
}

bool MpiProcessGroup::started() {
  std::lock_guard lock(g_start_mutex);
  return g_world != nullptr;
}

MpiProcessGroup::MpiProcessGroup() : worker_(std::make_unique<Worker>()) {
  worker_->thread = std::thread([w = worker_.get()] { w->loop(); });
  worker_->id = worker_->thread.get_id();
  std::string error;
  run([&] {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      error = "MPI_Init_thread failed";
      return;
    }
    if (provided < MPI_THREAD_FUNNELED) {
      error = fmt::format("MPI provides thread level {}, below MPI_THREAD_FUNNELED", provided);
      return;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int length = 0;
    MPI_Get_processor_name(name, &length);
    host_.assign(name, static_cast<std::size_t>(length));
  });
  if (!error.empty()) {
    {
      std::lock_guard lock(worker_->mutex);
      worker_->stop = true;
    }
    worker_->cv.notify_all();
    worker_->thread.join();
    throw train::DistributedError("MPI could not start: " + error);
  }
}

MpiProcessGroup::~MpiProcessGroup() {
  std::future<void> done = post([] { MPI_Finalize(); });
  done.wait();
  {
    std::lock_guard lock(worker_->mutex);
    worker_->stop = true;
  }
  worker_->cv.notify_all();
  worker_->thread.join();
}

std::future<void> MpiProcessGroup::post(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> result = packaged.get_future();
  {
    std::lock_guard lock(worker_->mutex);
    worker_->tasks.push_back(std::move(packaged));
  }
  worker_->cv.notify_one();
  return result;
}

template <class F>
void MpiProcessGroup::run(F&& f) {
  if (std::this_thread::get_id() == worker_->id) {
    f();
    return;
  }
  post(std::function<void()>(std::forward<F>(f))).get();
}

namespace {

void check(int rc, const char* what, int rank, const std::string& host) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw train::DistributedError(fmt::format("{} failed on rank {} (host {}): {}", what, rank, host,
                                            std::string(text, static_cast<std::size_t>(length))));
}

template <class T>
void all_reduce(std::span<T> values, MPI_Datatype type, MPI_Op op, const char* what, int rank,
                const std::string& host) {
  for (std::size_t at = 0; at < values.size(); at += kMaxCount) {
    const int count = static_cast<int>(std::min(kMaxCount, values.size() - at));
    check(MPI_Allreduce(MPI_IN_PLACE, values.data() + at, count, type, op, MPI_COMM_WORLD), what,
          rank, host);
  }
}

}  // namespace

void MpiProcessGroup::all_reduce_sum(std::span<float> values) {
  run([&] { all_reduce(values, MPI_FLOAT, MPI_SUM, "MPI_Allreduce (sum)", rank_, host_); });
}

void MpiProcessGroup::all_reduce_sum(std::span<double> values) {
  run([&] { all_reduce(values, MPI_DOUBLE, MPI_SUM, "MPI_Allreduce (sum)", rank_, host_); });
}

void MpiProcessGroup::all_reduce_max(std::span<double> values) {
  run([&] { all_reduce(values, MPI_DOUBLE, MPI_MAX, "MPI_Allreduce (max)", rank_, host_); });
}

void MpiProcessGroup::broadcast(std::span<std::byte> bytes, int root) {
  if (root < 0 || root >= size_)
    throw InvalidArgument(
        fmt::format("broadcast: root {} is not a rank of this job of {} processes", root, size_));
  run([&] {
    for (std::size_t at = 0; at < bytes.size(); at += kMaxCount) {
      const int count = static_cast<int>(std::min(kMaxCount, bytes.size() - at));
      check(MPI_Bcast(bytes.data() + at, count, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast", rank_,
            host_);
    }
  });
}

std::vector<std::string> MpiProcessGroup::all_gather(const std::string& value) {
  if (value.size() > kMaxCount)
    throw InvalidArgument(fmt::format("all_gather: {} bytes is more than MPI's {} per process",
                                      value.size(), kMaxCount));
  std::vector<std::string> out(static_cast<std::size_t>(size_));
  run([&] {
    const int mine = static_cast<int>(value.size());
    std::vector<int> lengths(out.size()), offsets(out.size());
    check(MPI_Allgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
          "MPI_Allgather", rank_, host_);
    int total = 0;
    for (std::size_t r = 0; r < out.size(); ++r) {
      offsets[r] = total;
      const auto sum = checked_add(total, lengths[r]);
      if (!sum)
        throw train::DistributedError(
            fmt::format("all_gather: the processes' values add up to more than {} bytes", INT_MAX));
      total = *sum;
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    check(MPI_Allgatherv(value.data(), mine, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                         MPI_CHAR, MPI_COMM_WORLD),
          "MPI_Allgatherv", rank_, host_);
    for (std::size_t r = 0; r < out.size(); ++r)
      out[r] =
          all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r]));
  });
  return out;
}

void MpiProcessGroup::barrier() {
  run([&] { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank_, host_); });
}

int MpiProcessGroup::num_hosts() {
  if (num_hosts_ == 0) {
    const std::vector<std::string> hosts = all_gather(host_);
    num_hosts_ = static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size());
  }
  return num_hosts_;
}

void MpiProcessGroup::abort(const std::string& message, int code) {
  if (!message.empty()) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, the process still ends
}

}  // namespace tessera::dist
