// The sampling flags `plumb generate` and `plumb chat` share, so both take and document them alike.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/sampler.h"

namespace plumb::cli {

// Adds --temperature, --top-k, --top-p, --min-p, --repetition-penalty and --seed to `command`, writing `sampling`.
// Returns the --seed option: its count() is 0 when no seed was given (and a fresh one is to be drawn).
CLI::Option* add_sampling_options(CLI::App& command, SamplingParams& sampling);

}  // namespace plumb::cli
