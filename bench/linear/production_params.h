// The launch parameters production gives a plain product, for the benchmarks that time it (linear_bench,
// quantized_stream_arith): one definition, so that both time what the engine would launch.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/device_limits.h"
#include "backends/cuda/kernels/launch_choices.h"
#include "backends/cuda/kernels/linear.h"

namespace plumb::bench {

// A plain product of `rows` rows of `w_type` weights, n × k, into y [rows, n]: production's shape and K split, with
// the split's buffers (launch_linear tiles a plain product's rows itself). The caller sets the weights (w,
// w_group_scales) and the activations (x, staged as the shape reads them).
inline cuda::LinearParams production_linear_params(cuda::LinearWeights w_type, int rows, int n, int k,
                                                   const float* w_scales, float* y, float* partials, int32_t* arrivals,
                                                   const cuda::DeviceLimits& device) {
  cuda::LinearParams p;
  p.w_type = w_type;
  p.shape = cuda::choose_linear_shape(w_type, rows, rows, n, cuda::linear_wgmma_runs(), device);
  p.w_scales = w_scales;
  p.y = y;
  p.rows = rows;
  p.n = n;
  p.k = k;
  p.k_split = cuda::choose_linear_k_split(p, device);
  p.partials = partials;
  p.arrivals = arrivals;
  return p;
}

}  // namespace plumb::bench
