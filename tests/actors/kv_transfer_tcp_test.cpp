// What only troupe's own TCP KV transport (actors/kv_cache/transfer/tcp_transport.hpp) has to
// prove beyond the shared transport cases (kv_transfer_in_process_test.cpp,
// kv_transfer_cross_process_test.cpp, which run over it too): its wire format's parsing
// (tcp_wire.hpp), and that its port, reachable by anyone who can connect, gives nothing without
// the descriptor's token and cannot be wedged by what a stranger sends.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/kv_cache/transfer/tcp_transport.hpp"
#include "actors/kv_cache/transfer/tcp_wire.hpp"
#include "tests/actors/kv_transfer_test_support.hpp"

namespace troupe::kv_transfer {
namespace {

using namespace testing;
using namespace tcp_wire;

// ---------------------------------------------------------------------------------------------
// The wire format

TEST(KvTcpWire, FramesRoundTripLittleEndian) {
  std::array<uint8_t, kRequestHeaderBytes> request{};
  encode_request_header({.pull_id = 0x0102030405060708ull, .num_ranges = 3}, request);
  EXPECT_EQ(request[0], 0x08);  // little-endian on every host
  const std::optional<RequestHeader> decoded = decode_request_header(request);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->pull_id, 0x0102030405060708ull);
  EXPECT_EQ(decoded->num_ranges, 3u);

  std::array<uint8_t, kReplyHeaderBytes> reply{};
  encode_reply_header({.pull_id = 9, .status = ReplyStatus::kOk, .payload_bytes = 1ull << 40},
                      reply);
  const std::optional<ReplyHeader> answer = decode_reply_header(reply);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->pull_id, 9u);
  EXPECT_EQ(answer->payload_bytes, 1ull << 40);

  std::array<uint8_t, kRangeBytes> range{};
  encode_range({.offset = 7, .bytes = 1ull << 33}, range);
  EXPECT_EQ(decode_range(range).bytes, 1ull << 33);
}

TEST(KvTcpWire, MalformedFramesAreRefused) {
  std::array<uint8_t, kRequestHeaderBytes> request{};
  encode_request_header({.pull_id = 1, .num_ranges = 0}, request);
  EXPECT_FALSE(decode_request_header(request)) << "a request of no range";
  encode_request_header({.pull_id = 1, .num_ranges = kMaxRanges + 1}, request);
  EXPECT_FALSE(decode_request_header(request)) << "more ranges than any pull has";
  encode_request_header({.pull_id = 1, .num_ranges = 1}, request);
  request[12] = 1;
  EXPECT_FALSE(decode_request_header(request)) << "a nonzero reserved word";

  std::array<uint8_t, kReplyHeaderBytes> reply{};
  encode_reply_header({.pull_id = 1, .status = ReplyStatus::kOutOfRange, .payload_bytes = 5},
                      reply);
  EXPECT_FALSE(decode_reply_header(reply)) << "a refusal that carries bytes";
  encode_reply_header({.pull_id = 1, .status = ReplyStatus::kOk, .payload_bytes = 0}, reply);
  reply[8] = 7;
  EXPECT_FALSE(decode_reply_header(reply)) << "an unknown status";

  std::array<uint8_t, kHelloAckBytes> ack{};
  encode_hello_ack(AckStatus::kOk, ack);
  ack[0] ^= 1;
  EXPECT_FALSE(decode_hello_ack(ack)) << "another protocol's bytes";
}

TEST(KvTcpWire, HelloChecksEveryByteOfTheToken) {
  const Token token = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  std::array<uint8_t, kHelloBytes> hello{};
  encode_hello(token, hello);
  EXPECT_TRUE(hello_carries(hello, token));
  for (size_t i = 0; i < kHelloBytes; ++i) {
    std::array<uint8_t, kHelloBytes> altered = hello;
    altered[i] ^= 0x80;
    EXPECT_FALSE(hello_carries(altered, token)) << "byte " << i;
  }
}

TEST(KvTcpWire, PayloadOfRefusesRangesOutsideTheRegionAndOverflow) {
  const std::vector<Range> fine = {{.offset = 0, .bytes = 10}, {.offset = 90, .bytes = 10}};
  EXPECT_EQ(payload_of(fine, 100), 20u);
  EXPECT_FALSE(payload_of(std::vector<Range>{{.offset = 91, .bytes = 10}}, 100));
  EXPECT_FALSE(payload_of(std::vector<Range>{{.offset = UINT64_MAX, .bytes = 2}}, 100));
  const uint64_t big = std::numeric_limits<uint64_t>::max() / 2 + 1;
  EXPECT_FALSE(payload_of(std::vector<Range>{{.offset = 0, .bytes = big}, {.offset = 0, .bytes = big}},
                          UINT64_MAX))
      << "a total past 2^64";
}

TEST(KvTcpWire, EndpointsParseWithIpv6InBrackets) {
  EXPECT_EQ(format_endpoint("10.0.0.7", 5555), "10.0.0.7:5555");
  EXPECT_EQ(format_endpoint("::1", 80), "[::1]:80");
  const std::optional<Endpoint> v6 = parse_endpoint("[::1]:80");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 80);
  EXPECT_EQ(parse_endpoint("prefill-0.pd.svc:4000")->host, "prefill-0.pd.svc");
  for (const char* bad : {"", "host", "host:", ":80", "host:0", "host:65536", "host:8x", "[::1:80",
                          "[]:80"}) {
    EXPECT_FALSE(parse_endpoint(bad)) << bad;
  }
}

// ---------------------------------------------------------------------------------------------
// The port, against strangers

// A plain client socket connected to a transport's port (from its descriptor).
int connect_to(const LocalDescriptor& descriptor) {
  const std::optional<Endpoint> endpoint = parse_endpoint(descriptor.worker_address);
  if (!endpoint) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(endpoint->port);
  inet_pton(AF_INET, endpoint->host.c_str(), &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes (true) or `limit` passes (false); what arrived goes to `received`.
bool read_until_closed(int fd, std::chrono::milliseconds limit, std::string* received) {
  timeval wait{.tv_sec = static_cast<time_t>(limit.count() / 1000),
               .tv_usec = static_cast<suseconds_t>((limit.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char buffer[4096];
  for (;;) {
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got == 0) return true;
    if (got < 0) return errno == ECONNRESET;
    received->append(buffer, static_cast<size_t>(got));
  }
}

struct TcpEngine {
  explicit TcpEngine(uint32_t seed, TcpTransportConfig config = {}) : region(kRegionBytes, 0) {
    fill_pattern(region, seed);
    std::string error;
    transport = make_tcp_transport(region.data(), region.size(), config, &error);
    EXPECT_NE(transport, nullptr) << error;
  }
  std::vector<uint8_t> region;
  std::unique_ptr<KvTransport> transport;
};

TEST(KvTcpTransport, APullWithoutTheTokenReadsNothing) {
  TcpEngine prefill(/*seed=*/31);
  LocalEngine decode;
  ASSERT_TRUE(prefill.transport && decode.transport);
  LocalDescriptor guessed = prefill.transport->local_descriptor();
  guessed.rkey[0] = static_cast<char>(guessed.rkey[0] ^ 1);

  const Status status =
      pull_and_wait(*decode.transport, "prefill-0", guessed, one_block_all_layers(0, 0));

  EXPECT_EQ(status.code, StatusCode::kPeerFailed) << status.error;
  EXPECT_NE(status.error.find("token"), std::string::npos) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 31, {}), "");
  EXPECT_EQ(prefill.transport->stats().bytes_served, 0u);
  // The right descriptor still works, on a fresh connection.
  EXPECT_TRUE(pull_and_wait(*decode.transport, "prefill-0", prefill.transport->local_descriptor(),
                            one_block_all_layers(0, 0))
                  .ok());
}

TEST(KvTcpTransport, AStrangerIsClosedAndOthersAreServedMeanwhile) {
  TcpTransportConfig quick;
  quick.hello_timeout = std::chrono::milliseconds(300);
  TcpEngine prefill(/*seed=*/32, quick);
  ASSERT_TRUE(prefill.transport);
  const LocalDescriptor& descriptor = prefill.transport->local_descriptor();

  const int silent = connect_to(descriptor);        // says nothing
  const int garbage = connect_to(descriptor);       // says something else
  const int no_token = connect_to(descriptor);      // speaks the protocol, without the token
  ASSERT_GE(silent, 0);
  ASSERT_GE(garbage, 0);
  ASSERT_GE(no_token, 0);
  const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(garbage, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  std::array<uint8_t, kHelloBytes> hello{};
  encode_hello(Token{}, hello);
  ASSERT_EQ(send(no_token, hello.data(), hello.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(hello.size()));

  // Meanwhile a real puller is served.
  LocalEngine decode;
  ASSERT_TRUE(decode.transport);
  const std::vector<Segment> segments = one_block_all_layers(2, 3);
  const Status status = pull_and_wait(*decode.transport, "prefill-0", descriptor, segments);
  ASSERT_TRUE(status.ok()) << status.error;
  EXPECT_EQ(check_pulled(decode.region, 32, segments), "");

  std::string received;
  EXPECT_TRUE(read_until_closed(no_token, std::chrono::seconds(10), &received));
  ASSERT_EQ(received.size(), kHelloAckBytes);  // told why, then closed
  EXPECT_EQ(decode_hello_ack(std::span<const uint8_t, kHelloAckBytes>(
                reinterpret_cast<const uint8_t*>(received.data()), kHelloAckBytes)),
            AckStatus::kWrongToken);
  received.clear();
  EXPECT_TRUE(read_until_closed(garbage, std::chrono::seconds(10), &received));
  // A refusal, never a byte of the region (the reset that the unread rest of the junk causes
  // may overtake the refusal).
  EXPECT_LE(received.size(), kHelloAckBytes);
  received.clear();
  EXPECT_TRUE(read_until_closed(silent, std::chrono::seconds(10), &received))
      << "a connection that never says hello is closed after hello_timeout";
  EXPECT_TRUE(received.empty());
  for (const int fd : {silent, garbage, no_token}) close(fd);
  EXPECT_EQ(prefill.transport->stats().bytes_served, 60 * kBlockBytes);
}

TEST(KvTcpTransport, ARequestOfTooManyRangesClosesOnlyItsConnection) {
  TcpEngine prefill(/*seed=*/33);
  ASSERT_TRUE(prefill.transport);
  const LocalDescriptor& descriptor = prefill.transport->local_descriptor();
  const int fd = connect_to(descriptor);
  ASSERT_GE(fd, 0);
  Token token{};
  std::memcpy(token.data(), descriptor.rkey.data(), kTokenBytes);
  std::array<uint8_t, kHelloBytes + kRequestHeaderBytes> frames{};
  encode_hello(token, std::span<uint8_t, kHelloBytes>(frames.data(), kHelloBytes));
  encode_request_header({.pull_id = 1, .num_ranges = kMaxRanges + 1},
                        std::span<uint8_t, kRequestHeaderBytes>(frames.data() + kHelloBytes,
                                                                kRequestHeaderBytes));
  ASSERT_EQ(send(fd, frames.data(), frames.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frames.size()));

  std::string received;
  EXPECT_TRUE(read_until_closed(fd, std::chrono::seconds(10), &received));
  EXPECT_EQ(received.size(), kHelloAckBytes);  // welcomed, then dropped at the bad request
  close(fd);
  LocalEngine decode;
  ASSERT_TRUE(decode.transport);
  EXPECT_TRUE(pull_and_wait(*decode.transport, "prefill-0", descriptor, one_block_all_layers(1, 1))
                  .ok());
}

TEST(KvTcpTransport, AnAddressThatCannotBeBoundIsAnErrorAtStart) {
  TcpEngine first(/*seed=*/34);
  ASSERT_TRUE(first.transport);
  const std::optional<Endpoint> taken = parse_endpoint(first.transport->local_descriptor().worker_address);
  ASSERT_TRUE(taken);
  std::vector<uint8_t> region(4096);
  TcpTransportConfig same_port;
  same_port.port = taken->port;
  std::string error;
  EXPECT_EQ(make_tcp_transport(region.data(), region.size(), same_port, &error), nullptr);
  EXPECT_NE(error.find(std::to_string(taken->port)), std::string::npos) << error;
  TcpTransportConfig not_an_address;
  not_an_address.listen_host = "not a host name";
  EXPECT_EQ(make_tcp_transport(region.data(), region.size(), not_an_address, &error), nullptr);
  EXPECT_EQ(make_tcp_transport(region.data(), 0, TcpTransportConfig{}, &error), nullptr);
}

TEST(KvTcpTransport, TheDescriptorNamesTheAdvertisedHostAndTheBoundPort) {
  std::vector<uint8_t> region(4096);
  TcpTransportConfig all;
  all.listen_host = "0.0.0.0";
  std::string error;
  std::unique_ptr<KvTransport> wildcard = make_tcp_transport(region.data(), region.size(), all, &error);
  ASSERT_TRUE(wildcard) << error;
  const LocalDescriptor& descriptor = wildcard->local_descriptor();
  EXPECT_EQ(descriptor.transport, "tcp");
  EXPECT_EQ(descriptor.region_bytes, 4096u);
  EXPECT_EQ(descriptor.rkey.size(), kTokenBytes);
  const std::optional<Endpoint> endpoint = parse_endpoint(descriptor.worker_address);
  ASSERT_TRUE(endpoint);
  EXPECT_EQ(endpoint->host, "127.0.0.1");  // a wildcard is not an address to dial
  EXPECT_NE(endpoint->port, 0);

  all.advertise_host = "prefill-0.pd.svc";
  std::unique_ptr<KvTransport> advertised = make_tcp_transport(region.data(), region.size(), all, &error);
  ASSERT_TRUE(advertised) << error;
  EXPECT_EQ(parse_endpoint(advertised->local_descriptor().worker_address)->host, "prefill-0.pd.svc");
  EXPECT_NE(advertised->local_descriptor().rkey, descriptor.rkey) << "each transport its own token";
}

}  // namespace
}  // namespace troupe::kv_transfer
