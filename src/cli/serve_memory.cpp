#include "cli/serve_memory.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

#include "core/error.h"

namespace plumb::cli {
namespace {

constexpr double kGiB = static_cast<double>(int64_t{1} << 30);

// The pages --kv-pages or --kv-cache-gib ask for; 0 when neither is given.
int64_t asked_kv_pages(const ServeMemoryOptions& o, const KvPagePool& pool) {
  PLUMB_CHECK(o.kv_pages >= 0, "--kv-pages must be >= 0, got {}", o.kv_pages);
  PLUMB_CHECK(std::isfinite(o.kv_cache_gib) && o.kv_cache_gib >= 0.0,
              "--kv-cache-gib must be a finite number >= 0, got {}", o.kv_cache_gib);
  if (o.kv_pages > 0 || o.kv_cache_gib == 0.0 || pool.page_bytes() == 0) return o.kv_pages;
  const double fit = o.kv_cache_gib * kGiB / static_cast<double>(pool.page_bytes());
  PLUMB_CHECK(fit >= 1.0, "--kv-cache-gib {}: less than one KV page ({} bytes)", o.kv_cache_gib, pool.page_bytes());
  // Page ids are 32-bit: a budget past that is refused here rather than cast out of range.
  PLUMB_CHECK(fit <= static_cast<double>(std::numeric_limits<int32_t>::max()),
              "--kv-cache-gib {}: {:.0f} KV pages of {} bytes exceed the 2^31 - 1 page ids", o.kv_cache_gib, fit,
              pool.page_bytes());
  return static_cast<int64_t>(fit);
}

// Grows the pool to `pages` pages, refusing up front a size the host cannot hold (CPU devices) and turning a failed
// allocation on any device into a message that names what was asked for, instead of std::bad_alloc.
void reserve_kv_pages(const Qwen3NextModel& model, int64_t pages, const std::string& asked) {
  KvPagePool& pool = model.kv_pool();
  const double bytes = static_cast<double>(pages) * static_cast<double>(pool.page_bytes());
  const auto too_much = [&](const std::string& why) {
    return fmt::format("{}: {} KV pages of {} bytes ({:.3g} GiB) do not fit: {}", asked, pages, pool.page_bytes(),
                       bytes / kGiB, why);
  };
  if (model.backend().device() == Device::kCpu) {
    const int64_t available = model.backend().memory_info().free_bytes;
    if (available > 0 && bytes > static_cast<double>(available)) {
      const int64_t fit = available / std::max<int64_t>(1, pool.page_bytes());
      PLUMB_FAIL("{}", too_much(fmt::format("{:.3g} GiB of memory is available, which holds --kv-pages {} "
                                            "(--kv-cache-gib {:.3g}) at most",
                                            static_cast<double>(available) / kGiB, fit,
                                            static_cast<double>(fit * pool.page_bytes()) / kGiB)));
    }
  }
  try {
    pool.reserve(pages);
  } catch (const std::bad_alloc&) {
    PLUMB_FAIL("{}", too_much("the allocation failed; ask for less"));
  } catch (const Error& e) {
    PLUMB_FAIL("{}", too_much(e.what()));
  }
}

// The prefix cache's limits for `bytes`, refusing a --prefix-cache-gib too small for one entry.
PrefixCacheLimits cache_limits(const ServeMemoryOptions& o, const Qwen3NextModel& model, double bytes) {
  PLUMB_CHECK(std::isfinite(o.prefix_cache_gib), "--prefix-cache-gib must be a finite number, got {}",
              o.prefix_cache_gib);
  if (o.prefix_cache_gib == 0.0) return {};
  PLUMB_CHECK(o.prefix_cache_stride > 0 && o.prefix_cache_stride % kKvPageSize == 0,
              "--prefix-cache-stride {}: the stride must be a positive multiple of {} tokens", o.prefix_cache_stride,
              kKvPageSize);
  const PrefixCacheLimits limits = prefix_cache_limits(model, bytes, o.prefix_cache_stride);
  PLUMB_CHECK(o.prefix_cache_gib < 0.0 || limits.snapshots > 0,
              "--prefix-cache-gib {}: less than one prefix cache entry ({} bytes of recurrent state and {} KV pages "
              "of {} bytes); raise it, or 0 for no cache",
              o.prefix_cache_gib, model.recurrent_pool().slot_bytes(), o.prefix_cache_stride / kKvPageSize + 1,
              model.kv_pool().page_bytes());
  return limits;
}

std::string cache_summary(const PrefixCacheLimits& limits, const Qwen3NextModel& model) {
  if (limits.snapshots == 0) return "no prefix cache";
  const double bytes = static_cast<double>(limits.snapshots * model.recurrent_pool().slot_bytes() +
                                           limits.pages * model.kv_pool().page_bytes());
  return fmt::format("a prefix cache of {} entries and {} KV pages ({:.3g} GiB, a state every {} prompt tokens)",
                     limits.snapshots, limits.pages, bytes / kGiB, limits.stride);
}

std::string asked_flag(const ServeMemoryOptions& o) {
  return o.kv_pages > 0 ? fmt::format("--kv-pages {}", o.kv_pages) : fmt::format("--kv-cache-gib {}", o.kv_cache_gib);
}

}  // namespace

ServeMemory reserve_serve_memory(const ServeMemoryOptions& o, const Qwen3NextModel& model, ModelRunner& runner,
                                 int64_t context) {
  const int64_t trail_slots = int64_t{o.max_batch} * o.speculative_tokens;  // a verification's kept states
  Backend& backend = model.backend();
  KvPagePool& kv = model.kv_pool();
  RecurrentStatePool& states = model.recurrent_pool();
  const int64_t asked = asked_kv_pages(o, kv);
  // A sequence never holds more than a full context's pages, so more than that for every slot is never used.
  const int64_t most_useful = o.max_batch * kv_pages_for(context);

  if (backend.device() == Device::kCpu) {
    states.reserve(o.max_batch + trail_slots);
    const int64_t pages = asked > 0 ? asked : most_useful;
    // The cache's slots and pages are allocated as it keeps entries, like the sequences' pages.
    const PrefixCacheLimits cache =
        cache_limits(o, model, (o.prefix_cache_gib < 0.0 ? kDefaultCpuPrefixCacheGib : o.prefix_cache_gib) * kGiB);
    if (asked > 0) reserve_kv_pages(model, asked, asked_flag(o));
    return {pages, cache,
            fmt::format("plumb serve: {} sequence slots ({:.3g} GiB of recurrent state), {} KV pages of {} "
                        "positions ({:.3g} GiB{}), {}",
                        o.max_batch, static_cast<double>(states.capacity() * states.slot_bytes()) / kGiB, pages,
                        kKvPageSize, static_cast<double>(pages) * static_cast<double>(kv.page_bytes()) / kGiB,
                        asked > 0 ? ", reserved" : ", allocated as sequences grow", cache_summary(cache, model))};
  }

  // The GPU: measure what the weights left, take the slots and the step memory, and give the rest of the budget to
  // KV pages. The warm-up's throwaway sequences need a slot and a page a row of the largest bucket, and the pages of
  // one full prefill step, besides the sinks'.
  const MemoryInfo after_weights = backend.memory_info();
  const double budget = o.gpu_memory_utilization * static_cast<double>(after_weights.free_bytes);
  const int64_t largest_bucket = runner.largest_graph_bucket();
  const int64_t sinks = runner.sink_sequences();
  try {
    states.reserve(o.max_batch + trail_slots + sinks);
    kv.reserve(sinks + std::max(largest_bucket, kv_pages_for(o.step_tokens)));
    runner.warm_up(o.step_tokens, o.speculative_tokens);
  } catch (const Error& e) {
    PLUMB_FAIL(
        "plumb serve --device {}: the state of {} sequences and the step memory do not fit in the {:.3g} GiB "
        "free after the weights ({}); lower --max-batch",
        o.device, o.max_batch, static_cast<double>(after_weights.free_bytes) / kGiB, e.what());
  }
  PLUMB_CHECK(states.capacity() == o.max_batch + trail_slots + sinks &&
                  kv.capacity() == sinks + std::max(largest_bucket, kv_pages_for(o.step_tokens)),
              "plumb serve: the warm-up grew the state pool to {} slots and the KV pool to {} pages", states.capacity(),
              kv.capacity());
  const MemoryInfo after_warm_up = backend.memory_info();
  const double kv_now = static_cast<double>(kv.capacity()) * static_cast<double>(kv.page_bytes());
  const double state_bytes = static_cast<double>(states.capacity() * states.slot_bytes());
  // What serving holds apart from KV pages: the slots and the step memory (the arena, cached step blocks, tables).
  const double held = static_cast<double>(after_weights.free_bytes - after_warm_up.free_bytes) - kv_now;
  // The prefix cache comes out of what is left of the budget, before the sequences' KV pages.
  const PrefixCacheLimits cache = cache_limits(
      o, model,
      o.prefix_cache_gib < 0.0 ? kDefaultPrefixCacheShare * std::max(0.0, budget - held) : o.prefix_cache_gib * kGiB);
  const double cache_bytes = static_cast<double>(cache.snapshots * states.slot_bytes() + cache.pages * kv.page_bytes());
  try {
    states.reserve(states.capacity() + cache.snapshots);
  } catch (const Error& e) {
    PLUMB_FAIL("plumb serve --device {}: {} does not fit ({})", o.device, cache_summary(cache, model), e.what());
  }
  int64_t pages = asked;
  if (asked == 0) {
    const double fit =
        std::floor((budget - held - cache_bytes) / static_cast<double>(std::max<int64_t>(1, kv.page_bytes())));
    PLUMB_CHECK(fit >= static_cast<double>(sinks + 1),
                "--gpu-memory-utilization {}: {:.3g} GiB of the {:.3g} GiB free after the weights, less the {:.3g} "
                "GiB the state of {} sequences and the step memory take, holds no KV page for a sequence; raise it "
                "or lower --max-batch",
                o.gpu_memory_utilization, budget / kGiB, static_cast<double>(after_weights.free_bytes) / kGiB,
                held / kGiB, o.max_batch);
    pages = std::min(static_cast<int64_t>(std::min(fit, 2147483647.0)) - sinks, most_useful);
  }
  reserve_kv_pages(model, pages + sinks + cache.pages,
                   asked > 0 ? asked_flag(o) : fmt::format("--gpu-memory-utilization {}", o.gpu_memory_utilization));
  return {pages, cache,
          fmt::format("plumb serve: reserved {} sequence slots ({:.3g} GiB of recurrent state), {} KV pages of "
                      "{} positions ({:.3g} GiB, {} positions), {:.3g} GiB of step memory, {}; {:.3g} GiB was free "
                      "after the weights, {}",
                      o.max_batch, state_bytes / kGiB, pages, kKvPageSize,
                      static_cast<double>(pages + sinks) * static_cast<double>(kv.page_bytes()) / kGiB,
                      pages * kKvPageSize, (held - state_bytes) / kGiB, cache_summary(cache, model),
                      static_cast<double>(after_weights.free_bytes) / kGiB,
                      asked > 0 ? fmt::format("the pages as {} asks", asked_flag(o))
                                : fmt::format("the budget is {} of it", o.gpu_memory_utilization))};
}

}  // namespace plumb::cli
