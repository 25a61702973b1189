// What `plumb serve` reserves at start, so that no step allocates state and none runs out of memory mid-step: the
// recurrent state slots of every sequence it runs at once, the step memory (each graph bucket's recording and one
// full prefill step, run once), the prefix cache's slots and pages, and the KV pages the rest of a memory budget
// holds.
#pragma once

#include <cstdint>
#include <string>

#include "engine/model_runner.h"
#include "model/qwen3_next.h"

namespace plumb::cli {

struct ServeMemoryOptions {
  std::string device;                    // the --device flag, for messages
  int32_t max_batch = 32;                // sequences at once: a recurrent state slot each
  int32_t speculative_tokens = 0;        // drafts a verification: a trail state slot each beside a sequence's
  int64_t step_tokens = 0;               // the most tokens one step runs (the prefill warm-up's size)
  int64_t kv_pages = 0;                  // --kv-pages (0: unset)
  double kv_cache_gib = 0.0;             // --kv-cache-gib (0: unset)
  double gpu_memory_utilization = 0.90;  // in (0, 1] (checked by the caller): the share of the GPU memory free after
                                         // the weights that serving may take
  // --prefix-cache-gib: the prefix cache's memory; 0: no cache; below 0 (unset): kDefaultPrefixCacheShare of the
  // budget left after the slots and step memory on a GPU, kDefaultCpuPrefixCacheGib on the CPU.
  double prefix_cache_gib = -1.0;
  int64_t prefix_cache_stride = kKvPageSize;  // --prefix-cache-stride: tokens between kept states of a prompt
};

constexpr double kDefaultPrefixCacheShare = 0.1;
constexpr double kDefaultCpuPrefixCacheGib = 1.0;

struct ServeMemory {
  int64_t kv_pages = 0;            // what the scheduler may hand out to sequences
  PrefixCacheLimits prefix_cache;  // {0, 0}: no cache
  std::string summary;             // one line: what was reserved, in slots, pages and GiB
};

// Reserves what serving holds. On a GPU, without --kv-pages or --kv-cache-gib, the KV pages are what is left of the
// budget (gpu_memory_utilization of the memory free after the weights) once the state slots and the step memory are
// taken; on the CPU, without either flag, pages are allocated as sequences grow, up to a full context for every slot.
ServeMemory reserve_serve_memory(const ServeMemoryOptions& options, const Qwen3NextModel& model, ModelRunner& runner,
                                 int64_t context);

}  // namespace plumb::cli
