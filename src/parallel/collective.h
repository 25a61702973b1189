// The collectives a model split over several ranks (tensor parallelism) meets in, as one seam: ranks that are threads
// of one process for the CPU backend (thread_world.h, which tests the sharded forward against the unsharded one in CI)
// and NCCL for GPUs. Every reduction adds the ranks' values in rank order, ((t_0 + t_1) + t_2) + …, never in an order
// a transport or a message size chooses, so its bits are the same run to run and on every rank.
#pragma once

#include "core/tensor.h"

namespace plumb::parallel {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Every rank calls each collective below in the same order with tensors of the same shape (F32); a rank that calls
  // another one, or passes another shape, fails the world with a message naming both calls.

  // t ← Σ_r t_r, added in rank order.
  virtual void all_reduce_sum(Tensor& t) = 0;
  // out ← every rank's `part` side by side along the last dimension, in rank order (the parts may differ in width,
  // as a vocabulary split in uneven shares does). out's leading dimensions are the parts'; its last is their sum.
  virtual void all_gather_last(const Tensor& part, Tensor& out) = 0;
  // t ← rank `root`'s t.
  virtual void broadcast(Tensor& t, int root) = 0;

  // Point to point, for a fold that goes on from rank to rank (the exact row-parallel product: rank r continues the
  // running sum rank r − 1 sends). Messages between two ranks arrive in the order they were sent; recv's shape must
  // be the one sent.
  virtual void send(const Tensor& t, int to) = 0;
  virtual void recv(Tensor& t, int from) = 0;
};

}  // namespace plumb::parallel
