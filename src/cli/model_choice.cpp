#include "cli/model_choice.h"

#include <filesystem>

#include "cli/default_model.h"
#include "cli/load_progress.h"
#include "core/error.h"
#include "engine/generate.h"
#include "model/synthetic_weights.h"

namespace plumb::cli {

void ModelChoice::add_options(CLI::App& command, const std::string& model_help) {
  std::string names;
  for (const std::string& n : synthetic_config_names()) names += (names.empty() ? "" : ", ") + n;
  command.add_option("--model", dir, model_help);
  command.add_option("--synthetic", synthetic,
                     "run plumb bench's random-weight model of these shapes instead of a folder (" + names +
                         "); it has no tokenizer, so prompts are token ids");
  command.add_option("--weights", weights,
                     "the --synthetic model's projections: bf16 (default), fp8 or nvfp4, as plumb bench --weights");
}

void ModelChoice::resolve(bool check_weights, bool quiet) {
  if (!is_synthetic()) {
    PLUMB_CHECK(weights.empty(), "--weights {} chooses a --synthetic model's format; a folder's is its own", weights);
    dir = model_dir_or_default(dir, quiet);
    return;
  }
  parse_synthetic_weights(weights.empty() ? "bf16" : weights);  // an unknown format fails here
  PLUMB_CHECK(dir.empty(), "--synthetic {} and --model {} both name a model: give one of them", synthetic, dir);
  PLUMB_CHECK(!check_weights, "--check-weights scans a checkpoint, and --synthetic {} has none: drop one", synthetic);
  synthetic_config(synthetic);  // an unknown name fails here, listing the known ones
}

ModelConfig ModelChoice::config() const {
  return is_synthetic() ? synthetic_config(synthetic).config : load_model_config(dir);
}

Qwen3NextModel ModelChoice::open(Backend& backend, const LoadOptions& load, bool quiet) const {
  if (is_synthetic()) {
    return synthetic_model(synthetic_config(synthetic).config, backend, kSyntheticSeed,
                           parse_synthetic_weights(weights.empty() ? "bf16" : weights), load.mtp);
  }
  return open_model_showing_progress(dir, backend, load, quiet);
}

std::string ModelChoice::name() const {
  if (is_synthetic()) return synthetic;
  std::string folder = std::filesystem::path(dir).lexically_normal().filename().string();
  return folder.empty() ? std::filesystem::absolute(dir).parent_path().filename().string() : folder;
}

}  // namespace plumb::cli
