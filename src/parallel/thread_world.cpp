// thread_world.h: ranks as threads, meeting under one mutex. A collective is two barriers: at the first every rank
// leaves a copy of what it brings (its shapes, and the values the others need) in the world, which owns it, and
// learns the others'; each then computes its own result from those copies (in rank order, so every rank computes the
// same bits), and at the second every rank has finished reading, so none overwrites its copy with the next
// collective's while another still reads it. A rank that fails frees nothing another reads: the copies outlive every
// rank's thread, and the checks after the first barrier read the copies alone, so every rank reaches the same verdict.
#include "parallel/thread_world.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"

namespace plumb::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// What a rank brought to the collective it is in.
struct Call {
  const char* op = nullptr;
  Shape shape;                // the tensor's
  Shape out_shape;            // all_gather_last's out
  int root = -1;              // broadcast's
  uint64_t sequence = 0;      // collectives this rank has entered, this one included
  std::vector<float> values;  // what the others read of it (none where they read nothing)
};

struct Message {
  Shape shape;
  std::vector<float> values;
};

std::string call_text(const Call& c) {
  return fmt::format("{} of {}{}", c.op, shape_str(c.shape), c.root >= 0 ? fmt::format(" from rank {}", c.root) : "");
}

bool same_shape(const Shape& a, const Shape& b, bool any_width) {
  if (!any_width) return a == b;
  return a.size() == b.size() && !a.empty() && std::equal(a.begin(), a.end() - 1, b.begin());
}

std::vector<float> values_of(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

class World {
 public:
  World(int size, std::chrono::milliseconds timeout) : size_(size), timeout_(timeout), calls_(size) {}

  // The first barrier: leaves `call` (op, shapes, values) as this rank's and returns every rank's, after checking
  // they are the same op on tensors of the same shape (of the same leading dimensions where `any_width`: their last
  // may differ). The calls stay valid until this rank's done().
  const std::vector<Call>& meet(int rank, Call call, bool any_width) {
    std::unique_lock<std::mutex> lock(mutex_);
    stop_if_failed(rank);
    Call& mine = calls_[static_cast<size_t>(rank)];
    call.sequence = mine.sequence + 1;
    mine = std::move(call);
    barrier(lock, rank, meet_arrived_, meet_generation_, mine.op);
    for (int r = 0; r < size_; ++r) {
      const Call& c = calls_[static_cast<size_t>(r)];
      if (std::strcmp(c.op, mine.op) != 0 || c.root != mine.root || !same_shape(c.shape, mine.shape, any_width)) {
        fail_locked(fmt::format("rank {} called {} while rank {} called {}", rank, call_text(mine), r, call_text(c)),
                    Error::Kind::kInternal);
        PLUMB_FAIL("{}", failure_);
      }
    }
    return calls_;
  }

  // Fails the world from a check every rank makes alike on the calls meet() returned.
  [[noreturn]] void fail_alike(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(message, Error::Kind::kInternal);
    PLUMB_FAIL("{}", failure_);
  }

  // The second barrier: every rank has read the others' tensors.
  void done(int rank, const char* op) {
    std::unique_lock<std::mutex> lock(mutex_);
    barrier(lock, rank, done_arrived_, done_generation_, op);
  }

  void send(int from, int to, Message message) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_if_failed(from);
    mail_[{from, to}].push_back(std::move(message));
    changed_.notify_all();
  }

  Message recv(int from, int to) {
    std::unique_lock<std::mutex> lock(mutex_);
    std::deque<Message>& box = mail_[{from, to}];
    wait(
        lock, to, [&] { return !box.empty(); }, [&] { return fmt::format("recv from rank {}", from); });
    Message message = std::move(box.front());
    box.pop_front();
    return message;
  }

  void fail(const std::string& message, Error::Kind kind) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_locked(message, kind);
  }

  bool failed() const { return failed_; }
  const std::string& failure() const { return failure_; }
  Error::Kind failure_kind() const { return failure_kind_; }

 private:
  void fail_locked(const std::string& message, Error::Kind kind) {
    if (!failed_) {
      failed_ = true;
      failure_ = message;
      failure_kind_ = kind;
    }
    changed_.notify_all();
  }

  void stop_if_failed(int rank) const {
    if (failed_) PLUMB_FAIL("rank {} stopped: the world failed ({})", rank, failure_);
  }

  // Waits until ready() holds, the world fails, or the timeout passes (which fails it, saying what rank waited for).
  template <class Ready, class What>
  void wait(std::unique_lock<std::mutex>& lock, int rank, Ready&& ready, What&& what) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    while (!ready()) {
      stop_if_failed(rank);
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() && !failed_) {
        fail_locked(fmt::format("rank {} waited {} ms in {} (a rank hung, died or did not make the same call)", rank,
                                timeout_.count(), what()),
                    Error::Kind::kInput);
      }
    }
    stop_if_failed(rank);
  }

  void barrier(std::unique_lock<std::mutex>& lock, int rank, int& arrived, uint64_t& generation, const char* op) {
    stop_if_failed(rank);
    const uint64_t mine = generation;
    if (++arrived == size_) {
      arrived = 0;
      ++generation;
      changed_.notify_all();
      return;
    }
    const uint64_t sequence = calls_[static_cast<size_t>(rank)].sequence;
    wait(
        lock, rank, [&] { return generation != mine; },
        [&] {
          std::vector<int> missing;  // ranks that have not entered this collective yet
          for (int r = 0; r < size_; ++r)
            if (calls_[static_cast<size_t>(r)].sequence < sequence) missing.push_back(r);
          return fmt::format("{} for rank {}", op,
                             missing.empty() ? std::string("s that had not finished reading")
                                             : fmt::format("{}", fmt::join(missing, ", ")));
        });
  }

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Call> calls_;  // [size]
  int meet_arrived_ = 0, done_arrived_ = 0;
  uint64_t meet_generation_ = 0, done_generation_ = 0;
  std::map<std::pair<int, int>, std::deque<Message>> mail_;  // by (from, to), oldest first
  bool failed_ = false;
  std::string failure_;
  Error::Kind failure_kind_ = Error::Kind::kInput;
};

void expect_host_f32(const Tensor& t, const char* op, const char* name) {
  PLUMB_CHECK(t.device() == Device::kCpu && t.dtype() == DType::kF32,
              "{}: {} is {} on the {}, expected F32 on the host", op, name, dtype_name(t.dtype()),
              t.device() == Device::kCpu ? "host" : "GPU");
}

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(World& world, int rank, int size) : world_(world), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void all_reduce_sum(Tensor& t) override {
    expect_host_f32(t, "all_reduce_sum", "t");
    const std::vector<Call>& all =
        world_.meet(rank_, Call{"all_reduce_sum", t.shape(), {}, -1, 0, values_of(t)}, false);
    const size_t n = static_cast<size_t>(t.numel());
    std::vector<float> sum(n);  // [n]
    for (size_t i = 0; i < n; ++i) {
      float s = all[0].values[i];
      for (int r = 1; r < size_; ++r) s += all[static_cast<size_t>(r)].values[i];
      sum[i] = s;
    }
    world_.done(rank_, "all_reduce_sum");
    std::copy(sum.begin(), sum.end(), t.f32());
  }

  void all_gather_last(const Tensor& part, Tensor& out) override {
    expect_host_f32(part, "all_gather_last", "part");
    expect_host_f32(out, "all_gather_last", "out");
    PLUMB_CHECK(part.rank() >= 1 && out.rank() == part.rank(), "all_gather_last: part {} and out {} differ in rank",
                shape_str(part.shape()), shape_str(out.shape()));
    const std::vector<Call>& all =
        world_.meet(rank_, Call{"all_gather_last", part.shape(), out.shape(), -1, 0, values_of(part)}, true);
    int64_t width = 0;  // out's: the parts' widths summed
    for (const Call& c : all) width += c.shape.back();
    // Every rank checks every rank's out, so all reach the same verdict before any reads a part.
    for (int r = 0; r < size_; ++r) {
      Shape expected = all[static_cast<size_t>(r)].shape;
      expected.back() = width;
      if (all[static_cast<size_t>(r)].out_shape != expected)
        world_.fail_alike(fmt::format("all_gather_last: rank {}'s out is {}, expected {}", r,
                                      shape_str(all[static_cast<size_t>(r)].out_shape), shape_str(expected)));
    }
    const int64_t rows = width == 0 ? 0 : out.numel() / width;
    int64_t offset = 0;  // the column where rank r's part starts
    for (const Call& c : all) {
      const int64_t w = c.shape.back();
      for (int64_t i = 0; i < rows; ++i)
        std::copy(c.values.begin() + i * w, c.values.begin() + (i + 1) * w, out.f32() + i * width + offset);
      offset += w;
    }
    world_.done(rank_, "all_gather_last");
  }

  void broadcast(Tensor& t, int root) override {
    expect_host_f32(t, "broadcast", "t");
    PLUMB_CHECK(root >= 0 && root < size_, "broadcast: root {} outside the world of {} ranks", root, size_);
    const std::vector<Call>& all = world_.meet(
        rank_, Call{"broadcast", t.shape(), {}, root, 0, rank_ == root ? values_of(t) : std::vector<float>{}}, false);
    if (rank_ != root) {
      const std::vector<float>& from = all[static_cast<size_t>(root)].values;
      std::copy(from.begin(), from.end(), t.f32());
    }
    world_.done(rank_, "broadcast");
  }

  void send(const Tensor& t, int to) override {
    expect_host_f32(t, "send", "t");
    PLUMB_CHECK(to >= 0 && to < size_ && to != rank_, "send: rank {} cannot send to rank {} (a world of {})", rank_, to,
                size_);
    world_.send(rank_, to, Message{t.shape(), values_of(t)});
  }

  void recv(Tensor& t, int from) override {
    expect_host_f32(t, "recv", "t");
    PLUMB_CHECK(from >= 0 && from < size_ && from != rank_, "recv: rank {} cannot receive from rank {} (a world of {})",
                rank_, from, size_);
    const Message message = world_.recv(from, rank_);
    PLUMB_CHECK(message.shape == t.shape(), "recv: rank {} sent {} to rank {}, which expected {}", from,
                shape_str(message.shape), rank_, shape_str(t.shape()));
    std::copy(message.values.begin(), message.values.end(), t.f32());
  }

 private:
  World& world_;
  const int rank_, size_;
};

}  // namespace

void run_thread_ranks(int world_size, std::chrono::milliseconds timeout,
                      const std::function<void(Collective& collective)>& fn) {
  PLUMB_CHECK(world_size >= 1, "a world of {} ranks: it needs at least one", world_size);
  PLUMB_CHECK(timeout.count() > 0, "a collective timeout of {} ms: it must be positive", timeout.count());
  World world(world_size, timeout);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&world, &fn, r, world_size] {
      ThreadCollective collective(world, r, world_size);
      try {
        fn(collective);
      } catch (const Error& e) {
        world.fail(fmt::format("rank {}: {}", r, e.what()), e.kind());
      } catch (const std::exception& e) {
        world.fail(fmt::format("rank {}: {}", r, e.what()), Error::Kind::kInternal);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (world.failed()) throw Error(world.failure(), world.failure_kind());
}

}  // namespace plumb::parallel
