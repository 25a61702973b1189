// libFuzzer target over the HTTP request parser (src/server/http_parser.h), the part of plumb serve a stranger's
// bytes reach first. The input is a byte stream from one connection; it is parsed twice, fed whole and fed in pieces
// whose sizes come from a generator seeded by the first byte, and the two must give the same requests and the same
// refusal: a parse that depended on where the reads split would read one client's bytes differently under load.
// Crashes, hangs, sanitizer reports and a mismatch (abort) are failures. Built by scripts/fuzz.sh with
// clang++ -fsanitize=fuzzer,address,undefined.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_parser.h"

namespace {

using plumb::server::HttpRequest;
using plumb::server::RequestParser;

// Small limits, so the fuzzer reaches them.
constexpr size_t kMaxHeader = 512, kMaxBody = 2048;

// What parsing a stream (whole, or in pieces of 1 to 64 bytes drawn from `seed`) gives: each request, flattened, then
// the refusal or "more" when the stream ran out.
std::vector<std::string> parse(std::string_view stream, bool whole, uint32_t seed) {
  RequestParser parser(kMaxHeader, kMaxBody);
  std::vector<std::string> outcomes;
  auto drain = [&](RequestParser::State state) {
    while (state == RequestParser::State::kComplete) {
      const HttpRequest r = parser.take();
      std::string flat = r.method + ' ' + r.path + '?' + r.query + ' ' + r.version + '\n';
      for (const auto& [name, value] : r.headers) flat += name + ": " + value + '\n';
      outcomes.push_back(flat + '\n' + r.body);
      state = parser.feed({});
    }
    return state;
  };
  RequestParser::State state = RequestParser::State::kNeedMore;
  for (size_t at = 0; at < stream.size() && state == RequestParser::State::kNeedMore;) {
    seed = seed * 1103515245u + 12345u;
    const size_t piece = whole ? stream.size() : 1 + (seed >> 16) % 64;
    state = drain(parser.feed(stream.substr(at, piece)));
    at += piece;
  }
  outcomes.push_back(state == RequestParser::State::kError
                         ? std::to_string(parser.error_status()) + ' ' + parser.error_message()
                         : "more");
  return outcomes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (parse(stream, true, 0) != parse(stream, false, data[0])) {
    std::fprintf(stderr, "http_fuzz: the parse depends on how the bytes were split\n");
    std::abort();
  }
  return 0;
}
