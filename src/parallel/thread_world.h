// A world of ranks that are threads of one process: the CPU backend's tensor parallelism, so that a sharded forward
// runs in CI (on host tensors) and is checked against the unsharded one.
#pragma once

#include <chrono>
#include <functional>

#include "parallel/collective.h"

namespace plumb::parallel {

// Runs fn(collective) on `world_size` threads, the collective of thread r being rank r's, and returns once every rank
// has returned. A rank that throws fails the world: every rank waiting in a collective, or entering one later, stops
// with an error naming that rank, so none waits for it forever; a rank that waits in one collective longer than
// `timeout` for another rank (one that hangs, or skipped the call) fails the world the same way. The first failure
// is then rethrown here (a plumb::Error of the failing rank's kind), after every thread has ended.
void run_thread_ranks(int world_size, std::chrono::milliseconds timeout,
                      const std::function<void(Collective& collective)>& fn);

}  // namespace plumb::parallel
