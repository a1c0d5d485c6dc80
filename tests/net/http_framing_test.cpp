// check_request_framing: Transfer-Encoding and Content-Length combinations (RFC 9112 §6,
// issue 14).
#include "net/http_framing.hpp"

#include <gtest/gtest.h>

namespace troupe::net {
namespace {

// The status of the refusal; 0 when the framing is accepted.
int status_of(std::string_view transfer_encoding, bool has_content_length) {
  const std::optional<HttpResponse> refusal =
      check_request_framing(transfer_encoding, has_content_length);
  return refusal ? refusal->status : 0;
}

TEST(HttpFraming, NoTransferEncodingOrPlainChunkedIsFine) {
  EXPECT_EQ(status_of("", false), 0);
  EXPECT_EQ(status_of("", true), 0);
  EXPECT_EQ(status_of("chunked", false), 0);
  EXPECT_EQ(status_of("  Chunked ", false), 0);
}

TEST(HttpFraming, FinalCodingOtherThanChunkedIs400NamingTheHeader) {
  const std::optional<HttpResponse> refusal = check_request_framing("gzip", true);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status, 400);
  EXPECT_NE(refusal->body.find("Transfer-Encoding 'gzip'"), std::string::npos) << refusal->body;
  EXPECT_NE(refusal->body.find(R"("code":"invalid_transfer_encoding")"), std::string::npos);
  EXPECT_EQ(status_of("gzip", false), 400);
  EXPECT_EQ(status_of("chunked, gzip", false), 400);
  EXPECT_EQ(status_of(",", false), 400);
  EXPECT_EQ(status_of("identity", false), 400);
}

TEST(HttpFraming, ChunkedTwiceOrWithContentLengthIs400) {
  EXPECT_EQ(status_of("chunked, chunked", false), 400);
  const std::optional<HttpResponse> refusal = check_request_framing("chunked", true);
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->status, 400);
  EXPECT_NE(refusal->body.find("Content-Length"), std::string::npos) << refusal->body;
}

TEST(HttpFraming, OtherCodingsBeforeChunkedAre501) {
  EXPECT_EQ(status_of("gzip, chunked", false), 501);
  EXPECT_EQ(status_of("gzip;level=1 , chunked", false), 501);
}

}  // namespace
}  // namespace troupe::net
