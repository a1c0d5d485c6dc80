// The UCX (UCP API) implementation of KvTransport, for host-memory KV arenas.
//
// One ucp_context and one ucp_worker per transport; the worker is created, progressed and
// destroyed by the transport's own progress thread and by nothing else (UCS_THREAD_MODE_SINGLE),
// so callers only enqueue commands and wake that thread. The thread runs for the transport's
// whole life, even with nothing of ours in flight: on transports without hardware RMA (tcp in
// UCX 1.13) a peer's get is emulated with active messages that OUR worker must answer.
//
// Endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails its pulls instead of hanging
// them. With UCX 1.13 (Debian 12) that narrows the usable transports (seen with
// UCX_LOG_LEVEL=info, whose "ep_cfg" lines name each lane, and in tests/actors/
// kv_transfer_test.cpp):
//   - tcp: works (lo or eth0, UCX's default device choice). tcp has no RMA get in 1.13, so a
//     get is emulated with active messages ("rma_am" lane) answered by the peer's worker.
//   - posix/sysv shared memory: refused for PEER mode ("no peer failure handler"); UCX_TLS=
//     posix,cma alone makes every connection fail with "Destination is unreachable".
//   - cma: never chosen for RMA lanes (it has only zcopy get/put, and 1.13's RMA lane selection
//     wants short/bcopy), so posix,cma,tcp behaves exactly like tcp. Were it chosen, note that
//     process_vm_readv needs ptrace rights over the peer: with kernel.yama.ptrace_scope=2 (our
//     hosts) only root (CAP_SYS_PTRACE) has them.
//   - UCX_PROTO_ENABLE=y (1.13's experimental protocols) aborts in ucp_ep_reqs_purge when an
//     endpoint with an outstanding get fails or is force-closed: leave it off.
// NOTE (UCX 1.13 bug, tcp only): the peer answers our emulated get in ucp_get_req_handler; if
// our connection has failed by then (we died, timed out or forgot it), its reply's send error is
// fatal inside UCX and the PEER process aborts. So a decode engine dying mid-pull can take its
// prefill engine down (seen about once per 100-200 kills in tests/actors/kv_transfer_test.cpp,
// DISABLED_ADecodeEngineDyingMidPull...). Hardware RMA (rc/dc) does not involve the peer's CPU
// and is not affected. Over tcp, a transfer built on UCP active messages should avoid it (a user
// send completes with an error status instead; untested).
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
  // How long the destructor waits for endpoints to close and outstanding reads to be purged
  // before destroying the worker anyway.
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
