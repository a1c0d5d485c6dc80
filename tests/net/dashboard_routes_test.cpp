// The dashboard's routes (net/dashboard_routes.hpp) against a fake engine, through the router:
// the stats reply wraps the admin one and says whether the caller may cancel; cancel is for admin
// keys (or a server without keys), refused with 403 otherwise, and reaches the engine.
#include "net/dashboard_routes.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <memory>
#include <string>

#include "tests/net/admin_fake_engine.hpp"

namespace troupe::net {
namespace {

HttpRequest request_as(std::string method, std::string target, std::string key, bool admin) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.api_key_name = std::move(key);
  r.api_key_is_admin = admin;
  return r;
}

class DashboardRoutes : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_->rate_limits.set_limits({{"user", {1, 0}}}, steady_now_s());
    add_dashboard_routes(router_, engine_, metrics_);
  }
  testing::AdminFakeEngine engine_;
  std::shared_ptr<ServingMetrics> metrics_ = std::make_shared<ServingMetrics>();
  Router router_;
};

TEST_F(DashboardRoutes, StatsWrapTheAdminReplyAndSayWhoMayCancel) {
  (void)metrics_->rate_limits.admit("user", steady_now_s());
  (void)metrics_->rate_limits.admit("user", steady_now_s());  // refused: one a minute
  simdjson::dom::parser parser;
  const HttpResponse user = router_.handle(request_as("GET", "/v1/dashboard/stats", "user", false));
  ASSERT_EQ(user.status, 200) << user.body;
  simdjson::dom::element root = parser.parse(user.body);
  EXPECT_EQ(root["stats"]["model"].get_string().value(), "fake-model");
  EXPECT_FALSE(root["can_cancel"].get_bool().value());
  EXPECT_EQ(root["rate_limited"].get_int64().value(), 1);
  const HttpResponse admin = router_.handle(request_as("GET", "/v1/dashboard/stats", "ops", true));
  EXPECT_TRUE(parser.parse(admin.body)["can_cancel"].get_bool().value());
  const HttpResponse open = router_.handle(request_as("GET", "/v1/dashboard/stats", "", false));
  EXPECT_TRUE(parser.parse(open.body)["can_cancel"].get_bool().value());  // no keys: open server
  const HttpResponse page = router_.handle(request_as("GET", "/dashboard", "", false));
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("troupe dashboard"), std::string::npos);
}

TEST_F(DashboardRoutes, CancelIsForAdminKeys) {
  const HttpResponse refused =
      router_.handle(request_as("POST", "/v1/dashboard/requests/5/cancel", "user", false));
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_TRUE(engine_.cancelled().empty());
  const HttpResponse done =
      router_.handle(request_as("POST", "/v1/dashboard/requests/5/cancel", "ops", true));
  EXPECT_EQ(done.status, 200) << done.body;
  EXPECT_EQ(engine_.cancelled(), (std::vector<engine::RequestId>{5}));
  EXPECT_EQ(router_.handle(request_as("POST", "/v1/dashboard/requests/x5/cancel", "ops", true)).status, 400);
  EXPECT_EQ(router_.handle(request_as("POST", "/v1/dashboard/requests/5", "ops", true)).status, 404);
}

}  // namespace
}  // namespace troupe::net
