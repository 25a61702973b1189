// A blocking HTTP/1.1 client over loopback for the in-process server tests.
#pragma once

#include <cstdint>
#include <string>

namespace plumb::test {

struct HttpReply {
  int status = 0;
  std::string head;  // the status line and headers, as sent
  std::string body;  // chunked transfer decoded
};

// A connected socket to 127.0.0.1:port whose reads give up after 10 s, so no test hangs on a silent server; bound
// first to the loopback address `source` (e.g. "127.0.0.2", another client) when given.
int connect_loopback(uint16_t port, const char* source = nullptr);
// Everything the server sends on `fd` until it closes the connection (or 10 s pass).
std::string read_until_close(int fd);
// The first answer in `raw` (an HttpReply with status 0 when there is none); `rest` gets the bytes after it.
HttpReply parse_reply(const std::string& raw, std::string* rest = nullptr);

// Sends `request` (raw bytes: request line, headers, body) to 127.0.0.1:port and reads until the server closes.
HttpReply send_raw(uint16_t port, const std::string& request);

// POSTs a JSON body with "Host: 127.0.0.1" and "Connection: close"; `headers` are extra header lines ("Name: v\r\n").
HttpReply post(uint16_t port, const std::string& path, const std::string& body, const std::string& headers = "",
               const std::string& content_type = "application/json");

}  // namespace plumb::test
