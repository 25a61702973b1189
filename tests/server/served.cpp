#include "served.h"

#include <filesystem>

#include "support/fixtures.h"

namespace plumb::test {

RunnerOutput EosRunner::forward(const std::vector<RunnerEntry>& batch) {
  RunnerOutput out;
  for (const RunnerEntry& e : batch) {
    out.drawn.push_back(-1);
    if (!e.logits) continue;
    std::vector<float> row(static_cast<size_t>(vocab_), 0.0f);  // [V]
    row[static_cast<size_t>(eos_)] = 30.0f;
    out.logits.insert(out.logits.end(), row.begin(), row.end());
  }
  return out;
}

ServedModelFixture::ServedModelFixture(ServerOptions options) {
  const std::string dir = scratch_dir("served_model");
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    std::filesystem::copy_file(source_dir() + "/models/default/" + file, dir + "/" + file,
                               std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(source_dir() + "/tools/tiny_chat_template.jinja", dir + "/chat_template.jinja",
                             std::filesystem::copy_options::overwrite_existing);
  text_ = std::make_unique<ModelText>(ModelText::from_dir(dir));
  runner_ = std::make_unique<EosRunner>(text_->tokenizer().vocab_size(), text_->eos_ids().at(0));
  engine_ = std::make_unique<Engine>(*runner_, SchedulerConfig{});
  options.port = 0;
  options.model_name = "served";
  server_ = std::make_unique<Server>(*engine_, *text_, options);
  thread_ = std::thread([this] { server_->run(); });
}

ServedModelFixture::~ServedModelFixture() {
  server_->stop();
  engine_->stop();
  thread_.join();
}

}  // namespace plumb::test
