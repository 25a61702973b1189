// The chat page served at `/`: one self-contained HTML document (inline CSS and JavaScript, no external assets) that
// streams answers from /v1/chat/completions and shows the reasoning apart from the answer.
#pragma once

#include <string_view>

namespace plumb::server {

std::string_view chat_page_html();

}  // namespace plumb::server
