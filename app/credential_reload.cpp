// CredentialReloader (see credential_reload.hpp).
#include "app/credential_reload.hpp"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace troupe::app {

CredentialReloader::CredentialReloader(AccessConfig access, std::string environment_key,
                                       std::shared_ptr<const net::AccessPolicy> in_force,
                                       net::HttpServer& server, net::ServerState& state,
                                       net::KeyRateLimiter& limits)
    : access_(std::move(access)),
      environment_key_(std::move(environment_key)),
      server_(server),
      state_(state),
      limits_(limits),
      in_force_(std::move(in_force)) {}

std::vector<net::ReloadPart> CredentialReloader::reload() {
  std::lock_guard lock(mutex_);
  std::vector<net::ReloadPart> parts{reload_keys(), reload_tls()};
  for (const net::ReloadPart& part : parts) {
    if (part.ok) {
      spdlog::info("reload {}: {}", part.what, part.detail);
    } else {
      spdlog::error("reload {} refused: {}", part.what, part.detail);
    }
  }
  return parts;
}

net::ReloadPart CredentialReloader::reload_keys() {
  net::ReloadPart part{.what = "api_keys"};
  const size_t before = in_force_->num_keys();
  std::shared_ptr<const net::AccessPolicy> next;
  try {
    next = std::make_shared<const net::AccessPolicy>(access_policy_of(access_, environment_key_));
  } catch (const ConfigError& e) {
    part.detail = fmt::format("{}; the {} keys in force stay", e.what(), before);
    return part;
  }
  if (before > 0 && !next->keys_required()) {
    part.detail = fmt::format("the new keys leave none, which would open the API to anyone; the "
                              "{} keys in force stay (a restart without keys turns "
                              "authentication off)",
                              before);
    return part;
  }
  // Limits first: a request admitted under the new keys is metered by the new limits.
  limits_.set_limits(next->key_limits(), net::steady_now_s());
  server_.set_access_policy(next);
  state_.api_key_required.store(next->keys_required(), std::memory_order_release);
  in_force_ = std::move(next);
  part.ok = true;
  part.detail = fmt::format("{} keys in force (were {}){}", in_force_->num_keys(), before,
                            access_.keys_file ? ", from " + access_.keys_file->string() : "");
  return part;
}

net::ReloadPart CredentialReloader::reload_tls() {
  net::ReloadPart part{.what = "tls"};
  try {
    part.ok = true;
    part.detail = server_.reload_tls()
                      ? fmt::format("certificate {} in force for new connections",
                                    server_.tls_certificate_file())
                      : "the server does not speak TLS";
  } catch (const net::TlsConfigError& e) {
    part.ok = false;
    part.detail = fmt::format("{}; the certificate in force stays", e.what());
  }
  return part;
}

}  // namespace troupe::app
