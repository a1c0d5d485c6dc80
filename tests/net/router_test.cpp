#include "net/router.hpp"

#include <gtest/gtest.h>

#include "net/api_routes.hpp"

namespace troupe::net {
namespace {

HttpRequest request(std::string method, std::string target) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  return r;
}

TEST(Router, DispatchesByMethodAndPath) {
  Router router;
  router.add("GET", "/a", [](const HttpRequest&) { return json_response(200, "\"a\""); });
  router.add("GET", "/p/*", [](const HttpRequest& r) {
    return json_response(200, std::string(r.path()));
  });
  EXPECT_EQ(router.handle(request("GET", "/a?x=1")).body, "\"a\"");
  EXPECT_EQ(router.handle(request("GET", "/p/q")).body, "/p/q");
  EXPECT_EQ(router.handle(request("GET", "/p/")).status, 404);
  EXPECT_EQ(router.handle(request("POST", "/a")).status, 405);
  const HttpResponse missing = router.handle(request("GET", "/nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(missing.body.find(R"("type":"not_found_error")"), std::string::npos);
}

TEST(ErrorResponse, HasOpenAiShape) {
  const HttpResponse r = error_response(400, "bad \"x\"", "invalid_request_error", "x");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body,
            R"({"error":{"message":"bad \"x\"","type":"invalid_request_error","param":"x","code":null}})");
}

TEST(InfoRoutes, HealthFollowsThePhaseAndModelsListsTheModel) {
  ServerState state;
  state.model.id = "M";
  state.model.architecture = "llama";
  state.model.num_layers = 30;
  state.model.context_length = 8192;
  state.model.quantization = "Q4_1";
  state.backend = "cpu";
  Router router;
  add_info_routes(router, state);

  EXPECT_EQ(router.handle(request("GET", "/health")).status, 503);
  state.phase = ServerPhase::kReady;
  const HttpResponse health = router.handle(request("GET", "/health"));
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, R"({"status":"ok"})");

  const HttpResponse models = router.handle(request("GET", "/v1/models"));
  EXPECT_EQ(models.status, 200);
  for (const char* needle : {R"("object":"list")", R"("id":"M")", R"("architecture":"llama")",
                             R"("num_layers":30)", R"("context_length":8192)",
                             R"("quantization":"Q4_1")"}) {
    EXPECT_NE(models.body.find(needle), std::string::npos) << needle << " in " << models.body;
  }
  EXPECT_EQ(router.handle(request("GET", "/v1/models/M")).status, 200);
  EXPECT_EQ(router.handle(request("GET", "/v1/models/other")).status, 404);
  state.phase = ServerPhase::kDraining;
  EXPECT_EQ(router.handle(request("GET", "/health")).status, 503);
}

}  // namespace
}  // namespace troupe::net
