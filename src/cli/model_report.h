// plumb inspect: what a model folder holds (architecture, parameters by kind), what one decode step at batch 1 must
// move through memory, and what the model takes on the GPU, read from config.json and the safetensors headers without
// loading the weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace plumb::cli {

struct InspectArgs {
  std::string model;
  std::optional<int64_t> context;  // tokens already in the KV cache when the step runs; absent: the model's own
  int64_t sequences = 1;           // sequences of `context` tokens the GPU memory estimate holds
};

void print_model_report(const InspectArgs& args);

}  // namespace plumb::cli
