// An incremental HTTP/1.1 request parser (RFC 9112), fed bytes as they arrive from a non-blocking socket. Strict
// where the framing could be misread: a malformed request line or header line, a duplicate or conflicting
// Content-Length, Content-Length beside Transfer-Encoding, or a duplicate Host are refused 400; bodies come framed by
// Content-Length or chunked. Lenient where RFC 9112 allows: a bare LF ends a line as CRLF does, and empty lines before
// a request line are skipped. Pure: no sockets, so it is fuzzed on its own (fuzz/http_fuzz.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "server/http.h"

namespace plumb::server {

class RequestParser {
 public:
  enum class State { kNeedMore, kComplete, kError };

  RequestParser(size_t max_header_bytes, size_t max_body_bytes)
      : max_header_bytes_(max_header_bytes), max_body_bytes_(max_body_bytes) {}

  // Appends `bytes` and parses as far as they go; feed({}) parses bytes left over from a previous request.
  State feed(std::string_view bytes);
  State state() const { return state_; }
  // Whether any byte of the next request has arrived (its deadline runs from then).
  bool started() const { return !buffer_.empty() || phase_ != Phase::kHead; }
  // The header is complete, the body is not, and the client asked to be told to send it (Expect: 100-continue).
  bool awaits_continue() const { return phase_ != Phase::kHead && state_ == State::kNeedMore && expects_continue_; }

  // kComplete: the request, after which the parser starts on the bytes that followed it.
  HttpRequest take();
  // kError: the status to answer (400, 413, 431, 501, 505) and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class Phase { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailer };

  State fail(int status, std::string message);
  // The next line from `at_` (without its CR LF or LF), or false when it has not all arrived or is too long (kError).
  bool next_line(std::string_view& line);
  State parse_head(std::string_view head);
  State parse_field(std::string_view line);
  State start_body();
  State parse_body();

  size_t max_header_bytes_, max_body_bytes_;
  std::string buffer_;  // unconsumed bytes, from the start of the current request's unparsed part
  size_t at_ = 0;       // parsed up to here in buffer_
  size_t head_scan_ = 0;
  Phase phase_ = Phase::kHead;
  State state_ = State::kNeedMore;
  HttpRequest request_;
  size_t content_lengths_ = 0, hosts_ = 0;
  bool expects_continue_ = false;
  size_t remaining_ = 0;      // body bytes still to come (Content-Length) or of the current chunk
  size_t trailer_bytes_ = 0;  // of the chunked trailer section, held to max_header_bytes
  int error_status_ = 0;
  std::string error_message_;
};

}  // namespace plumb::server
