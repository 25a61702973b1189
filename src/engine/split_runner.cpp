// split_runner.h. The ranks are the threads of one run_thread_ranks call, on a host thread of their own; each loops
// over the calls the caller issues, one at a time, under one mutex. The world is shared with those threads, so a rank
// that hangs past a failure can be left behind (detached) rather than joined forever.
#include "engine/split_runner.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"
#include "engine/model_runner.h"
#include "engine/prefix_cache.h"
#include "engine/speculative.h"
#include "parallel/model_shard.h"
#include "parallel/rank_backend.h"
#include "parallel/thread_world.h"

namespace plumb {

struct SplitRunner::World {
  explicit World(int ranks) : size(ranks), finished(static_cast<size_t>(ranks)), errors(static_cast<size_t>(ranks)) {}

  const int size;
  std::mutex mutex;
  std::condition_variable changed;
  std::function<void(Runner&, int)> call;  // the call being made
  uint64_t issued = 0;                     // calls issued so far
  std::vector<uint64_t> finished;          // [ranks]: the calls each rank has finished, failed or not
  std::vector<std::exception_ptr> errors;  // [ranks]: what each threw in its last call (or while being built)
  int built = 0;                           // ranks whose runner is built or failed to build
  bool stopping = false;                   // the ranks leave their loops
  bool ended = false;                      // every rank thread has returned
  std::string failure;                     // once a rank failed: why, for every later call
  // Rank 0's runner's answers, read on its thread once it is built.
  int64_t vocab = 0, context = 0;
  bool draws = false, drafts = false, prefixes = false;
  std::thread host;  // runs the ranks

  // The error the caller sees of the ranks': rank 0's (which names a failing rank) if it has one, else the lowest.
  std::exception_ptr first_error() const {
    for (const std::exception_ptr& e : errors)
      if (e) return e;
    return nullptr;
  }
};

namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

void SplitRunner::rank_loop(World& world, parallel::Collective& collective, const RankFactory& make_rank) {
  const int rank = collective.rank();
  const auto report = [&](std::exception_ptr error, uint64_t call) {
    std::lock_guard lock(world.mutex);
    world.errors[static_cast<size_t>(rank)] = error;
    world.finished[static_cast<size_t>(rank)] = call;
    world.changed.notify_all();
  };
  std::unique_ptr<Runner> runner;
  try {
    runner = make_rank(collective);
  } catch (...) {
    {
      std::lock_guard lock(world.mutex);
      world.errors[static_cast<size_t>(rank)] = std::current_exception();
      ++world.built;
      world.changed.notify_all();
    }
    throw;
  }
  {
    std::lock_guard lock(world.mutex);
    if (rank == 0) {
      world.vocab = runner->vocab_size();
      world.context = runner->max_context();
      world.draws = runner->draws_tokens();
      world.drafts = runner->drafts_tokens();
      world.prefixes = runner->keeps_prefixes();
    }
    ++world.built;
    world.changed.notify_all();
  }
  for (uint64_t seen = 0;;) {
    std::function<void(Runner&, int)> call;
    {
      std::unique_lock lock(world.mutex);
      world.changed.wait(lock, [&] { return world.stopping || world.issued > seen; });
      if (world.issued == seen) return;  // stopping, every call made
      seen = world.issued;
      call = world.call;
    }
    std::exception_ptr error;
    try {
      call(*runner, rank);
    } catch (...) {
      error = std::current_exception();
    }
    report(error, seen);
    if (error) std::rethrow_exception(error);
  }
}

namespace {

int checked_world(int world) {
  PLUMB_CHECK(world >= 1, "tensor parallel: a world of {} ranks", world);
  return world;
}

}  // namespace

SplitRunner::SplitRunner(int world, std::chrono::milliseconds timeout, RankFactory make_rank)
    : world_(std::make_shared<World>(checked_world(world))) {
  std::shared_ptr<World> shared = world_;
  world_->host = std::thread([shared, world, timeout, make_rank = std::move(make_rank)] {
    try {
      parallel::run_thread_ranks(world, timeout,
                                 [&](parallel::Collective& collective) { rank_loop(*shared, collective, make_rank); });
    } catch (const std::exception&) {
      // Each rank's error was reported where it happened; the caller has it.
    }
    std::lock_guard lock(shared->mutex);
    shared->ended = true;
    shared->changed.notify_all();
  });
  std::unique_lock lock(world_->mutex);
  world_->changed.wait(lock, [&] { return world_->built == world_->size || world_->ended; });
  if (const std::exception_ptr error = world_->first_error(); error || world_->built < world_->size) {
    world_->stopping = true;
    world_->changed.notify_all();
    lock.unlock();
    world_->host.join();
    if (error) std::rethrow_exception(error);
    PLUMB_FAIL("tensor parallel: the ranks ended before every one was built");
  }
}

SplitRunner::~SplitRunner() {
  bool failed = false;
  {
    std::lock_guard lock(world_->mutex);
    world_->stopping = true;
    failed = !world_->failure.empty();
    world_->changed.notify_all();
  }
  // After a failure a rank may still hang in its call: it keeps the world alive and is left to end on its own.
  if (failed)
    world_->host.detach();
  else
    world_->host.join();
}

void SplitRunner::on_every_rank(const std::function<void(Runner& runner, int rank)>& call) {
  World& w = *world_;
  std::unique_lock lock(w.mutex);
  PLUMB_CHECK(w.failure.empty(), "tensor parallel: the ranks stopped after a failure ({})", w.failure);
  w.call = call;
  ++w.issued;
  std::fill(w.errors.begin(), w.errors.end(), nullptr);
  w.changed.notify_all();
  // Every rank finishes, or one fails (the others' collectives then stop, but a hung one might never return).
  w.changed.wait(lock, [&] {
    bool all = true;
    for (int r = 0; r < w.size; ++r) {
      if (w.errors[static_cast<size_t>(r)]) return true;
      all = all && w.finished[static_cast<size_t>(r)] == w.issued;
    }
    return all || w.ended;
  });
  std::exception_ptr error = w.first_error();
  if (!error && w.ended) error = std::make_exception_ptr(Error("tensor parallel: the ranks ended during a call"));
  if (!error) return;
  // Rank 0's message names the failing rank once the world has failed: wait briefly for it rather than report a
  // bystander's.
  w.changed.wait_for(lock, std::chrono::milliseconds(200), [&] { return w.errors[0] != nullptr || w.ended; });
  error = w.first_error() ? w.first_error() : error;
  w.failure = message_of(error);
  w.stopping = true;
  w.changed.notify_all();
  lock.unlock();
  std::rethrow_exception(error);
}

int SplitRunner::world_size() const {
  return world_->size;
}
int64_t SplitRunner::vocab_size() const {
  return world_->vocab;
}
int64_t SplitRunner::max_context() const {
  return world_->context;
}
bool SplitRunner::draws_tokens() const {
  return world_->draws;
}
bool SplitRunner::drafts_tokens() const {
  return world_->drafts;
}
bool SplitRunner::keeps_prefixes() const {
  return world_->prefixes;
}

// Each call's inputs and results are copies the ranks share (held by the call), not the caller's: a rank that hangs
// past a failure may make the call after the caller has gone.
RunnerOutput SplitRunner::forward(const std::vector<RunnerEntry>& batch) {
  const auto entries = std::make_shared<const std::vector<RunnerEntry>>(batch);
  const auto out = std::make_shared<RunnerOutput>();
  on_every_rank([entries, out](Runner& runner, int rank) {
    RunnerOutput mine = runner.forward(*entries);
    if (rank == 0) *out = std::move(mine);
  });
  return std::move(*out);
}

void SplitRunner::release(int32_t slot) {
  on_every_rank([slot](Runner& runner, int) { runner.release(slot); });
}

int64_t SplitRunner::start_from_cache(int32_t slot, std::span<const int32_t> prompt) {
  const auto tokens = std::make_shared<const std::vector<int32_t>>(prompt.begin(), prompt.end());
  const auto position = std::make_shared<int64_t>(0);
  on_every_rank([slot, tokens, position](Runner& runner, int rank) {
    const int64_t mine = runner.start_from_cache(slot, *tokens);
    if (rank == 0) *position = mine;
  });
  return *position;
}

void SplitRunner::offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) {
  const auto tokens = std::make_shared<const std::vector<int32_t>>(prompt.begin(), prompt.end());
  on_every_rank([slot, tokens, position](Runner& runner, int) { runner.offer_prefix(slot, *tokens, position); });
}

namespace {

// A rank's backend, model share and runner, owned together; every call goes to the runner.
class RankModelRunner final : public Runner {
 public:
  RankModelRunner(parallel::Collective& collective, std::unique_ptr<Backend> device, const ModelConfig& config,
                  const ModelWeights& whole, parallel::RowReduction reduction, int32_t slots,
                  const SplitModelOptions& options)
      : device_(std::move(device)),
        backend_(*device_, collective),
        model_(parallel::rank_model(
            parallel::shard_model(config, whole, collective.rank(), collective.world_size(), reduction), backend_)),
        runner_(model_, slots, StepGraphOptions{.enabled = false}) {
    if (options.drafting) runner_.enable_drafting(std::make_unique<MtpDrafter>(model_));
    if (options.prefix_cache_bytes > 0.0) {
      const PrefixCacheLimits limits =
          prefix_cache_limits(model_, options.prefix_cache_bytes, options.prefix_cache_stride);
      if (limits.snapshots > 0) runner_.enable_prefix_cache(limits);
    }
  }

  int64_t vocab_size() const override { return runner_.vocab_size(); }
  int64_t max_context() const override { return runner_.max_context(); }
  bool draws_tokens() const override { return runner_.draws_tokens(); }
  bool drafts_tokens() const override { return runner_.drafts_tokens(); }
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override { return runner_.forward(batch); }
  void release(int32_t slot) override { runner_.release(slot); }
  bool keeps_prefixes() const override { return runner_.keeps_prefixes(); }
  int64_t start_from_cache(int32_t slot, std::span<const int32_t> prompt) override {
    return runner_.start_from_cache(slot, prompt);
  }
  void offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) override {
    runner_.offer_prefix(slot, prompt, position);
  }

 private:
  std::unique_ptr<Backend> device_;
  parallel::RankBackend backend_;
  Qwen3NextModel model_;
  ModelRunner runner_;
};

}  // namespace

std::unique_ptr<Runner> split_model_runner(parallel::Collective& collective, std::unique_ptr<Backend> device,
                                           const ModelConfig& config, const ModelWeights& whole,
                                           parallel::RowReduction reduction, int32_t slots,
                                           const SplitModelOptions& options) {
  return std::make_unique<RankModelRunner>(collective, std::move(device), config, whole, reduction, slots, options);
}

}  // namespace plumb
