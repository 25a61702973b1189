// Comparisons with the Hugging Face fixture files, shared by the fixture tests and the held-out check. Each reports
// every mismatch through gtest (up to a cap per file) and never stops at the first.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace plumb::tokenizer {

// encode.json: ids, decoded text and streamed text of each text.
void check_encode_fixture(const Tokenizer& tok, const std::string& path);
// decode.json: text of each id list, with and without special tokens, whole and streamed.
void check_decode_fixture(const Tokenizer& tok, const std::string& path);
// render.json: prompt of each conversation with the folder's chat template, and the prompt's ids.
void check_render_fixture(const std::string& dir, const std::string& fixture, size_t min_records);

}  // namespace plumb::tokenizer
