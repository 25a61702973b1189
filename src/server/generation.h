// One /v1/completions or /v1/chat/completions request, end to end: prompt tokens in, engine events through the
// streaming detokenizer, stop strings and the reasoning/tool-call parser, out as one OpenAI response or as server-sent
// event chunks. A client that goes away has its request cancelled in the engine at once.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/prompt.h"
#include "server/server_log.h"
#include "server/structured.h"

namespace plumb::server {

struct ServedModel {
  Engine& engine;
  const ModelText& text;
  Metrics& metrics;
  StructuredOutputs& structured;
  std::string name;  // the id clients pass as "model"
};

// Status recorded for a request whose client disconnected before the answer was complete (nginx's convention).
constexpr int kClientClosedRequest = 499;

// Answers a parsed request whose prompt is `prompt` on `exchange`; returns the status it answered with and fills
// `record` (tokens and the seed used: the request's, or a fresh one that every response object carries as "seed").
int serve_generation(const ApiRequest& request, const std::vector<int32_t>& prompt, bool prompt_opens_reasoning,
                     ServedModel& model, HttpExchange& exchange, std::chrono::steady_clock::time_point received,
                     GenerationRecord& record);

}  // namespace plumb::server
