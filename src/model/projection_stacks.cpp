#include "model/projection_stacks.h"

#include "core/error.h"

namespace plumb {
namespace {

bool stack_together(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.rank() == 2 && b.rank() == 2 && a.dim(1) == b.dim(1);
}

void stack_run(Backend& backend, const std::vector<Tensor*>& run) {
  int64_t rows = 0;
  for (const Tensor* part : run) rows += part->dim(0);
  Tensor stack = backend.empty(run.front()->dtype(), {rows, run.front()->dim(1)});  // [Σ rows, K]
  int64_t row = 0;
  for (Tensor* part : run) {
    Tensor view = stack.rows(row, row + part->dim(0));
    backend.copy(*part, view);
    *part = view;
    row += view.dim(0);
  }
}

}  // namespace

void stack_rows(Backend& backend, const std::vector<Tensor*>& parts) {
  std::vector<Tensor*> run;
  const auto flush = [&] {
    if (run.size() > 1) stack_run(backend, run);
    run.clear();
  };
  for (Tensor* part : parts) {
    PLUMB_CHECK(part != nullptr && part->data() != nullptr, "stack_rows: a projection to stack is missing");
    if (!run.empty() && !stack_together(*run.back(), *part)) flush();
    run.push_back(part);
  }
  flush();
}

void stack_projections(ModelWeights& weights, Backend& backend) {
  for (LayerWeights* layer_ptr : decoder_layers(weights)) {
    LayerWeights& layer = *layer_ptr;
    if (layer.kind == LayerKind::kGatedDeltaNet) {
      GdnWeights& g = layer.gdn;
      stack_rows(backend, {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a});
    } else {
      AttentionWeights& a = layer.attn;
      stack_rows(backend, {&a.q_proj, &a.k_proj, &a.v_proj});
    }
    if (layer.mlp_kind == MlpKind::kMoe) {
      MoeWeights& m = layer.moe;
      if (m.has_shared_expert)
        stack_rows(backend, {&m.router, &m.shared_expert_gate, &m.shared_expert.gate_proj, &m.shared_expert.up_proj});
    } else {
      stack_rows(backend, {&layer.mlp.gate_proj, &layer.mlp.up_proj});
    }
  }
  backend.release_cached_memory();
}

}  // namespace plumb
