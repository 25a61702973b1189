// Loading a Hugging Face model folder: config.json, then every tensor the weight table names, checked for presence,
// shape and dtype, converted as the table says (FP8 and NVFP4 dequantized, Qwen3-Next's fused projections permuted),
// and handed to the backend. Tensors the table does not name are refused, except the multimodal wrapper's vision tower
// and the multi-token-prediction head unless LoadOptions::mtp asks for it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/config.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace plumb {

struct LoadedModel {
  ModelConfig config;
  ModelWeights weights;
};

// Where a load stands after one more checkpoint tensor was read, for a caller's progress display (the loader itself
// prints nothing). Bytes are the checkpoint's stored bytes of the tensors the model uses.
struct LoadProgress {
  std::string file;  // the .safetensors file the tensor came from
  int shard = 0;     // that file's number, 1 to shards, in the order the model first reads from them
  int shards = 0;
  bool shard_done = false;  // this was the file's last tensor
  int64_t bytes_done = 0, bytes_total = 0;
};

struct LoadOptions {
  // Scan every weight for NaN and infinity as it is read (a pass over the checkpoint's bytes), failing with the
  // tensor, file and element: a non-finite weight otherwise turns every logit into NaN, and sampling then yields
  // token 0 without a word.
  bool check_weights = false;
  // Load the multi-token-prediction head (mtp.*) for speculative decoding; without it those tensors are skipped.
  bool mtp = false;
  std::function<void(const LoadProgress&)> on_progress;  // called after every tensor read, when set
};

LoadedModel load_model(const std::string& model_dir, Backend& backend, const LoadOptions& options = {});

}  // namespace plumb
