// ApiKeys (issue 16): sources, names, file format, constant-time authentication, and the two
// places a key travels (Authorization: Bearer, Sec-WebSocket-Protocol "bearer.<key>").
#include "net/api_keys.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace troupe::net {
namespace {

TEST(ApiKeys, NoKeysMeansAuthenticationIsOff) {
  const ApiKeys keys;
  EXPECT_TRUE(keys.empty());
  EXPECT_FALSE(keys.authenticate("anything"));
}

TEST(ApiKeys, AuthenticatesOnlyTheExactKeyAndGivesItsName) {
  ApiKeys keys;
  keys.add("alice", "sk-alice-0123456789", "test");
  keys.add({}, "sk-anon-abcdef", "test");
  EXPECT_EQ(keys.authenticate("sk-alice-0123456789"), "alice");
  EXPECT_EQ(keys.authenticate("sk-anon-abcdef"), "key-2");
  EXPECT_FALSE(keys.authenticate("sk-alice-012345678"));    // a prefix
  EXPECT_FALSE(keys.authenticate("sk-alice-0123456789x"));  // longer
  EXPECT_FALSE(keys.authenticate("SK-ALICE-0123456789"));   // keys are case-sensitive
  EXPECT_FALSE(keys.authenticate(""));
}

// The whole digest is compared: this key's SHA-256 begins with the same three bytes as
// sk-alice-0123456789's (76 7c e1, found by search), so a compare of a prefix lets it in.
TEST(ApiKeys, AKeyWhoseDigestSharesItsFirstBytesIsRefused) {
  ApiKeys keys;
  keys.add("alice", "sk-alice-0123456789", "test");
  EXPECT_FALSE(keys.authenticate("sk-near-32161378"));
  EXPECT_EQ(keys.authenticate("sk-alice-0123456789"), "alice");
}

TEST(ApiKeys, KeysFileLinesNamesCommentsAndErrors) {
  ApiKeys keys;
  keys.add_lines("# operators\n\nalice: sk-a\r\nsk-unnamed\na/b:sk-odd\n", "keys.txt");
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys.authenticate("sk-a"), "alice");
  EXPECT_EQ(keys.authenticate("sk-unnamed"), "key-2");
  // "a/b" is not a name, so the whole line is the key.
  EXPECT_EQ(keys.authenticate("a/b:sk-odd"), "key-3");
  try {
    ApiKeys bad;
    bad.add_lines("alice:sk-1\nbob:has space\n", "keys.txt");
    FAIL() << "expected an error";
  } catch (const ApiKeyError& e) {
    EXPECT_NE(std::string(e.what()).find("keys.txt line 2"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("has space"), std::string::npos) << "a key in an error";
  }
  ApiKeys twice;
  EXPECT_THROW(twice.add_lines("a:k1\na:k2\n", "f"), ApiKeyError);
}

// "NAME:KEY rpm=N tpm=N": a key's own limits over the defaults, each column optional; a column
// that is not one is an error that does not echo it (it may be half of a key with a blank).
TEST(ApiKeys, KeysFileLimitColumns) {
  const RateLimits defaults{10, 1000};
  ApiKeys keys;
  keys.add_lines("alice:sk-a rpm=5 tpm=200\nbob:sk-b\ttpm=0\ncarol:sk-c\nsk-d rpm=7\n", "keys.txt",
                 defaults);
  EXPECT_EQ(keys.authenticate("sk-a"), "alice");
  EXPECT_EQ(keys.authenticate("sk-d"), "key-4");
  const auto limits = keys.limits();
  ASSERT_EQ(limits.size(), 4u);
  EXPECT_EQ(limits[0], (std::pair<std::string, RateLimits>{"alice", {5, 200}}));
  EXPECT_EQ(limits[1], (std::pair<std::string, RateLimits>{"bob", {10, 0}}));
  EXPECT_EQ(limits[2], (std::pair<std::string, RateLimits>{"carol", defaults}));
  EXPECT_EQ(limits[3], (std::pair<std::string, RateLimits>{"key-4", {7, 1000}}));
  EXPECT_FALSE(keys.is_admin("alice"));
  ApiKeys admins;
  admins.add_lines("ops:sk-o admin rpm=9\nuser:sk-u\n", "keys.txt");
  EXPECT_TRUE(admins.is_admin("ops"));
  EXPECT_FALSE(admins.is_admin("user"));
  EXPECT_FALSE(admins.is_admin("nobody"));
  EXPECT_EQ(admins.limits().at(0).second.requests_per_minute, 9);
  for (const std::string line : {"a:sk-1 RPM=5", "a:sk-1 rpm=5 rpm=6", "a:sk-1 rpm=-1", "a:sk-1 admin admin",
                                 "a:sk-1 rpm=", "a:sk-1 tpm=1e6", "a:sk-1 secret-half"}) {
    try {
      ApiKeys bad;
      bad.add_lines(line, "keys.txt");
      FAIL() << "accepted: " << line;
    } catch (const ApiKeyError& e) {
      EXPECT_NE(std::string(e.what()).find("keys.txt line 1"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("secret-half"), std::string::npos) << e.what();
    }
  }
  const auto path = std::filesystem::temp_directory_path() / "troupe_api_keys_limits.txt";
  std::ofstream(path) << "ops:sk-file rpm=3\n";
  const ApiKeys all = ApiKeys::from_sources({"sk-flag"}, path, "", defaults);
  std::filesystem::remove(path);
  EXPECT_EQ(all.limits().at(0).second, defaults);  // --api-key: the defaults
  EXPECT_EQ(all.limits().at(1).second, (RateLimits{3, 1000}));
}

TEST(ApiKeys, FromEverySource) {
  const auto path = std::filesystem::temp_directory_path() / "troupe_api_keys_test.txt";
  std::ofstream(path) << "ops:sk-file\n";
  const ApiKeys keys = ApiKeys::from_sources({"sk-flag"}, path, "sk-env\n");
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys.authenticate("sk-flag"), "key-1");
  EXPECT_EQ(keys.authenticate("sk-env"), "key-2");
  EXPECT_EQ(keys.authenticate("sk-file"), "ops");
  std::filesystem::remove(path);
  EXPECT_THROW(ApiKeys::from_sources({}, path, ""), ApiKeyError);  // unreadable file
  EXPECT_THROW(ApiKeys::from_sources({""}, std::nullopt, ""), ApiKeyError);
}

TEST(BearerToken, ParsesTheSchemeCaseInsensitively) {
  EXPECT_EQ(bearer_token("Bearer sk-1"), "sk-1");
  EXPECT_EQ(bearer_token("bearer   sk-1  "), "sk-1");
  EXPECT_EQ(bearer_token("BEARER sk-1"), "sk-1");
  EXPECT_EQ(bearer_token("Basic dXNlcjpwYXNz"), "");
  EXPECT_EQ(bearer_token("Bearer"), "");
  EXPECT_EQ(bearer_token(""), "");
}

TEST(WebSocketProtocols, TheKeyIsSplitFromWhatMayBeEchoed) {
  const auto offer = split_websocket_protocols("troupe.chat.v1, bearer.sk-secret");
  EXPECT_EQ(offer.key, "sk-secret");
  EXPECT_EQ(offer.others, std::vector<std::string>{"troupe.chat.v1"});
  const auto none = split_websocket_protocols("a,b");
  EXPECT_TRUE(none.key.empty());
  EXPECT_EQ(none.others, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(split_websocket_protocols("bearer.").key.empty());
}

}  // namespace
}  // namespace troupe::net
