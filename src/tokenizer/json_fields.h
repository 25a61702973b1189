// Typed access to tokenizer.json / tokenizer_config.json fields. Every failure names the file and the field path
// ("tokenizer.json: model.merges[12]: expected a string or a pair of strings"), because a malformed file is a user
// error that must be diagnosable from the message alone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"

namespace plumb::tokenizer {

// Field paths are built as "parent.child" and "parent[3]".
inline std::string field_path(std::string_view parent, std::string_view child) {
  return parent.empty() ? std::string(child) : fmt::format("{}.{}", parent, child);
}
inline std::string field_path(std::string_view parent, size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

// The member `key` of object `j` (located at `path` in `file`), which must exist.
inline const nlohmann::json& json_member(const nlohmann::json& j, std::string_view key, std::string_view file,
                                         std::string_view path) {
  PLUMB_CHECK(j.is_object(), "{}: {} must be an object", file, path.empty() ? "the top level" : path);
  auto it = j.find(std::string(key));
  PLUMB_CHECK(it != j.end(), "{}: {} is missing", file, field_path(path, key));
  return *it;
}

inline bool json_bool(const nlohmann::json& j, std::string_view key, bool fallback, std::string_view file,
                      std::string_view path) {
  auto it = j.find(std::string(key));
  if (it == j.end() || it->is_null()) return fallback;
  PLUMB_CHECK(it->is_boolean(), "{}: {} must be true or false", file, field_path(path, key));
  return it->get<bool>();
}

inline std::string json_string(const nlohmann::json& j, std::string_view key, std::string_view file,
                               std::string_view path) {
  const nlohmann::json& v = json_member(j, key, file, path);
  PLUMB_CHECK(v.is_string(), "{}: {} must be a string", file, field_path(path, key));
  return v.get<std::string>();
}

// The "type" member of a component object, e.g. normalizer.type.
inline std::string json_type(const nlohmann::json& j, std::string_view file, std::string_view path) {
  return json_string(j, "type", file, path);
}

}  // namespace plumb::tokenizer
