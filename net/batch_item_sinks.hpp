// One batch item in the engine: the sinks that collect its whole answer and turn it into a
// batch-output line, for both batch surfaces — /v1/batch (the answer streams back on the same
// connection: net/batch_runner.cpp) and the durable /v1/batches (the line goes to the batch
// actor's journal: net/batch_item_runner.cpp). Each item is a request of its own in the access
// log and the metrics.
//
// Thread-safety: submit_batch_item() and fail_batch_item() from any thread; the destination's
// complete() is called on the engine's ingress thread (or the caller's, for a failed item).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "actors/messages/priority.hpp"
#include "net/batch_codec.hpp"
#include "net/openai_sink.hpp"

namespace troupe::net {

// Where an item's output line goes.
class BatchItemDestination {
 public:
  virtual ~BatchItemDestination() = default;
  // True once nobody wants the answers any more (the client left): the engine stops the item.
  virtual bool abandoned() const = 0;
  // The item's end, exactly once. `status`: the answer's HTTP status (200: succeeded);
  // `cancelled`: it ended without an answer (abandoned, cancelled); `line` is written anyway.
  virtual void complete(size_t index, std::string line, int status, bool cancelled) = 0;
};

// Who sent the batch: the access log's route, the client key's parts.
struct BatchItemOrigin {
  std::string route;  // "/v1/batch" or "/v1/batches"
  std::string key_name;
  std::string authorization;
  std::string connection_label;
};

// Submits a valid item (`item.request` or `item.embedding` set) to the engine; returns its id.
engine::RequestId submit_batch_item(const std::shared_ptr<OpenAiContext>& context,
                                    std::shared_ptr<BatchItemDestination> destination, size_t index,
                                    BatchItem item, const BatchItemOrigin& origin,
                                    std::optional<Priority> priority = std::nullopt);

// An item that never reaches the engine (a bad line, a body the endpoint refuses): its record
// and its error line.
void fail_batch_item(const OpenAiContext& context, BatchItemDestination& destination, size_t index,
                     const BatchItem& item, const BatchItemOrigin& origin);

}  // namespace troupe::net
