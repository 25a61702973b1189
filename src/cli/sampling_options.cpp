#include "cli/sampling_options.h"

#include "cli/parse.h"

namespace plumb::cli {

CLI::Option* add_sampling_options(CLI::App& command, SamplingParams& sampling) {
  command.add_option("--temperature", sampling.temperature, "0 for greedy");
  command.add_option("--top-k", sampling.top_k, "keep the k most likely tokens (0: all)");
  command.add_option("--top-p", sampling.top_p, "keep the most likely tokens up to this mass");
  command.add_option("--min-p", sampling.min_p, "drop tokens below this fraction of the best one");
  command.add_option("--repetition-penalty", sampling.repetition_penalty, "1 for none");
  return command.add_option("--seed", sampling.seed, "seed of a sampled run (default: a fresh one each run)")
      ->default_str("random")
      ->check(seed_error);
}

}  // namespace plumb::cli
