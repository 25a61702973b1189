// plumb serve's start-up reservation (cli/serve_memory.h) on the path a GPU takes, driven on the CPU: the reference
// backend behind one that reports a GPU's device and a fixed amount of free memory. The reservation must hold what it
// reserved, the verifications' trail slots of speculative decoding included. (What does not fit is refused by
// measuring the device's free memory, which this backend does not model: that stays with the GPU checks.)
#include "cli/serve_memory.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/generate.h"
#include "ops/forwarding_backend.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

// The CPU reference, reporting itself as a GPU with `free_bytes` free of `total_bytes`, so that the reservation takes
// its GPU path (measured budget, warm-up, KV pages from what is left).
class GpuLikeBackend final : public ForwardingBackend {
 public:
  GpuLikeBackend(int64_t free_bytes, int64_t total_bytes) : ForwardingBackend(cpu_), memory_{free_bytes, total_bytes} {}
  Device device() const override { return Device::kCuda; }
  MemoryInfo memory_info() const override { return memory_; }

 private:
  CpuBackend cpu_;
  MemoryInfo memory_;
};

constexpr int64_t kMiB = int64_t{1} << 20;

cli::ServeMemoryOptions options(int32_t max_batch, int32_t speculative_tokens) {
  cli::ServeMemoryOptions o;
  o.device = "cuda";
  o.max_batch = max_batch;
  o.speculative_tokens = speculative_tokens;
  o.step_tokens = 64;
  o.prefix_cache_gib = 0.0;
  return o;
}

// Proposes nothing: the reservation's warm-up runs verifications of its own, without drafts.
class NoDrafter final : public Drafter {
 public:
  std::vector<std::vector<int32_t>> propose(const std::vector<DraftRequest>& batch) override {
    return std::vector<std::vector<int32_t>>(batch.size());
  }
};

TEST(ServeMemory, OnTheGpuPathHoldsTheVerificationsTrailSlots) {
  for (const int32_t k : {0, 3}) {
    GpuLikeBackend backend(512 * kMiB, 1024 * kMiB);
    const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
    ModelRunner runner(model, 4, StepGraphOptions{true, {1, 2, 4}});
    if (k > 0) runner.enable_drafting(std::make_unique<NoDrafter>());
    // The warm-up's largest verification (4 sequences of 1 + k tokens) takes its trail slots within the reservation:
    // reserve_serve_memory refuses a warm-up that grew the pool.
    const cli::ServeMemory memory = cli::reserve_serve_memory(options(4, k), model, runner, 256);
    EXPECT_EQ(model.recurrent_pool().capacity(), 4 + 4 * k + runner.sink_sequences()) << "k " << k;
    // What the warm-up left held: the sinks, and the trails of the 4 slots its verification ran in.
    EXPECT_EQ(model.recurrent_pool().used_slots(), runner.sink_sequences() + 4 * k) << "k " << k;
    // A sequence's full context of pages for every slot: the budget holds more, and no more is ever used.
    EXPECT_EQ(memory.kv_pages, 4 * kv_pages_for(256)) << "k " << k;
    EXPECT_NE(memory.summary.find("reserved 4 sequence slots"), std::string::npos) << memory.summary;
  }
}

}  // namespace
}  // namespace plumb
