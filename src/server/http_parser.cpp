#include "server/http_parser.h"

#include <algorithm>
#include <cctype>

namespace plumb::server {

namespace {

// RFC 9110's tchar: the characters of a method or a field name.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Splits off the text up to the first `separator` (all of it when there is none).
std::string_view split(std::string_view& s, char separator) {
  const size_t at = s.find(separator);
  const std::string_view head = s.substr(0, at);
  s.remove_prefix(at == std::string_view::npos ? s.size() : at + 1);
  return head;
}

// The line without its ending: a CR before the LF belongs to the ending, so a bare LF ends a line too.
std::string_view without_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

constexpr size_t kMaxDecimalDigits = 18;  // below 2^63, so the sum cannot overflow
constexpr size_t kMaxHexDigits = 15;

}  // namespace

std::string HttpRequest::header(const std::string& lower_name) const {
  const auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

RequestParser::State RequestParser::fail(int status, std::string message) {
  error_status_ = status;
  error_message_ = std::move(message);
  return state_ = State::kError;
}

bool RequestParser::next_line(std::string_view& line) {
  const size_t end = buffer_.find('\n', at_);
  // A line of the body's framing may not grow past the header limit, whether or not its end has come yet (so the
  // outcome does not depend on how the bytes were split).
  if ((end == std::string::npos ? buffer_.size() : end) - at_ > max_header_bytes_) {
    fail(400, "a line of the chunked request body is too long");
    return false;
  }
  if (end == std::string::npos) return false;
  line = without_cr(std::string_view(buffer_).substr(at_, end - at_));
  at_ = end + 1;
  return true;
}

RequestParser::State RequestParser::feed(std::string_view bytes) {
  buffer_.append(bytes);
  if (state_ != State::kNeedMore) return state_;
  if (phase_ == Phase::kHead) {
    // RFC 9112 2.2: empty lines before a request line are ignored (some clients send CRLF after a body).
    size_t skip = 0;
    while (skip < buffer_.size() && (buffer_[skip] == '\r' || buffer_[skip] == '\n')) ++skip;
    if (skip > 0) {
      buffer_.erase(0, skip);
      head_scan_ = 0;
    }
    // The header section ends at the first empty line, after a CR LF or a bare LF.
    for (size_t lf; (lf = buffer_.find('\n', head_scan_)) != std::string::npos; head_scan_ = lf + 1) {
      size_t next = lf + 1;
      if (next < buffer_.size() && buffer_[next] == '\r') ++next;
      if (next >= buffer_.size()) break;  // the next line has not begun: look again from this LF
      if (buffer_[next] != '\n') continue;
      if (next + 1 > max_header_bytes_) return fail(431, "the request headers are too large");
      at_ = next + 1;
      if (parse_head(std::string_view(buffer_).substr(0, lf)) == State::kError) return state_;
      if (start_body() == State::kError) return state_;
      break;
    }
    if (phase_ == Phase::kHead) {
      if (buffer_.size() > max_header_bytes_) return fail(431, "the request headers are too large");
      return state_;
    }
  }
  return parse_body();
}

RequestParser::State RequestParser::parse_head(std::string_view head) {
  std::string_view request_line = without_cr(split(head, '\n'));
  const std::string_view method = split(request_line, ' ');
  const std::string_view target = split(request_line, ' ');
  const std::string_view version = request_line;
  bool target_ok = !target.empty();
  for (const char c : target) target_ok = target_ok && static_cast<unsigned char>(c) > ' ' && c != '\x7f';
  const bool version_ok = version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[5] >= '0' &&
                          version[5] <= '9' && version[6] == '.' && version[7] >= '0' && version[7] <= '9';
  if (!is_token(method) || !target_ok || !version_ok)
    return fail(400, "malformed HTTP request line (it must be METHOD TARGET HTTP/1.1)");
  if (version[5] != '1') return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
  request_.method = method;
  request_.version = version;
  std::string_view target_rest = target;
  request_.path = split(target_rest, '?');
  request_.query = target_rest;
  while (!head.empty())
    if (parse_field(without_cr(split(head, '\n'))) == State::kError) return state_;
  return state_;
}

RequestParser::State RequestParser::parse_field(std::string_view line) {
  const size_t colon = line.find(':');
  // No colon, whitespace before it (RFC 9112 5.1), or a continuation line (obsolete folding, 5.2): all 400.
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
    return fail(400, "malformed header line (it must be Name: value)");
  const std::string name = lower(line.substr(0, colon));
  const std::string_view value = trim(line.substr(colon + 1));
  for (const char c : value)
    if ((static_cast<unsigned char>(c) < ' ' && c != '\t') || c == '\x7f')
      return fail(400, "a header value holds a control character");
  if (name == "content-length" && ++content_lengths_ > 1)
    return fail(400, "more than one Content-Length header (the framing would be ambiguous)");
  if (name == "host" && ++hosts_ > 1) return fail(400, "more than one Host header");
  // Repeated fields combine into one list (RFC 9110 5.3).
  const auto [it, inserted] = request_.headers.emplace(name, value);
  if (!inserted) it->second += ", " + std::string(value);
  return state_;
}

RequestParser::State RequestParser::start_body() {
  const std::string coding = lower(request_.header("transfer-encoding"));
  const std::string length_text = request_.header("content-length");
  expects_continue_ = lower(request_.header("expect")) == "100-continue";
  if (!coding.empty()) {
    if (content_lengths_ > 0) return fail(400, "a request cannot have both Transfer-Encoding and Content-Length");
    if (coding != "chunked") return fail(501, "Transfer-Encoding '" + coding + "' is not supported (only chunked)");
    phase_ = Phase::kChunkSize;
    return state_;
  }
  phase_ = Phase::kBody;
  if (content_lengths_ == 0) return state_;
  bool digits = !length_text.empty() && length_text.size() <= kMaxDecimalDigits;
  for (const char c : length_text) digits = digits && c >= '0' && c <= '9';
  if (!digits) return fail(400, "malformed Content-Length (it must be one decimal number)");
  remaining_ = static_cast<size_t>(std::stoull(length_text));
  if (remaining_ > max_body_bytes_)
    return fail(413, "the request body is larger than " + std::to_string(max_body_bytes_) + " bytes");
  return state_;
}

RequestParser::State RequestParser::parse_body() {
  for (;;) {
    std::string_view line;
    switch (phase_) {
      case Phase::kHead:
        return state_;
      case Phase::kBody:
        if (buffer_.size() - at_ < remaining_) return state_;
        request_.body.assign(buffer_, at_, remaining_);
        at_ += remaining_;
        return state_ = State::kComplete;
      case Phase::kChunkSize: {
        if (!next_line(line)) break;
        const std::string_view size = trim(split(line, ';'));  // chunk extensions are ignored
        bool hex = !size.empty() && size.size() <= kMaxHexDigits;
        for (const char c : size) hex = hex && std::isxdigit(static_cast<unsigned char>(c));
        if (!hex) return fail(400, "malformed chunk size in a chunked request body");
        remaining_ = static_cast<size_t>(std::stoull(std::string(size), nullptr, 16));
        if (remaining_ > max_body_bytes_ - request_.body.size())
          return fail(413, "the request body is larger than " + std::to_string(max_body_bytes_) + " bytes");
        phase_ = remaining_ == 0 ? Phase::kTrailer : Phase::kChunkData;
        continue;
      }
      case Phase::kChunkData: {
        const size_t take = std::min(remaining_, buffer_.size() - at_);
        request_.body.append(buffer_, at_, take);
        at_ += take;
        remaining_ -= take;
        if (remaining_ > 0) return state_;
        phase_ = Phase::kChunkDataEnd;
        continue;
      }
      case Phase::kChunkDataEnd:
        if (!next_line(line)) break;
        if (!line.empty()) return fail(400, "a chunk of a chunked request body is longer than its size");
        phase_ = Phase::kChunkSize;
        continue;
      case Phase::kTrailer:  // trailer fields are read and ignored
        if (!next_line(line)) break;
        trailer_bytes_ += line.size() + 2;
        if (trailer_bytes_ > max_header_bytes_) return fail(431, "the request trailers are too large");
        if (line.empty()) return state_ = State::kComplete;
        continue;
    }
    return state_;  // a line has not all arrived, or was too long
  }
}

HttpRequest RequestParser::take() {
  HttpRequest request = std::move(request_);
  buffer_.erase(0, at_);
  at_ = head_scan_ = 0;
  phase_ = Phase::kHead;
  state_ = State::kNeedMore;
  request_ = HttpRequest{};
  content_lengths_ = hosts_ = remaining_ = trailer_bytes_ = 0;
  expects_continue_ = false;
  return request;
}

}  // namespace plumb::server
