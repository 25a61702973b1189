// plumb inspect: what a model folder holds (architecture, parameters by kind) and what one decode step at batch 1
// must move through memory, read from config.json and the safetensors headers without loading the weights.
#pragma once

#include <cstdint>
#include <string>

namespace plumb::cli {

struct InspectArgs {
  std::string model;
  int64_t context = 4096;  // tokens already in the KV cache when the step runs
};

void print_model_report(const InspectArgs& args);

}  // namespace plumb::cli
