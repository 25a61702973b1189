// Stop strings over streamed text: text is released as soon as it cannot be the start of a stop string, and nothing
// from the first stop string on is ever released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace plumb::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // The text now safe to release. Once a stop string has appeared, returns the text before it and then nothing.
  std::string push(std::string_view text);
  // The text held back at the end of the stream (none after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings
  std::string held_;                // may be the start of a stop string
  bool stopped_ = false;
};

// The length of the longest suffix of `text` that is a proper prefix of one of `tags` (text that must be held back
// because the next piece may complete a tag).
size_t partial_tag_suffix(std::string_view text, const std::vector<std::string>& tags);

}  // namespace plumb::server
