// The Backend a --device flag names. Every subcommand that runs a model gets its backend here, so a new device (the
// CUDA backend) plugs in at one place.
#pragma once

#include <memory>
#include <string>

#include "ops/backend.h"

namespace plumb::cli {

// What --device accepts, for every subcommand's help.
inline constexpr const char* kDeviceHelp =
    "cpu (the reference), cpu-bf16 (the reference rounding operands to BF16 where the GPU does) or cuda";

inline constexpr const char* kCheckWeightsHelp =
    "scan every weight for NaN and infinity while loading (one pass over the checkpoint)";

inline constexpr const char* kSpeculativeTokensHelp =
    "draft this many tokens a step (1-8) with the model's multi-token-prediction head and verify them in one pass; "
    "the output is the same token for token, greedy or sampled (default 0: off)";

inline constexpr const char* kDraftVocabHelp =
    "with --speculative-tokens K: draft only among the first N token ids, so that each draft step reads N rows of "
    "the lm_head rather than all; fewer drafts may be kept, the output is the same (default 0: every id)";

std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace plumb::cli
