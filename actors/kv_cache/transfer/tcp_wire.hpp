// The wire format of troupe's own TCP KV transport (tcp_transport.hpp): fixed-size frames,
// little-endian, encoded and decoded by pure functions so that the parsing of what a peer sends
// is testable (tests/actors/kv_transfer_tcp_wire_test.cpp) without sockets.
//
// One connection per (puller, owner) pair, opened by the puller:
//
//   puller                                   owner of the bytes
//   Hello   {magic, token[16]}          ──►  checks the token (the descriptor's secret)
//                                       ◄──  HelloAck {magic, status}
//   Request {pull id, n, 0} + n Ranges  ──►  checks every range against its region
//                                       ◄──  Reply {pull id, status, payload bytes} + payload
//   Request ...                         ──►  (requests are answered in order, one at a time)
//
// The payload is the ranges' bytes back to back, in request order, read by the puller straight
// into its own region (a scatter read); a refused request has no payload and leaves the
// connection usable. Anything else that does not parse closes the connection.
//
// Thread-safety: pure functions over caller-owned bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace troupe::kv_transfer::tcp_wire {

inline constexpr uint32_t kMagic = 0x31564B54;  // "TKV1" read little-endian
inline constexpr size_t kTokenBytes = 16;
// A request may name at most this many ranges after coalescing: a sequence's blocks × layers ×
// K/V planes (128k tokens of a 64-layer model in 16-token blocks is ~1M); more is a bug or abuse.
inline constexpr uint32_t kMaxRanges = 1u << 21;

inline constexpr size_t kHelloBytes = 4 + kTokenBytes;
inline constexpr size_t kHelloAckBytes = 8;
inline constexpr size_t kRequestHeaderBytes = 16;
inline constexpr size_t kRangeBytes = 16;
inline constexpr size_t kReplyHeaderBytes = 24;

using Token = std::array<uint8_t, kTokenBytes>;

enum class AckStatus : uint32_t { kOk = 0, kWrongToken = 1 };
enum class ReplyStatus : uint32_t { kOk = 0, kOutOfRange = 1 };

struct RequestHeader {
  uint64_t pull_id = 0;
  uint32_t num_ranges = 0;
};

struct Range {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct ReplyHeader {
  uint64_t pull_id = 0;
  ReplyStatus status = ReplyStatus::kOk;
  uint64_t payload_bytes = 0;
};

// ---------------------------------------------------------------------------------------------
// Little-endian integers, byte by byte: the same bytes on every host.

inline void put_u32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
inline void put_u64(uint8_t* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
inline uint32_t get_u32(const uint8_t* in) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(in[i]) << (8 * i);
  return value;
}
inline uint64_t get_u64(const uint8_t* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

// ---------------------------------------------------------------------------------------------
// Frames

inline void encode_hello(const Token& token, std::span<uint8_t, kHelloBytes> out) {
  put_u32(out.data(), kMagic);
  for (size_t i = 0; i < kTokenBytes; ++i) out[4 + i] = token[i];
}

// Whether `in` is a hello carrying `token`. Compares every byte whatever the first mismatch, so
// the time taken says nothing about how much of a guessed token was right.
inline bool hello_carries(std::span<const uint8_t, kHelloBytes> in, const Token& token) {
  uint8_t difference = get_u32(in.data()) == kMagic ? 0 : 1;
  for (size_t i = 0; i < kTokenBytes; ++i) difference |= in[4 + i] ^ token[i];
  return difference == 0;
}

inline void encode_hello_ack(AckStatus status, std::span<uint8_t, kHelloAckBytes> out) {
  put_u32(out.data(), kMagic);
  put_u32(out.data() + 4, static_cast<uint32_t>(status));
}

// nullopt: not an acknowledgement of this protocol.
inline std::optional<AckStatus> decode_hello_ack(std::span<const uint8_t, kHelloAckBytes> in) {
  if (get_u32(in.data()) != kMagic) return std::nullopt;
  const uint32_t status = get_u32(in.data() + 4);
  if (status > static_cast<uint32_t>(AckStatus::kWrongToken)) return std::nullopt;
  return static_cast<AckStatus>(status);
}

inline void encode_request_header(const RequestHeader& header,
                                  std::span<uint8_t, kRequestHeaderBytes> out) {
  put_u64(out.data(), header.pull_id);
  put_u32(out.data() + 8, header.num_ranges);
  put_u32(out.data() + 12, 0);
}

// nullopt: a nonzero reserved word, no range, or more than kMaxRanges (the connection closes).
inline std::optional<RequestHeader> decode_request_header(
    std::span<const uint8_t, kRequestHeaderBytes> in) {
  RequestHeader header{.pull_id = get_u64(in.data()), .num_ranges = get_u32(in.data() + 8)};
  if (get_u32(in.data() + 12) != 0 || header.num_ranges == 0 || header.num_ranges > kMaxRanges) {
    return std::nullopt;
  }
  return header;
}

inline void encode_range(const Range& range, std::span<uint8_t, kRangeBytes> out) {
  put_u64(out.data(), range.offset);
  put_u64(out.data() + 8, range.bytes);
}

inline Range decode_range(std::span<const uint8_t, kRangeBytes> in) {
  return {.offset = get_u64(in.data()), .bytes = get_u64(in.data() + 8)};
}

inline void encode_reply_header(const ReplyHeader& header,
                                std::span<uint8_t, kReplyHeaderBytes> out) {
  put_u64(out.data(), header.pull_id);
  put_u32(out.data() + 8, static_cast<uint32_t>(header.status));
  put_u32(out.data() + 12, 0);
  put_u64(out.data() + 16, header.payload_bytes);
}

// nullopt: an unknown status, a nonzero reserved word, or a refusal that carries a payload.
inline std::optional<ReplyHeader> decode_reply_header(
    std::span<const uint8_t, kReplyHeaderBytes> in) {
  const uint32_t status = get_u32(in.data() + 8);
  if (status > static_cast<uint32_t>(ReplyStatus::kOutOfRange) || get_u32(in.data() + 12) != 0) {
    return std::nullopt;
  }
  ReplyHeader header{.pull_id = get_u64(in.data()),
                     .status = static_cast<ReplyStatus>(status),
                     .payload_bytes = get_u64(in.data() + 16)};
  if (header.status != ReplyStatus::kOk && header.payload_bytes != 0) return std::nullopt;
  return header;
}

// The payload the ranges ask for, or nullopt when one falls outside [0, region_bytes) or the
// total overflows: the owner then answers kOutOfRange and reads nothing.
inline std::optional<uint64_t> payload_of(std::span<const Range> ranges, uint64_t region_bytes) {
  uint64_t total = 0;
  for (const Range& range : ranges) {
    if (range.bytes > region_bytes || range.offset > region_bytes - range.bytes) {
      return std::nullopt;
    }
    if (range.bytes > UINT64_MAX - total) return std::nullopt;
    total += range.bytes;
  }
  return total;
}

// "host:port" as a descriptor carries it (an IPv6 host in brackets), and back.
std::string format_endpoint(const std::string& host, uint16_t port);
struct Endpoint {
  std::string host;
  uint16_t port = 0;
};
std::optional<Endpoint> parse_endpoint(const std::string& text);

}  // namespace troupe::kv_transfer::tcp_wire
