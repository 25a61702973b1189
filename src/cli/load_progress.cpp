#include "cli/load_progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "engine/generate.h"

namespace plumb::cli {
namespace {

using Clock = std::chrono::steady_clock;

// "812 B", "35.2 KiB", "26.3 MiB", "148.50 GiB".
std::string byte_text(double bytes) {
  if (bytes < 1024.0) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024.0 * 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  if (bytes < 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
  return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class ProgressDisplay {
 public:
  explicit ProgressDisplay(bool terminal) : terminal_(terminal) {}

  void update(const LoadProgress& p) {
    if (!terminal_) {
      if (p.shard_done)
        std::fputs(
            fmt::format("plumb: read shard {}/{} ({}), {} of {}\n", p.shard, p.shards,
                        std::filesystem::path(p.file).filename().string(), byte_text(static_cast<double>(p.bytes_done)),
                        byte_text(static_cast<double>(p.bytes_total)))
                .c_str(),
            stderr);
      return;
    }
    // Redrawing for every tensor of a model with thousands of them would cost more than the reads.
    const bool last = p.bytes_done == p.bytes_total;
    if (!last && Clock::now() - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = Clock::now();
    draw_bar(p);
    if (last) std::fputc('\n', stderr);
  }

 private:
  void draw_bar(const LoadProgress& p) const {
    constexpr int kWidth = 30;
    const double fraction = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0;
    const int filled = static_cast<int>(fraction * kWidth);
    const double elapsed = seconds_since(start_);
    const double rate = elapsed > 0.0 ? static_cast<double>(p.bytes_done) / elapsed : 0.0;
    // \r and "erase to the end of the line" redraw the bar in place.
    std::fputs(fmt::format("\rplumb: loading [{}{}] {} of {}, {}/s, shard {}/{}\x1b[K", std::string(filled, '#'),
                           std::string(kWidth - filled, '.'), byte_text(static_cast<double>(p.bytes_done)),
                           byte_text(static_cast<double>(p.bytes_total)), byte_text(rate), p.shard, p.shards)
                   .c_str(),
               stderr);
    std::fflush(stderr);
  }

  bool terminal_;
  Clock::time_point start_ = Clock::now(), last_draw_{};
};

}  // namespace

Qwen3NextModel open_model_showing_progress(const std::string& model_dir, Backend& backend, LoadOptions options,
                                           bool quiet) {
  const Clock::time_point start = Clock::now();
  ProgressDisplay display(::isatty(::fileno(stderr)) == 1);
  options.on_progress = {};
  if (!quiet) options.on_progress = [&display](const LoadProgress& p) { display.update(p); };
  Qwen3NextModel model = open_model(model_dir, backend, options);
  if (!quiet) std::fputs(fmt::format("plumb: load {:.1f} ms\n", seconds_since(start) * 1000.0).c_str(), stderr);
  return model;
}

}  // namespace plumb::cli
