// The values a KV pull is described by (kv_cache/transfer/kv_transport.hpp has the transport
// itself): a pull's status, the descriptor a peer reads our registered memory with, and the
// segments it copies. In the message layer because they travel in the disaggregation metadata
// (disagg_types.hpp) and the kv-cache actor's messages.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace troupe::kv_transfer {

// Why a pull failed; callers choose their reaction by it (a closed set, switch exhaustively).
enum class StatusCode {
  kOk,
  kInvalidRequest,  // bad descriptor or a segment outside a region: a bug upstream, do not retry
  kPeerFailed,      // unreachable, died, restarted or forgotten: re-resolve the peer first
  kTimedOut,        // the pull did not finish within its timeout: the endpoint was dropped
  kShuttingDown,    // this transport is being destroyed
};

struct Status {
  StatusCode code = StatusCode::kOk;
  std::string error;  // empty when ok; otherwise a sentence for logs

  bool ok() const { return code == StatusCode::kOk; }
  static Status success() { return {}; }
  static Status failure(StatusCode code, std::string error) { return {code, std::move(error)}; }
};

// What a peer needs to read our registered memory. Binary blobs (worker address, packed rkey)
// are raw bytes in std::string; the JSON layer base64-encodes them.
// The field names are UCX's (and vLLM's NIXL metadata's); troupe's tcp transport fills them with
// its own values (tcp_transport.hpp): worker_address "host:port", rkey its 16-byte access token.
struct LocalDescriptor {
  std::string transport;       // "tcp" or "ucx"; a pull refuses a descriptor of another transport
  std::string worker_address;  // ucp_worker_get_address bytes, or tcp's "host:port"
  std::string rkey;            // ucp_rkey_pack bytes of the registered region, or tcp's token
  uint64_t base_address = 0;   // address of the registered region in the owner's process (ucx)
  uint64_t region_bytes = 0;

  bool operator==(const LocalDescriptor&) const = default;
};

// One contiguous copy; offsets are from the two region bases (peer's and ours).
struct Segment {
  uint64_t remote_offset = 0;
  uint64_t local_offset = 0;
  uint64_t bytes = 0;

  bool operator==(const Segment&) const = default;
};

// Checks every segment against both region sizes without overflowing; a pull is refused as a
// whole if any segment is out of range, so nothing is read for a request that is a bug.
inline Status check_segments_in_range(const std::vector<Segment>& segments,
                                      uint64_t remote_region_bytes, uint64_t local_region_bytes) {
  for (size_t index = 0; index < segments.size(); ++index) {
    const Segment& segment = segments[index];
    const bool remote_fits = segment.bytes <= remote_region_bytes &&
                             segment.remote_offset <= remote_region_bytes - segment.bytes;
    const bool local_fits = segment.bytes <= local_region_bytes &&
                            segment.local_offset <= local_region_bytes - segment.bytes;
    if (!remote_fits || !local_fits) {
      return Status::failure(
          StatusCode::kInvalidRequest,
          "segment " + std::to_string(index) + " (remote_offset " +
              std::to_string(segment.remote_offset) + ", local_offset " +
              std::to_string(segment.local_offset) + ", bytes " + std::to_string(segment.bytes) +
              ") is outside the " + (remote_fits ? "local" : "remote") + " region of " +
              std::to_string(remote_fits ? local_region_bytes : remote_region_bytes) + " bytes");
    }
  }
  return Status::success();
}

// Merges each segment into the one before it when both its remote and its local range continue
// that one's, and drops empty segments. Order is kept; only neighbours in the given order merge
// (a block table lists a sequence's blocks in order, so that is where contiguity shows up).
inline std::vector<Segment> coalesce_adjacent_segments(const std::vector<Segment>& segments) {
  std::vector<Segment> merged;
  merged.reserve(segments.size());
  for (const Segment& segment : segments) {
    if (segment.bytes == 0) continue;
    if (!merged.empty()) {
      Segment& last = merged.back();
      if (last.remote_offset + last.bytes == segment.remote_offset &&
          last.local_offset + last.bytes == segment.local_offset) {
        last.bytes += segment.bytes;
        continue;
      }
    }
    merged.push_back(segment);
  }
  return merged;
}

}  // namespace troupe::kv_transfer
