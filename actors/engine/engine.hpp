// The Engine facade: the one door net/ (and tests, and `troupe generate`) uses to reach the
// actors. It hides the actor wiring (ingress, scheduler, kv-cache, gpu-worker) behind submit /
// cancel / stats / drain, so net never sees a channel or a policy object.
//
// Thread-safety: every member may be called from any thread (net's io threads, the admin
// socket, main). Sinks are called back on the ingress actor's thread (see RequestSink).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/messages/disagg_types.hpp"
#include "actors/messages/engine_types.hpp"

namespace troupe::model {
class Tokenizer;
}
namespace troupe::disagg {
class PeerClient;
}

namespace troupe::engine {

struct EngineConfig;

class Engine {
 public:
  // Loads the model named in `config` and starts the actors. Throws std::runtime_error (with a
  // message naming the file or key) when the model cannot be loaded — a start-up failure.
  // `peers` reaches other servers for disaggregated prefill/decode (net's HttpPeerClient); null
  // is fine for a combined server, and for a decode server only brought KV by its clients.
  static std::unique_ptr<Engine> start(const EngineConfig& config,
                                       std::shared_ptr<disagg::PeerClient> peers = nullptr);

  virtual ~Engine() = default;

  // Queues a generation. Returns its id at once; everything else — text deltas, the final
  // completion, or an error such as "queue full" — arrives through `sink`, in order, ending with
  // exactly one on_finish or on_error.
  virtual RequestId submit(GenerateRequest request, std::shared_ptr<RequestSink> sink) = 0;

  // Ends a request in any state (waiting, running, preempted); its sink gets on_finish with
  // finish_reason "cancelled" unless it already finished. Unknown ids are ignored. Idempotent.
  virtual void cancel(RequestId request_id) = 0;

  // A recent snapshot (published by the actors once per step; never blocks on them).
  virtual EngineStats stats() const = 0;
  virtual std::vector<RequestInfo> requests() const = 0;

  // Stops admitting (new submits get kDraining), lets in-flight requests finish, then returns
  // true; false when `deadline` passed first (the rest are cancelled with an error).
  virtual bool drain(std::chrono::milliseconds deadline) = 0;

  // Drops every cached, unreferenced prefix block. Returns the number of blocks freed.
  virtual int64_t flush_prefix_cache() = 0;

  // The model's tokenizer, for /tokenize and /detokenize (immutable, shareable).
  virtual const model::Tokenizer& tokenizer() const = 0;
  // Runs `work` on the engine's tokenizer thread, never on the caller's: net's /tokenize and
  // /detokenize must not tokenize megabytes on an io thread (issue 13). Jobs run one at a
  // time, apart from the threads that build generation prompts, so a huge /tokenize delays
  // only other /tokenize calls. `work` must not block on I/O.
  virtual void post_tokenizer_work(std::function<void()> work) = 0;
  virtual const ModelCard& model_card() const = 0;

  // Disaggregated prefill/decode. What GET /v1/kv/metadata serves (nullopt: this server moves
  // no KV), and POST /v1/kv/release: a decode server is done with a held request's KV (false
  // when no such lease exists, e.g. it expired). Defaults: a server that moves no KV.
  virtual std::optional<disagg::KvMetadata> kv_metadata() const { return std::nullopt; }
  virtual bool release_kv_lease(std::string_view remote_request_id) {
    (void)remote_request_id;
    return false;
  }
};

}  // namespace troupe::engine
