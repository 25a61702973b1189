// Backend's fused ops as the ops they stand for, one after the other: what the CPU reference runs, and what a
// backend runs where its fused kernel does not apply.
#pragma once

#include <vector>

#include "core/error.h"
#include "ops/backend.h"

namespace plumb {

// Backend::gdn_core as causal_conv1d_silu, gated_delta_rule and gated_rms_norm.
inline void gdn_core_in_three_ops(Backend& be, const Tensor& qkv, const Tensor& conv_w,
                                  const std::vector<Tensor*>& conv_states, int64_t key_heads, const Tensor& a,
                                  const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                                  const std::vector<Tensor*>& recurrent_states, const Tensor& z, const Tensor& norm_w,
                                  float eps, const BatchRows& batch, Tensor& y, GdnAlgorithm algorithm) {
  PLUMB_CHECK(qkv.rank() == 2 && a.rank() == 2 && y.rank() == 2 && a.dim(1) > 0 && y.dim(1) % a.dim(1) == 0,
              "gdn_core: qkv {}, a {} and y {} are not [T, C], [T, nv] and [T, nv·dv]", shape_str(qkv.shape()),
              shape_str(a.shape()), shape_str(y.shape()));
  const int64_t T = qkv.dim(0), nv = a.dim(1), dv = y.dim(1) / nv;
  Tensor conv = be.empty(DType::kF32, qkv.shape());  // [T, C] SiLU(conv(qkv)): q | k | v per token
  be.causal_conv1d_silu(qkv, conv_w, conv_states, batch, conv);
  Tensor core = be.empty(DType::kF32, {T, nv, dv});  // [T, nv, dv]
  be.gated_delta_rule(conv, key_heads, a, b, A_log, dt_bias, recurrent_states, batch, core, algorithm);
  Tensor rows = y.reshape({T * nv, dv});  // [T·nv, dv] y by value head
  be.gated_rms_norm(core.reshape({T * nv, dv}), z.reshape({T * nv, dv}), norm_w, eps, rows);
}

}  // namespace plumb
