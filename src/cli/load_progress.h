// Loading the model folder a subcommand runs, with progress on stderr while the checkpoint is read: on a terminal a
// bar with bytes and rate redrawn in place, otherwise a line per shard as it is done; then "plumb: load N ms".
#pragma once

#include <string>

#include "loader/load_model.h"
#include "model/qwen3_next.h"
#include "ops/backend.h"

namespace plumb::cli {

// open_model() with `options` (its progress callback replaced), showing its progress; `quiet` prints nothing.
Qwen3NextModel open_model_showing_progress(const std::string& model_dir, Backend& backend, LoadOptions options,
                                           bool quiet);

}  // namespace plumb::cli
