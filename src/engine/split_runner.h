// A Runner for a model split over ranks that are threads of this process (tensor parallelism, parallel/model_shard.h):
// one Runner a rank, each built and run on its rank's thread, every call made on every rank at once (their
// collectives meet inside it) and rank 0's answer returned. The ranks see the same calls in the same order, so their
// slots, pools and caches stay alike, and with the exact reduction rank 0's answer is the unsplit model's.
// One process for the host, a thread for each rank: the engine, scheduler, tokenizer and server exist once, and a rank
// that fails is an exception in this process rather than a lost peer. A rank whose call throws ends its thread, which
// fails the world (parallel/thread_world.h): the other ranks' collectives stop with its name at once, that call
// throws, and every later call throws the same message, so a server whose ranks stopped answers every request with
// an error instead of hanging. A rank that hangs fails the world after the timeout the same way.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/runner.h"
#include "model/config.h"
#include "model/kv_pages.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "parallel/collective.h"
#include "parallel/row_parallel.h"

namespace plumb {

class SplitRunner final : public Runner {
 public:
  // Builds rank `collective.rank()`'s Runner on its thread (its backend, model share and runner, all owned by what it
  // returns).
  using RankFactory = std::function<std::unique_ptr<Runner>(parallel::Collective& collective)>;
  // Starts `world` rank threads, each building its Runner with make_rank, and returns once every one is built; a
  // rank's failure to build is thrown here. A rank that waits in a collective longer than `timeout` fails the world.
  SplitRunner(int world, std::chrono::milliseconds timeout, RankFactory make_rank);
  ~SplitRunner() override;
  SplitRunner(const SplitRunner&) = delete;
  SplitRunner& operator=(const SplitRunner&) = delete;

  int world_size() const;
  int64_t vocab_size() const override;
  int64_t max_context() const override;
  bool draws_tokens() const override;
  bool drafts_tokens() const override;
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override;
  void release(int32_t slot) override;
  bool keeps_prefixes() const override;
  int64_t start_from_cache(int32_t slot, std::span<const int32_t> prompt) override;
  void offer_prefix(int32_t slot, std::span<const int32_t> prompt, int64_t position) override;

 private:
  struct World;
  // One rank's life: builds its runner, then makes each call the caller issues until told to stop. A call that
  // throws ends the rank (rethrown, so the world fails and the other ranks' collectives stop at once).
  static void rank_loop(World& world, parallel::Collective& collective, const RankFactory& make_rank);
  // Runs call(rank's runner) on every rank at once and waits for all; rank 0's results are the caller's to keep.
  // A failed call's error (rank 0's, which names the failing rank, or the failing rank's own) is thrown.
  void on_every_rank(const std::function<void(Runner& runner, int rank)>& call);

  std::shared_ptr<World> world_;  // shared with the rank threads
};

// What every rank's runner of a split model serves beside plain steps.
struct SplitModelOptions {
  double prefix_cache_bytes = 0.0;  // each rank's prefix cache (prefix_cache_limits of its share); 0: none
  int64_t prefix_cache_stride = kKvPageSize;
  bool drafting = false;  // speculative decoding with the model's MTP head (its share on each rank)
};

// Rank `collective.rank()`'s runner of a model split over the collective's ranks: its share of `whole` (the model's
// host weights, read while it is built) on a RankBackend over `device` (a CPU backend), run by a ModelRunner of
// `slots` slots without step graphs (a split step records none). What a SplitRunner's factory returns. Every rank's
// share is alike in size, so their prefix caches take the same limits and make the same choices.
std::unique_ptr<Runner> split_model_runner(parallel::Collective& collective, std::unique_ptr<Backend> device,
                                           const ModelConfig& config, const ModelWeights& whole,
                                           parallel::RowReduction reduction, int32_t slots,
                                           const SplitModelOptions& options = {});

}  // namespace plumb
