// CredentialReloader (app/credential_reload.hpp) against a real HttpServer on loopback: a reload
// puts a rewritten keys file in force for the next request, refuses a malformed or emptied one
// (the keys in force keep working), says a plain-HTTP server has no certificate to reload, and
// keeps /v1/models' "auth" in step. The TLS half under load is tests/e2e/test_credential_reload.py.
#include "app/credential_reload.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "net/http_server.hpp"
#include "tests/net/ws_test_client.hpp"

namespace troupe::app {
namespace {

class CredentialReloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("reload-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    keys_file_ = dir_ / "keys";
    write_keys("alice:sk-alice-1111\n");
    access_.keys_file = keys_file_;
    auto router = std::make_shared<net::Router>();
    router->add("GET", "/v1/whoami", [](const net::HttpRequest& r) {
      return net::json_response(200, "\"" + r.api_key_name + "\"");
    });
    net::HttpServerConfig config;
    config.port = 0;
    config.shutdown_grace = std::chrono::milliseconds(500);
    server_ = std::make_unique<net::HttpServer>(config, router);
    auto policy = std::make_shared<const net::AccessPolicy>(access_policy_of(access_, ""));
    server_->set_access_policy(policy);
    state_.api_key_required.store(true);
    server_->start();
    reloader_ =
        std::make_unique<CredentialReloader>(access_, "", policy, *server_, state_, limits_);
  }
  void TearDown() override {
    server_->stop();
    std::filesystem::remove_all(dir_);
  }

  void write_keys(const std::string& text) { std::ofstream(keys_file_) << text; }

  // The status line of GET /v1/whoami with `key`, on a fresh connection.
  std::string status_with(const std::string& key) {
    net::testing::WsTestClient client(server_->port());
    EXPECT_TRUE(client.connected());
    client.send_raw("GET /v1/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
                    "\r\nConnection: close\r\n\r\n");
    const std::string response = client.read_all();
    return response.substr(0, response.find("\r\n"));
  }

  static const net::ReloadPart& part(const std::vector<net::ReloadPart>& parts,
                                     const std::string& what) {
    for (const net::ReloadPart& p : parts) {
      if (p.what == what) return p;
    }
    throw std::runtime_error("no part " + what);
  }

  std::filesystem::path dir_, keys_file_;
  AccessConfig access_;
  net::ServerState state_;
  net::KeyRateLimiter limits_;
  std::unique_ptr<net::HttpServer> server_;
  std::unique_ptr<CredentialReloader> reloader_;
};

TEST_F(CredentialReloadTest, ARewrittenKeysFileIsInForceForTheNextRequest) {
  EXPECT_EQ(status_with("sk-alice-1111"), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_with("sk-bob-2222"), "HTTP/1.1 401 Unauthorized");
  write_keys("bob:sk-bob-2222\ncarol:sk-carol-3333\n");
  const std::vector<net::ReloadPart> parts = reloader_->reload();
  EXPECT_TRUE(part(parts, "api_keys").ok) << part(parts, "api_keys").detail;
  EXPECT_NE(part(parts, "api_keys").detail.find("2 keys in force (were 1)"), std::string::npos);
  EXPECT_EQ(status_with("sk-bob-2222"), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_with("sk-alice-1111"), "HTTP/1.1 401 Unauthorized");
  EXPECT_TRUE(state_.api_key_required.load());
}

TEST_F(CredentialReloadTest, AMalformedOrEmptiedFileIsRefusedAndTheKeysInForceStay) {
  write_keys("bob:sk-bob-2222\nnot a key\n");
  std::vector<net::ReloadPart> parts = reloader_->reload();
  EXPECT_FALSE(part(parts, "api_keys").ok);
  EXPECT_NE(part(parts, "api_keys").detail.find("line 2"), std::string::npos)
      << part(parts, "api_keys").detail;
  EXPECT_EQ(status_with("sk-alice-1111"), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_with("sk-bob-2222"), "HTTP/1.1 401 Unauthorized");

  write_keys("# everyone rotated out\n");
  parts = reloader_->reload();
  EXPECT_FALSE(part(parts, "api_keys").ok);
  EXPECT_NE(part(parts, "api_keys").detail.find("open the API to anyone"), std::string::npos);
  EXPECT_EQ(status_with("sk-alice-1111"), "HTTP/1.1 200 OK");
  EXPECT_TRUE(state_.api_key_required.load());

  std::filesystem::remove(keys_file_);
  parts = reloader_->reload();
  EXPECT_FALSE(part(parts, "api_keys").ok);
  EXPECT_NE(part(parts, "api_keys").detail.find("cannot read"), std::string::npos);
  EXPECT_EQ(status_with("sk-alice-1111"), "HTTP/1.1 200 OK");
}

TEST_F(CredentialReloadTest, APlainHttpServerHasNoCertificateToReload) {
  const std::vector<net::ReloadPart> parts = reloader_->reload();
  EXPECT_TRUE(part(parts, "tls").ok);
  EXPECT_EQ(part(parts, "tls").detail, "the server does not speak TLS");
}

}  // namespace
}  // namespace troupe::app
