// The model a running subcommand (serve, generate) uses: a model folder (--model DIR, or the default folder) or one
// of plumb bench's synthetic models of random weights (--synthetic NAME), which need no checkpoint and have no
// tokenizer, so their prompts are token ids.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "loader/load_model.h"
#include "model/qwen3_next.h"
#include "ops/backend.h"

namespace plumb::cli {

struct ModelChoice {
  std::string dir;        // --model
  std::string synthetic;  // --synthetic
  std::string weights;    // --weights: the synthetic model's projections, bf16 or fp8 (empty: bf16)

  // Adds --model (with `model_help`), --synthetic and --weights to `command`.
  void add_options(CLI::App& command, const std::string& model_help);
  // Checks the choice before anything loads: not both, a known synthetic name and weight format (--weights only
  // with --synthetic), no --check-weights for random weights. Without either, dir becomes the default folder
  // (model_dir_or_default), said on stderr unless `quiet`.
  void resolve(bool check_weights, bool quiet);
  bool is_synthetic() const { return !synthetic.empty(); }
  // The model's configuration, before anything loads: the synthetic model's, or the folder's config.json.
  ModelConfig config() const;
  // The model on `backend`: the folder loaded with `load`'s options and its progress on stderr unless `quiet`, or the
  // synthetic model built on the device with plumb bench's seed (with a random MTP head when load.mtp asks for one).
  Qwen3NextModel open(Backend& backend, const LoadOptions& load, bool quiet) const;
  // The model's name: the synthetic model's, or the folder's own.
  std::string name() const;
};

}  // namespace plumb::cli
