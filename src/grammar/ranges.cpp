#include "grammar/ranges.h"

#include <string>

#include "core/error.h"

namespace plumb::grammar {

namespace {

Item digit_item(char lo, char hi) {
  return bytes_item(byte_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

// The texts of lo..hi, two digit strings of one length (leading zeros written).
Sequence same_length(GrammarBuilder& builder, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return {};
  if (lo[0] == hi[0]) {
    Sequence s{digit_item(lo[0], lo[0])};
    const Sequence rest = same_length(builder, lo.substr(1), hi.substr(1));
    s.insert(s.end(), rest.begin(), rest.end());
    return s;
  }
  const std::string zeros(lo.size() - 1, '0'), nines(lo.size() - 1, '9');
  auto any_tail = [&](char first, char last) {
    Sequence s{digit_item(first, last)};
    for (size_t i = 1; i < lo.size(); ++i) s.push_back(digit_item('0', '9'));
    return s;
  };
  if (lo.substr(1) == zeros && hi.substr(1) == nines) return any_tail(lo[0], hi[0]);
  std::vector<Sequence> alternatives;
  auto with_first = [&](char first, const std::string& a, const std::string& b) {
    Sequence s{digit_item(first, first)};
    const Sequence rest = same_length(builder, a, b);
    s.insert(s.end(), rest.begin(), rest.end());
    alternatives.push_back(std::move(s));
  };
  with_first(lo[0], lo.substr(1), nines);
  if (lo[0] + 1 <= hi[0] - 1)
    alternatives.push_back(any_tail(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)));
  with_first(hi[0], zeros, hi.substr(1));
  return {rule_item(builder.rule("integer range", std::move(alternatives)))};
}

// The texts of the non-negative integers lo..hi.
std::vector<Sequence> non_negative(GrammarBuilder& builder, int64_t lo, int64_t hi) {
  std::vector<Sequence> out;
  const std::string top = std::to_string(hi);
  int64_t power = 1;  // 10^(length - 1)
  for (size_t length = 1; length <= top.size(); ++length, power *= 10) {
    const int64_t from = std::max(lo, length == 1 ? 0 : power);
    const int64_t to = length == top.size() ? hi : power * 10 - 1;
    if (from > to) continue;
    out.push_back(same_length(builder, std::to_string(from), std::to_string(to)));
  }
  return out;
}

}  // namespace

int32_t integer_range_rule(GrammarBuilder& builder, int64_t lo, int64_t hi) {
  PLUMB_CHECK(lo <= hi, "integer range {}..{} is empty", lo, hi);
  std::vector<Sequence> alternatives;
  if (hi >= 0) alternatives = non_negative(builder, std::max<int64_t>(lo, 0), hi);
  if (lo < 0) {
    for (Sequence s : non_negative(builder, hi < 0 ? -hi : 1, -lo)) {
      s.insert(s.begin(), bytes_item(one_byte('-')));
      alternatives.push_back(std::move(s));
    }
  }
  return builder.rule("integer range", std::move(alternatives));
}

}  // namespace plumb::grammar
