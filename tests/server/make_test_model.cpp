// make_test_model DIR: writes a small random-weight qwen3_next model folder (config.json, model.safetensors) whose
// vocabulary and context match models/default, so the live-server tests can pair it with models/default's tokenizer
// and run many requests quickly under the sanitizers.
#include <cstdio>
#include <exception>

#include "support/synthetic_model.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_test_model DIR\n");
    return 2;
  }
  try {
    nlohmann::json config = plumb::test::small_qwen3_next_config();
    config["vocab_size"] = 4096;               // models/default's tokenizer
    config["max_position_embeddings"] = 4096;  // as models/default
    config["eos_token_id"] = {2, 0};
    config["hidden_size"] = 32;
    plumb::test::write_model_folder(argv[1], config, plumb::test::synthetic_tensors(config, /*seed=*/4));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_test_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
