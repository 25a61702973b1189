// What keeps a web page from using a server on the user's own machine, and what lets a named one in:
// - DNS rebinding: with no API key, a request whose Host is neither a loopback name (localhost, 127.0.0.1, [::1]) nor
//   the listening address, with no port or the listening port, is refused 403, as Jupyter does. A page on
//   evil.example that rebinds its name to 127.0.0.1 still sends "Host: evil.example".
// - Cross-site simple requests: a page may POST text/plain, form or multipart bodies anywhere without a CORS
//   preflight, so a POST whose Content-Type is not JSON (application/json or */*+json; none at all is accepted, for
//   hand-written clients) is refused 415, unless its Origin is allowed.
// - CORS: origins named by --allowed-origins get Access-Control-Allow-Origin on every answer, and their preflight
//   OPTIONS requests are answered 204 with the methods and headers the API takes; other origins' preflights get 403.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/http.h"

namespace plumb::server {

struct AccessPolicy {
  std::string listen_host;                   // --host, as given
  uint16_t port = 0;                         // the port listened on
  bool api_key_set = false;                  // with a key, a forged Host gains nothing: the key is still needed
  std::vector<std::string> allowed_origins;  // exact origins ("https://app.example:8443"), or "*" for any
};

// Splits --allowed-origins' "a,b" into origins; throws plumb::Error for an empty item or one with a path.
std::vector<std::string> parse_allowed_origins(const std::string& list);

// The answer for a request refused before routing (403 for a foreign Host or a preflight from an origin not
// allowed, 204 for an allowed preflight, 415 for a POST body that is not JSON), or nullopt to route it.
std::optional<HttpResponse> answer_before_routing(const AccessPolicy& policy, const HttpRequest& request);

// The CORS headers every answer to `request` carries, this function's 204 included: none unless its Origin is
// allowed. Browsers refuse an answer that repeats Access-Control-Allow-Origin.
std::vector<std::pair<std::string, std::string>> cors_headers(const AccessPolicy& policy, const HttpRequest& request);

}  // namespace plumb::server
