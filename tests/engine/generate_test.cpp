// plumb generate and plumb serve draw the same tokens for the same request: generate()'s decode loop gives the
// sampler what the engine gives it (the history, the prompt's length, the step), so penalties that leave the prompt
// out (presence, frequency) leave it out in both.
#include "engine/generate.h"

#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "support/engine_stream.h"
#include "support/fixtures.h"

namespace plumb {
namespace {

TEST(Generate, DrawsWhatTheEngineDrawsPenaltiesIncluded) {
  CpuBackend backend;
  const Qwen3NextModel model = open_model(test::fixtures_dir() + "/models/qwen3_next_moe", backend);
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model.config().vocab_size - 1));
  std::vector<int32_t> prompt(80);
  for (int32_t& t : prompt) t = id(rng);
  const SamplingParams cases[] = {
      {.temperature = 0.9f, .presence_penalty = 1.5f, .seed = 3},
      {.temperature = 0.9f, .frequency_penalty = 1.5f, .seed = 4},
      {.temperature = 0.0f, .repetition_penalty = 1.3f},
  };
  for (const SamplingParams& sampling : cases) {
    GenerateOptions options;
    options.max_tokens = 24;
    options.sampling = sampling;
    const std::vector<int32_t> generated = generate(model, prompt, options).tokens;

    ModelRunner runner(model, 1);
    Engine engine(runner, SchedulerConfig{.max_running = 1,
                                          .max_waiting = 1,
                                          .step_tokens = 1 + 128,
                                          .prefill_chunk = 128,
                                          .kv_pages = 8,
                                          .kv_page_tokens = kKvPageSize});
    EngineRequest request;
    request.prompt = prompt;
    request.max_tokens = options.max_tokens;
    request.sampling = sampling;
    EXPECT_EQ(test::drain(*engine.submit(request).stream).tokens, generated)
        << "presence " << sampling.presence_penalty << ", frequency " << sampling.frequency_penalty << ", repetition "
        << sampling.repetition_penalty;
  }
}

}  // namespace
}  // namespace plumb
