#include "server/access.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "server/openai_api.h"

namespace plumb::server {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// Whether a Host header names this server: a loopback name or the listening address, with no port or ours.
bool host_allowed(const AccessPolicy& policy, const std::string& host_header) {
  const std::string host = lower(trim(host_header));
  std::string name = host, port;
  const size_t close = host.rfind(']');
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos && (close == std::string::npos || colon > close)) {
    name = host.substr(0, colon);
    port = host.substr(colon + 1);
  }
  if (!port.empty() && port != std::to_string(policy.port)) return false;
  std::string listening = lower(policy.listen_host);
  if (listening.find(':') != std::string::npos) listening = "[" + listening + "]";  // an IPv6 address
  return name == "localhost" || name == "127.0.0.1" || name == "[::1]" || name == listening;
}

bool origin_allowed(const AccessPolicy& policy, const std::string& origin) {
  if (origin.empty()) return false;
  return std::any_of(policy.allowed_origins.begin(), policy.allowed_origins.end(),
                     [&](const std::string& allowed) { return allowed == "*" || lower(allowed) == lower(origin); });
}

// application/json, or a structured-syntax "+json" type such as application/merge-patch+json; parameters ignored.
bool json_media_type(const std::string& content_type) {
  const std::string type = lower(trim(content_type.substr(0, content_type.find(';'))));
  return type == "application/json" || (type.size() > 5 && type.compare(type.size() - 5, 5, "+json") == 0);
}

}  // namespace

std::vector<std::string> parse_allowed_origins(const std::string& list) {
  std::vector<std::string> origins;
  if (list.empty()) return origins;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string origin = trim(list.substr(begin, end - begin));
    PLUMB_CHECK(!origin.empty(), "--allowed-origins '{}': an empty origin", list);
    const size_t scheme = origin.find("://");
    PLUMB_CHECK(origin == "*" || (scheme != std::string::npos && origin.find('/', scheme + 3) == std::string::npos),
                "--allowed-origins: '{}' is not an origin (scheme://host[:port], no path, or *)", origin);
    origins.push_back(origin);
    begin = end + 1;
  }
  return origins;
}

std::optional<HttpResponse> answer_before_routing(const AccessPolicy& policy, const HttpRequest& request) {
  const std::string host = request.header("host");
  if (!policy.api_key_set && !host.empty() && !host_allowed(policy, host))
    return error_response(403,
                          "Host '" + host +
                              "' is not this server's address; without --api-key only loopback names and the "
                              "listening address are served (a guard against DNS rebinding)",
                          "host_not_allowed");
  const std::string origin = request.header("origin");
  if (request.method == "OPTIONS" && !request.header("access-control-request-method").empty()) {
    if (!origin_allowed(policy, origin))
      return error_response(403, "origin '" + origin + "' is not allowed (see --allowed-origins)",
                            "origin_not_allowed");
    HttpResponse r{204, "text/plain", "", {}};  // Access-Control-Allow-Origin comes with every answer (cors_headers)
    r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
  }
  const std::string content_type = request.header("content-type");
  if (request.method == "POST" && !content_type.empty() && !json_media_type(content_type) &&
      !origin_allowed(policy, origin))
    return error_response(415,
                          "Content-Type '" + content_type + "' is not accepted: send the JSON body as application/json",
                          "unsupported_media_type");
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> cors_headers(const AccessPolicy& policy, const HttpRequest& request) {
  const std::string origin = request.header("origin");
  if (!origin_allowed(policy, origin)) return {};
  return {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
}

}  // namespace plumb::server
