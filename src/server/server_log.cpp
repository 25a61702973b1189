#include "server/server_log.h"

#include <fmt/format.h>

#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace plumb::server {

namespace {

using Clock = std::chrono::steady_clock;

// Now as RFC 3339 in UTC with milliseconds, e.g. 2025-01-31T12:00:00.123Z.
std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03}Z", text, ms);
}

bool needs_quotes(const std::string& value) {
  if (value.empty()) return true;
  for (unsigned char c : value)
    if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f) return true;
  return false;
}

std::string logfmt_value(const std::string& value) {
  if (!needs_quotes(value)) return value;
  std::string out = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < ' ' || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

LogField text(std::string key, std::string value) {
  return {std::move(key), std::move(value), false};
}

template <typename T>
LogField number(std::string key, T value) {
  return {std::move(key), fmt::format("{}", value), true};
}

LogField decimal(std::string key, double value) {
  return {std::move(key), fmt::format("{:.2f}", value), true};
}

}  // namespace

LogFormat parse_log_format(const std::string& name) {
  if (name == "text" || name == "logfmt") return LogFormat::kLogfmt;
  if (name == "json") return LogFormat::kJson;
  if (name == "none") return LogFormat::kNone;
  PLUMB_FAIL("--log-format {}: expected text (key=value), json or none", name);
}

std::string format_log_line(LogFormat format, const std::vector<LogField>& fields) {
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json line = nlohmann::ordered_json::object();
    for (const LogField& f : fields)
      line[f.key] = f.is_number ? nlohmann::ordered_json::parse(f.value) : nlohmann::ordered_json(f.value);
    return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  }
  std::string out;
  for (const LogField& f : fields) out += (out.empty() ? "" : " ") + f.key + "=" + logfmt_value(f.value);
  return out + "\n";
}

ServerLog::ServerLog(LogFormat format, std::chrono::milliseconds interval, const Metrics& metrics, const Engine& engine,
                     std::FILE* out)
    : format_(format), interval_(interval), metrics_(metrics), engine_(engine), out_(out) {
  if (format_ != LogFormat::kNone && interval_.count() > 0) thread_ = std::thread([this] { throughput_loop(); });
}

ServerLog::~ServerLog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServerLog::write(std::vector<LogField> fields) {
  if (format_ == LogFormat::kNone) return;
  fields.insert(fields.begin(), {text("time", timestamp()), text("level", "info")});
  const std::string line = format_log_line(format_, fields);
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

void ServerLog::request(const std::string& method, const std::string& path, int status, double latency_seconds,
                        const std::optional<GenerationRecord>& generation) {
  std::vector<LogField> fields = {text("event", "request"), text("method", method), text("path", path),
                                  number("status", status), decimal("latency_ms", latency_seconds * 1000.0)};
  if (generation) {
    fields.push_back(number("prompt_tokens", generation->prompt_tokens));
    fields.push_back(number("completion_tokens", generation->completion_tokens));
    fields.push_back(number("seed", generation->seed));
  }
  write(std::move(fields));
}

void ServerLog::throughput_loop() {
  auto [prompt_before, generated_before] = metrics_.token_totals();
  Clock::time_point before = Clock::now();
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    const auto [prompt, generated] = metrics_.token_totals();
    const EngineStats stats = engine_.stats();
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - before).count();
    // Busy: tokens flowed since the last line, or requests run or wait. An idle server stays quiet.
    if (prompt != prompt_before || generated != generated_before || stats.running > 0 || stats.waiting > 0)
      write({text("event", "throughput"),
             decimal("prompt_tokens_per_s", static_cast<double>(prompt - prompt_before) / seconds),
             decimal("generation_tokens_per_s", static_cast<double>(generated - generated_before) / seconds),
             number("running", stats.running), number("waiting", stats.waiting),
             number("kv_pages_used", stats.kv_pages_used), number("kv_pages_total", stats.kv_pages_total)});
    prompt_before = prompt;
    generated_before = generated;
    before = now;
    lock.lock();
  }
}

}  // namespace plumb::server
