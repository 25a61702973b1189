#include "http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace plumb::test {

HttpReply send_raw(uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string raw;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) raw.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  HttpReply reply;
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return reply;
  reply.status = std::stoi(raw.substr(9, 3));
  reply.head = raw.substr(0, head_end);
  std::string rest = raw.substr(head_end + 4);
  if (reply.head.find("Transfer-Encoding: chunked") == std::string::npos) {
    reply.body = rest;
    return reply;
  }
  for (size_t at = 0;;) {
    const size_t line_end = rest.find("\r\n", at);
    const size_t size = std::stoul(rest.substr(at, line_end - at), nullptr, 16);
    if (size == 0) break;
    reply.body += rest.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
  return reply;
}

HttpReply post(uint16_t port, const std::string& path, const std::string& body, const std::string& headers,
               const std::string& content_type) {
  return send_raw(port, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + headers +
                            "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\n\r\n" + body);
}

}  // namespace plumb::test
