#include "server/text_stream.h"

#include <algorithm>

namespace plumb::server {

size_t partial_tag_suffix(std::string_view text, const std::vector<std::string>& tags) {
  size_t longest = 0;
  for (const std::string& tag : tags) {
    for (size_t n = std::min(text.size(), tag.size() - 1); n > longest; --n) {
      if (text.substr(text.size() - n) == std::string_view(tag).substr(0, n)) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  const size_t keep = partial_tag_suffix(held_, stops_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace plumb::server
