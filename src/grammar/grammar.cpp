#include "grammar/grammar.h"

#include "core/error.h"

namespace plumb::grammar {

ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet set;
  for (int b = lo; b <= hi; ++b) set.set(static_cast<size_t>(b));
  return set;
}

ByteSet one_byte(uint8_t b) {
  return byte_range(b, b);
}

Item bytes_item(ByteSet bytes) {
  return Item{bytes, -1};
}

Item rule_item(int32_t rule) {
  return Item{{}, rule};
}

void append_literal(Sequence& sequence, std::string_view literal) {
  for (char c : literal) sequence.push_back(bytes_item(one_byte(static_cast<uint8_t>(c))));
}

int32_t GrammarBuilder::add_rule(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::add_alternative(int32_t rule, Sequence sequence) {
  rules_.at(static_cast<size_t>(rule)).push_back(std::move(sequence));
}

int32_t GrammarBuilder::rule(std::string name, std::vector<Sequence> alternatives) {
  const int32_t id = add_rule(std::move(name));
  for (Sequence& s : alternatives) add_alternative(id, std::move(s));
  return id;
}

Grammar GrammarBuilder::build(int32_t root) const {
  const size_t n = rules_.size();
  PLUMB_CHECK(root >= 0 && static_cast<size_t>(root) < n, "grammar root {} is not a rule", root);
  for (size_t r = 0; r < n; ++r) PLUMB_CHECK(!rules_[r].empty(), "grammar rule '{}' has no alternative", names_[r]);

  // Nullable rules (those that can match nothing), to a fixed point.
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : rules_[r]) {
        bool all = true;
        for (const Item& item : s) all = all && item.rule >= 0 && nullable[static_cast<size_t>(item.rule)];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // The rules each rule can start with before consuming a byte; a cycle among them is left recursion.
  std::vector<std::vector<int32_t>> leading(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      for (const Item& item : s) {
        if (item.rule < 0) break;
        leading[r].push_back(item.rule);
        if (!nullable[static_cast<size_t>(item.rule)]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 unvisited, 1 on the path, 2 done
  std::vector<std::pair<size_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    path.push_back({start, 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == leading[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const auto s = static_cast<size_t>(leading[r][next++]);
      PLUMB_CHECK(color[s] != 1, "the grammar is left-recursive: '{}' can reach itself without consuming a byte",
                  names_[s]);
      if (color[s] == 0) {
        color[s] = 1;
        path.push_back({s, 0});
      }
    }
  }

  Grammar g;
  g.root_ = root;
  g.alternatives_.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      g.alternatives_[r].push_back(static_cast<int32_t>(g.elements_.size()));
      for (const Item& item : s) {
        Element e;
        e.kind = item.rule >= 0 ? Element::Kind::kRule : Element::Kind::kBytes;
        e.rule = item.rule;
        e.bytes = item.bytes;
        g.elements_.push_back(e);
      }
      g.elements_.push_back(Element{});
    }
  }
  return g;
}

}  // namespace plumb::grammar
