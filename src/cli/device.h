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

std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace plumb::cli
