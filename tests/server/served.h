// A live in-process server for the HTTP tests: models/default's tokenizer with the tiny test chat template, and a
// runner that draws the eos token at once, so a request that gets through is answered 200 at the cost of one step.
#pragma once

#include <memory>
#include <thread>

#include "engine/engine.h"
#include "server/server.h"

namespace plumb::test {

using server::ModelText;
using server::Server;
using server::ServerOptions;

class EosRunner final : public Runner {
 public:
  EosRunner(int64_t vocab, int32_t eos) : vocab_(vocab), eos_(eos) {}
  int64_t vocab_size() const override { return vocab_; }
  int64_t max_context() const override { return 4096; }
  RunnerOutput forward(const std::vector<RunnerEntry>& batch) override;
  void release(int32_t) override {}

 private:
  int64_t vocab_;
  int32_t eos_;
};

class ServedModelFixture {
 public:
  // Starts serving on an ephemeral port of 127.0.0.1 with `options` (port and model name are set here: "served").
  explicit ServedModelFixture(ServerOptions options = {});
  ~ServedModelFixture();
  uint16_t port() const { return server_->port(); }

 private:
  std::unique_ptr<ModelText> text_;
  std::unique_ptr<EosRunner> runner_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

}  // namespace plumb::test
