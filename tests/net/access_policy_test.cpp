// AccessPolicy: which surfaces need a key, the 401, and the WebSocket subprotocol echo.
#include "net/access_policy.hpp"

#include <gtest/gtest.h>

namespace troupe::net {
namespace {

ApiKeys two_keys() {
  ApiKeys keys;
  keys.add("alice", "sk-alice-0123456789", "test");
  keys.add("bob", "sk-bob-9876543210", "test");
  return keys;
}

TEST(AccessPolicy, WithoutKeysEverySurfaceIsOpen) {
  const AccessPolicy open;
  EXPECT_FALSE(open.keys_required());
  for (const char* path : {"/v1/chat/completions", "/v1/models", "/tokenize", "/metrics"}) {
    EXPECT_FALSE(open.needs_key(path)) << path;
    const AccessDecision decision = open.check(path, "", "");
    EXPECT_FALSE(decision.refusal) << path;
    EXPECT_EQ(decision.key_name, "");
  }
}

TEST(AccessPolicy, KeysGuardTheApiTokenizersAndWebSocketButNotHealthOrThePage) {
  const AccessPolicy keyed(two_keys(), true);
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/models",
                           "/v1/models/x", "/v1/batch", "/v1/chat/ws", "/v1/anything",
                           "/tokenize", "/detokenize", "/metrics"}) {
    EXPECT_TRUE(keyed.needs_key(path)) << path;
    EXPECT_TRUE(keyed.check(path, "", "").refusal) << path;
  }
  for (const char* path : {"/health", "/", "/index.html", "/favicon.ico", "/v1x"}) {
    EXPECT_FALSE(keyed.needs_key(path)) << path;
    EXPECT_FALSE(keyed.check(path, "", "").refusal) << path;
  }
}

TEST(AccessPolicy, MetricsAreOpenWhenConfiguredSo) {
  const AccessPolicy keyed(two_keys(), false);
  EXPECT_FALSE(keyed.needs_key("/metrics"));
  EXPECT_FALSE(keyed.check("/metrics", "", "").refusal);
  EXPECT_TRUE(keyed.needs_key("/tokenize"));
}

TEST(AccessPolicy, TheRightKeyPassesAndNamesItself) {
  const AccessPolicy keyed(two_keys(), true);
  const AccessDecision alice = keyed.check("/v1/models", "Bearer sk-alice-0123456789", "");
  EXPECT_FALSE(alice.refusal);
  EXPECT_EQ(alice.key_name, "alice");
  const AccessDecision bob = keyed.check("/tokenize", "bearer   sk-bob-9876543210 ", "");
  EXPECT_FALSE(bob.refusal);
  EXPECT_EQ(bob.key_name, "bob");
}

TEST(AccessPolicy, WrongOrMalformedKeysGet401InOpenAiShape) {
  const AccessPolicy keyed(two_keys(), true);
  for (const char* authorization :
       {"", "Bearer", "Bearer ", "Bearer sk-alice-012345678", "Bearer sk-alice-01234567890",
        "Basic c2stYWxpY2U=", "sk-alice-0123456789", "Bearer Sk-alice-0123456789",
        "Bearer tk-alice-0123456789"}) {
    const AccessDecision decision = keyed.check("/v1/chat/completions", authorization, "");
    ASSERT_TRUE(decision.refusal) << authorization;
    const HttpResponse& response = *decision.refusal;
    EXPECT_EQ(response.status, 401);
    EXPECT_EQ(response.content_type, "application/json");
    EXPECT_NE(response.body.find(R"("type":"authentication_error")"), std::string::npos)
        << response.body;
    EXPECT_NE(response.body.find(R"("code":"invalid_api_key")"), std::string::npos);
    EXPECT_NE(response.body.find(R"("param":null)"), std::string::npos);
    EXPECT_EQ(decision.key_name, "");
    ASSERT_EQ(response.headers.size(), 1u);
    EXPECT_EQ(response.headers[0].first, "WWW-Authenticate");
    EXPECT_EQ(response.headers[0].second, "Bearer");
  }
}

TEST(AccessPolicy, TheRefusalNeverRepeatsThePresentedKey) {
  const AccessPolicy keyed(two_keys(), true);
  const AccessDecision decision =
      keyed.check("/v1/models", "Bearer sk-wrong-secret-42", "bearer.sk-other-secret-43");
  ASSERT_TRUE(decision.refusal);
  EXPECT_EQ(decision.refusal->body.find("sk-wrong-secret-42"), std::string::npos);
  EXPECT_EQ(decision.refusal->body.find("sk-other-secret-43"), std::string::npos);
}

TEST(AccessPolicy, AWebSocketMayCarryTheKeyAsASubprotocol) {
  const AccessPolicy keyed(two_keys(), true);
  const AccessDecision decision =
      keyed.check("/v1/chat/ws", "", "troupe.chat.v1, bearer.sk-bob-9876543210");
  EXPECT_FALSE(decision.refusal);
  EXPECT_EQ(decision.key_name, "bob");
  EXPECT_TRUE(keyed.check("/v1/chat/ws", "", "troupe.chat.v1, bearer.sk-bob-0").refusal);
  EXPECT_TRUE(keyed.check("/v1/chat/ws", "", "troupe.chat.v1").refusal);
  // A wrong header does not hide a right subprotocol, nor the other way round.
  EXPECT_EQ(keyed.check("/v1/chat/ws", "Bearer nope", "bearer.sk-bob-9876543210").key_name, "bob");
  EXPECT_EQ(keyed.check("/v1/chat/ws", "Bearer sk-bob-9876543210", "bearer.nope").key_name, "bob");
}

TEST(AccessPolicy, TheEchoedSubprotocolIsNeverTheBearerOne) {
  EXPECT_EQ(chosen_websocket_protocol("troupe.chat.v1, bearer.sk-secret"), "troupe.chat.v1");
  EXPECT_EQ(chosen_websocket_protocol("bearer.sk-secret, troupe.chat.v1"), "troupe.chat.v1");
  EXPECT_EQ(chosen_websocket_protocol("bearer.sk-secret"), "");
  EXPECT_EQ(chosen_websocket_protocol(""), "");
  EXPECT_EQ(chosen_websocket_protocol("a, b"), "a");
}

}  // namespace
}  // namespace troupe::net
