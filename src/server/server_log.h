// plumb serve's log on stderr: one access line per request (method, path, status, tokens, latency, seed) and, every
// few seconds while the engine is busy, a throughput line (prompt and generation tokens/s, running and waiting
// requests, KV pages), as vLLM prints. Lines are logfmt (key=value, as Loki, Vector and lnav parse) or JSON lines.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"

namespace plumb::server {

enum class LogFormat { kNone, kLogfmt, kJson };

// "text"/"logfmt", "json" or "none"; throws plumb::Error on anything else.
LogFormat parse_log_format(const std::string& name);

// What a generation request adds to its access line.
struct GenerationRecord {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t seed = 0;  // as the request's "seed" field takes it back
};

// One log line's fields in order; a value is a string or a number already formatted (written unquoted).
struct LogField {
  std::string key, value;
  bool is_number = false;
};
// The line (with its newline) in `format`: logfmt quotes a value holding a space, '=', '"', '\' or a control
// character, escaping as Go's strconv.Quote does; JSON replaces invalid UTF-8 with U+FFFD.
std::string format_log_line(LogFormat format, const std::vector<LogField>& fields);

class ServerLog {
 public:
  // Starts the throughput thread, which samples `metrics` and `engine` every `interval` (not started for kNone or
  // a zero interval). Lines go to `out` whole, one write each, so threads never interleave within a line.
  ServerLog(LogFormat format, std::chrono::milliseconds interval, const Metrics& metrics, const Engine& engine,
            std::FILE* out = stderr);
  ~ServerLog();
  ServerLog(const ServerLog&) = delete;
  ServerLog& operator=(const ServerLog&) = delete;

  void request(const std::string& method, const std::string& path, int status, double latency_seconds,
               const std::optional<GenerationRecord>& generation);

 private:
  void write(std::vector<LogField> fields);
  void throughput_loop();

  LogFormat format_;
  std::chrono::milliseconds interval_;
  const Metrics& metrics_;
  const Engine& engine_;
  std::FILE* out_;
  std::mutex mutex_;  // guards stopping_ and writes to out_
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace plumb::server
