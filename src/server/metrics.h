// Counters and latency histograms of the server, rendered in Prometheus' text exposition format together with the
// engine's gauges (queue depth, batch size, state-slot and KV-page use). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace plumb::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // The series of one histogram named `name` (buckets, sum and count).
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds + 1]; the last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void count_tokens(int64_t prompt, int64_t generated);
  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  // Prompt tokens of admitted requests and tokens generated, so far.
  std::pair<uint64_t, uint64_t> token_totals() const;
  std::string render(const EngineStats& engine) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (endpoint, status) -> count
  uint64_t prompt_tokens_ = 0;
  uint64_t generated_tokens_ = 0;
  Histogram ttft_;
  Histogram itl_;
};

}  // namespace plumb::server
