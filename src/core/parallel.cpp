#include "core/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace plumb {
namespace {

// A fixed set of workers that each run one range of the current job, then wait for the next.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs job(part) for part in [0, parts) with parts <= size(); part 0 on the calling thread.
  void run(int parts, const std::function<void(int)>& job) {
    std::unique_lock<std::mutex> outer(run_mutex_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      parts_ = parts;
      pending_ = parts - 1;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    std::exception_ptr local;
    try {
      job(0);
    } catch (...) {
      local = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    if (!local) local = error_;
    job_ = nullptr;
    lock.unlock();
    if (local) std::rethrow_exception(local);
  }

 private:
  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (index >= parts_) continue;
        job = job_;
      }
      std::exception_ptr error;
      try {
        (*job)(index);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex run_mutex_, mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int parts_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

ThreadPool& pool() {
  static ThreadPool instance(parallel_threads());
  return instance;
}

thread_local bool in_parallel_region = false;

}  // namespace

int parallel_threads() {
  static const int threads = [] {
    if (const char* env = std::getenv("PLUMB_THREADS")) {
      const int n = std::atoi(env);
      if (n > 0) return std::min(n, 256);
    }
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return threads;
}

void parallel_for(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t grain = std::max<int64_t>(1, min_grain);
  const int64_t parts = std::min<int64_t>(parallel_threads(), (n + grain - 1) / grain);
  if (parts <= 1 || in_parallel_region) {
    fn(0, n);
    return;
  }
  pool().run(static_cast<int>(parts), [&](int part) {
    in_parallel_region = true;
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    try {
      fn(begin, end);
    } catch (...) {
      in_parallel_region = false;
      throw;
    }
    in_parallel_region = false;
  });
}

}  // namespace plumb
