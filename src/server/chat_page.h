// The chat page served at `/`: one self-contained HTML document (inline CSS and JavaScript, no external assets) that
// streams answers from /v1/chat/completions with Markdown rendering, the reasoning apart and timings under each
// answer, and keeps conversations in the browser's localStorage. Its source is src/server/chat_page/, compiled in by
// embed_chat_page.cmake.
#pragma once

#include <string_view>

namespace plumb::server {

std::string_view chat_page_html();

}  // namespace plumb::server
