// troupe's own TCP implementation of KvTransport (the default; `disagg.kv_transport tcp`), for
// host-memory KV arenas.
//
// Why it exists beside UCX (ucx_transport.hpp): with Debian's UCX 1.13 over tcp, a peer that
// dies while UCX is connecting to it can abort the surviving server inside ucp_worker_progress
// (an assertion on a queued wireup reply; bench/RESULTS.md, "P/D under SIGKILL aimed at
// transfers"). A server must never die of a peer's death. Here a peer is a plain socket: its
// death is an error code on a read or a write, handled like any other, and nothing outside this
// file's control keeps state about it. UCX stays available for hosts whose RDMA hardware it can
// use (a one-sided get that does not involve the owner's CPU).
//
// The model is KvTransport's pull: the decode engine asks the owner for ranges of its region and
// reads the answer straight into its own region. The owner listens on one port; a puller opens
// one connection per owner and pipelines its pulls on it (answered in order). Wire format:
// tcp_wire.hpp. The descriptor a peer pulls with carries:
//   transport      "tcp"
//   worker_address "host:port" to connect to (an IPv6 host in brackets)
//   rkey           16 random bytes that a connection must present before it may read anything:
//                  the port may be reachable from elsewhere, the region holds users' KV
//   region_bytes   the size of the region (base_address is 0: offsets are all a peer names)
//
// One Asio io_context on the transport's own thread does everything: accepting, serving, pulls,
// timers. Callers only post to it. A pull's done runs on that thread after the last byte of its
// payload has landed, or after its socket was closed — which, with every read issued from that
// one thread, means no read of it can still be writing into our region.
//
// Failure handling:
//   - a peer that closes, resets or cannot be reached fails the pulls on its connection with
//     kPeerFailed; the next pull to that key connects afresh;
//   - a pull past its timeout closes its connection (the bytes still coming for it could not be
//     told from the next reply's): it fails with kTimedOut, the others on it with kPeerFailed;
//   - a reply that does not parse, or names another pull, closes the connection the same way;
//   - on the owner's side a puller that dies mid-answer is a failed write (counted in
//     serves_failed); connections that never say hello are closed after hello_timeout; TCP
//     keepalive ends connections to pullers whose host vanished without a reset.
//
// Thread-safety: make_tcp_transport() from any thread; the returned object as KvTransport says.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/kv_cache/transfer/kv_transport.hpp"

namespace troupe::kv_transfer {

struct TcpTransportConfig {
  // Where the transport listens for peers' reads: an address of this host ("0.0.0.0" or "::"
  // for all) and a port (0: one the kernel picks).
  std::string listen_host = "127.0.0.1";
  uint16_t port = 0;
  // The host peers are told to connect to; empty: listen_host, or 127.0.0.1 when that is a
  // wildcard. The port is always the one actually bound.
  std::string advertise_host;
  // A connection must say hello with the right token within this long, or it is closed.
  std::chrono::milliseconds hello_timeout{10000};
  // Accepted connections beyond this many are closed at once (each is a puller engine).
  size_t max_serve_connections = 1024;
};

// Listens on listen_host:port, answering reads of [base, base + bytes) (existing host memory:
// the KV arena; it must outlive the transport), and starts the transport's thread. Returns
// nullptr and sets *error when the region is empty or the address cannot be bound; never throws.
std::unique_ptr<KvTransport> make_tcp_transport(void* base, size_t bytes,
                                                const TcpTransportConfig& config,
                                                std::string* error);

}  // namespace troupe::kv_transfer
