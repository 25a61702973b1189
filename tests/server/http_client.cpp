#include "http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace plumb::test {

int connect_loopback(uint16_t port, const char* source) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (source != nullptr) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    EXPECT_EQ(::inet_pton(AF_INET, source, &from.sin_addr), 1) << source;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0) << source;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

std::string read_until_close(int fd) {
  std::string raw;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) raw.append(buffer, static_cast<size_t>(n));
  return raw;
}

HttpReply parse_reply(const std::string& raw, std::string* rest) {
  HttpReply reply;
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.size() < 12) return reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.head = raw.substr(0, head_end);
  size_t at = head_end + 4;
  if (reply.head.find("Transfer-Encoding: chunked") != std::string::npos) {
    for (;;) {
      const size_t line_end = raw.find("\r\n", at);
      const size_t size = std::stoul(raw.substr(at, line_end - at), nullptr, 16);
      at = line_end + 2;
      if (size == 0) break;
      reply.body += raw.substr(at, size);
      at += size + 2;
    }
    at += 2;
  } else {
    const size_t length_at = reply.head.find("Content-Length: ");
    const size_t length =
        length_at == std::string::npos ? raw.size() - at : std::stoul(reply.head.substr(length_at + 16));
    reply.body = raw.substr(at, length);
    at += reply.body.size();
  }
  if (rest) *rest = raw.substr(std::min(at, raw.size()));
  return reply;
}

HttpReply send_raw(uint16_t port, const std::string& request) {
  const int fd = connect_loopback(port);
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  const std::string raw = read_until_close(fd);
  ::close(fd);
  return parse_reply(raw);
}

HttpReply post(uint16_t port, const std::string& path, const std::string& body, const std::string& headers,
               const std::string& content_type) {
  return send_raw(port, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers +
                            "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\n\r\n" + body);
}

}  // namespace plumb::test
