// Credential rotation without a restart (issue 41): SIGHUP and `troupe admin reload` re-read the
// API keys (api.keys_file, with the --api-key flags and TROUPE_API_KEY as they were at start) and
// the TLS certificate and key, and with the keys their rate limits. Requests whose header arrives after a reload are checked against
// the new keys and connections accepted after it get the new certificate; requests and
// connections already established finish as they began.
//
// Each part is replaced whole or not at all. A file that cannot be used is refused with a log
// line naming it, and the version in force stays; so is a keys file that would leave a keyed
// server with no key at all (that would open it to anyone: an emptied or truncated file is far
// likelier than a wish to turn authentication off, which takes a restart).
//
// Thread-safety: reload() from any thread (the signal thread, the admin io thread); calls are
// serialized. The server must outlive the reloader.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "app/config.hpp"
#include "net/admin_protocol.hpp"
#include "net/http_server.hpp"
#include "net/rate_limits.hpp"
#include "net/server_state.hpp"

namespace troupe::app {

class CredentialReloader {
 public:
  // `in_force`: the policy the server started with; `environment_key`: TROUPE_API_KEY as read
  // then; `limits`: where the keys' rate limits go (each reload's keys may change them).
  CredentialReloader(AccessConfig access, std::string environment_key,
                     std::shared_ptr<const net::AccessPolicy> in_force, net::HttpServer& server,
                     net::ServerState& state, net::KeyRateLimiter& limits);

  // Re-reads both parts; what each did, also logged (info when in force, error when refused).
  std::vector<net::ReloadPart> reload();

 private:
  net::ReloadPart reload_keys();
  net::ReloadPart reload_tls();

  const AccessConfig access_;
  const std::string environment_key_;
  net::HttpServer& server_;
  net::ServerState& state_;
  net::KeyRateLimiter& limits_;
  std::mutex mutex_;
  std::shared_ptr<const net::AccessPolicy> in_force_;  // guarded by mutex_
};

}  // namespace troupe::app
