#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace plumb::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[static_cast<size_t>(bucket)];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
  return out;
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::count_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(prompt);
  generated_tokens_ += static_cast<uint64_t>(generated);
}

void Metrics::observe_time_to_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_inter_token_latency(double seconds) {
  std::lock_guard lock(mutex_);
  itl_.observe(seconds);
}

std::pair<uint64_t, uint64_t> Metrics::token_totals() const {
  std::lock_guard lock(mutex_);
  return {prompt_tokens_, generated_tokens_};
}

std::string Metrics::render(const EngineStats& engine) const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  header("plumb_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
  for (const auto& [key, count] : requests_)
    out += fmt::format("plumb_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, count);
  // A metric with one unlabelled sample.
  auto single = [&](const char* name, const char* type, const char* help, auto value) {
    header(name, type, help);
    out += fmt::format("{} {}\n", name, value);
  };
  single("plumb_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", prompt_tokens_);
  single("plumb_generation_tokens_total", "counter", "Tokens generated.", generated_tokens_);
  header("plumb_time_to_first_token_seconds", "histogram", "From request received to first token generated.");
  out += ttft_.render("plumb_time_to_first_token_seconds");
  header("plumb_inter_token_latency_seconds", "histogram", "Between consecutive tokens of one request.");
  out += itl_.render("plumb_inter_token_latency_seconds");
  single("plumb_queue_depth", "gauge", "Requests waiting for admission.", engine.waiting);
  single("plumb_running_batch_size", "gauge", "Sequences in the running batch.", engine.running);
  single("plumb_state_slots_used", "gauge", "Recurrent-state slots in use.", engine.state_slots_used);
  single("plumb_state_slots_total", "gauge", "Recurrent-state slots.", engine.state_slots_total);
  single("plumb_kv_pages_used", "gauge", "KV-cache pages reserved.", engine.kv_pages_used);
  single("plumb_kv_pages_total", "gauge", "KV-cache pages.", engine.kv_pages_total);
  single("plumb_engine_steps_total", "counter", "Engine steps run.", engine.steps);
  single("plumb_prefix_cache_hits_total", "counter", "Admitted requests that started from a kept prompt prefix.",
         engine.prefix_hits);
  single("plumb_prefix_cache_tokens_total", "counter",
         "Prompt tokens of admitted requests that the prefix cache served (not run).", engine.prefix_cached_tokens);
  single("plumb_prefix_cache_answers_pending", "gauge",
         "Finished answers waiting to be run again as prompts while idle, or running (counted in the batch).",
         engine.answers_pending);
  single("plumb_prefix_cache_answer_tokens_total", "counter",
         "Answer tokens run again as prompts while idle, so that the prefix cache keeps their states.",
         engine.answer_tokens);
  single("plumb_speculative_verify_steps_total", "counter",
         "Decode steps that verified draft tokens (speculative decoding).", engine.speculation.steps);
  single("plumb_speculative_draft_tokens_total", "counter", "Draft tokens proposed and verified.",
         engine.speculation.drafted);
  single("plumb_speculative_accepted_tokens_total", "counter",
         "Draft tokens kept: each equal to the token drawn at its position.", engine.speculation.accepted);
  return out;
}

}  // namespace plumb::server
