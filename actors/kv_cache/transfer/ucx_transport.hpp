// The UCX (UCP API) implementation of KvTransport, for host-memory KV arenas.
//
// One ucp_context and one ucp_worker per transport; the worker is created, progressed and
// destroyed by the transport's own progress thread and by nothing else (UCS_THREAD_MODE_SINGLE),
// so callers only enqueue commands and wake that thread. The thread runs for the transport's
// whole life, even with nothing of ours in flight: it also answers the reads peers ask of us.
//
// A pull is a request/reply exchange of UCP active messages, not an RMA get: the puller sends
// READ_REQUEST (the ranges it wants) and the owner of the bytes answers with READ_REPLY messages
// sent with ucp_am_send_nbx straight from its registered region, eager only, which the puller's
// handler copies into place (wire format and lifetimes: ucx_transport_internal.hpp).
// Why not ucp_get_nbx (what this transport did first): UCX 1.13's tcp has no RMA get, so UCX
// emulates a get with active messages that the OWNER's worker answers inside UCX
// (ucp_get_req_handler -> ucp_progress_get_reply, src/ucp/rma/rma_sw.c). When the puller's
// connection breaks while that reply is being sent (the decode process died or dropped the
// endpoint mid-pull), uct_tcp's send fails with UCS_ERR_ENDPOINT_TIMEOUT, ucp_progress_get_reply
// returns it, and ucp_request_try_send (ucp_request.inl:346) treats any error as fatal:
// "Fatal: unexpected error: Endpoint timeout", abort() of the prefill process. No configuration
// avoids it (the software get is the only get tcp has; UCX_PROTO_ENABLE=y uses the same reply
// path). A user's AM send, by contrast, completes with an error status (the eager bcopy/zcopy
// protocols complete the request instead of returning the error), so a dead puller costs the
// owner one failed send. Rendezvous is avoided on purpose: its control messages (RTR, ATS/ATP)
// go through ucp_proto_progress_am_single, which has the same fatal path.
// The region stays registered (ucp_mem_map) and its packed rkey stays in the descriptor: the
// replies are sent from registered memory, and the handshake keeps what a hardware-RMA path
// (rc/dc, where a get does not involve the owner's CPU and cannot hit this) or NIXL would need.
//
// Endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails its pulls instead of hanging
// them. With UCX 1.13 (Debian 12) that narrows the usable transports (seen with
// UCX_LOG_LEVEL=info, whose "ep_cfg" lines name each lane, and in tests/actors/
// kv_transfer_in_process_test.cpp and kv_transfer_cross_process_test.cpp):
//   - tcp: works (lo or eth0, UCX's default device choice).
//   - posix/sysv shared memory: refused for PEER mode ("no peer failure handler"); UCX_TLS=
//     posix,cma alone makes every connection fail with "Destination is unreachable". Tried and
//     rejected: UCX_MM_ERROR_HANDLING=y (UCX_POSIX_/SYSV_ERROR_HANDLING) with a 1 s
//     UCX_KEEPALIVE_INTERVAL makes posix,cma connect, pull and notice dead peers, but a peer
//     killed while writing into our receive FIFO leaves its slot claimed and never filled, and
//     we receive nothing over shared memory from then on: in the decode-death test, 4 of 130
//     runs (390 kills) left the prefill side deaf (no abort; later pulls timed out, for 60 s in
//     the one run that waited that long). tcp does not share that state between processes.
//   - cma: has no active messages, so posix,cma,tcp behaves exactly like tcp. (Were it used, note
//     that process_vm_readv needs ptrace rights over the peer: with kernel.yama.ptrace_scope=2,
//     our hosts, only root (CAP_SYS_PTRACE) has them.)
//   - UCX_PROTO_ENABLE=y (1.13's experimental protocols) aborts in ucp_ep_reqs_purge when an
//     endpoint with outstanding operations fails or is force-closed: leave it off.
//
// Thread-safety: make_ucx_transport() from any thread; the returned object as KvTransport says.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "actors/kv_cache/transfer/kv_transport.hpp"

namespace troupe::kv_transfer {

struct UcxTransportConfig {
  // UCX transport list ("tcp", "posix,cma"); empty: UCX_TLS from the environment, else UCX's own
  // choice. Applied to this transport's context only.
  std::string transports;
  // Longest sleep of the progress thread while a pull is in flight: bounds how late a timeout
  // is noticed (incoming traffic wakes the thread at once through the worker's event fd).
  std::chrono::milliseconds busy_poll_interval{5};
  // Longest sleep with nothing in flight; only keeps UCX's own timers (keepalive) ticking.
  std::chrono::milliseconds idle_poll_interval{100};
  // Largest READ_REPLY payload: a read bigger than this is answered in chunks of this size.
  // The default fits UCX 1.13 tcp's largest single zero-copy active message (64 KiB with our
  // headers): sent straight from the region, received into place with one copy. Bigger chunks
  // are fragmented and reassembled in a temporary buffer by UCX (one more copy); 8 KB ones (a
  // bcopy segment) cost a copy on the sending side. bench/kv_transfer_bench compares them.
  size_t reply_chunk_bytes = 65280;
  // How long the destructor waits for endpoints to close before destroying the worker anyway.
  std::chrono::milliseconds shutdown_timeout{5000};
};

// Registers [base, base + bytes) (existing host memory: the KV arena; it must outlive the
// transport) with ucp_mem_map and starts the progress thread. Returns nullptr and sets *error
// when UCX cannot be initialised; never throws for UCX failures.
// Why a UCX transport list cannot serve KV pulls (none of its transports reports a dead peer),
// or nullopt when it can; "" (UCX's own choice) and exclusions ("^...") are accepted.
std::optional<std::string> check_transport_list(std::string_view transports);

// Refuses (nullptr, *error set) a list check_transport_list() refuses.
std::unique_ptr<KvTransport> make_ucx_transport(void* base, size_t bytes,
                                                const UcxTransportConfig& config,
                                                std::string* error);

}  // namespace troupe::kv_transfer
