// parallel_for: splits [0, n) into contiguous ranges run on a small pool of host threads. Each index is handled by
// exactly one call, so work whose result per index does not depend on the split stays bit-identical whatever the
// thread count. The pool size comes from PLUMB_THREADS, else the machine's hardware concurrency.
#pragma once

#include <cstdint>
#include <functional>

namespace plumb {

int parallel_threads();
// Calls fn(begin, end) on disjoint ranges covering [0, n). Ranges are at least min_grain long.
void parallel_for(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace plumb
