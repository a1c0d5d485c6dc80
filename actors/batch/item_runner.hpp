// What the batch actor asks of the API layer: how to check an input line and run one item. The
// actor (actors/batch/batch_actor.hpp) knows batches, storage and pacing, not OpenAI's request
// shapes or the engine; net/batch_item_runner.hpp implements this with the same decoders and
// sinks as /v1/batch.
//
// Thread-safety: check_line() and expired_line() are called on the batch actor's thread;
// start() and cancel() too; the `done` callback may run on any thread, exactly once per start().
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/batch/batch_store.hpp"

namespace troupe::batch {

// How an item ended.
//   kSucceeded  answered 200: its line goes to the output file
//   kFailed     answered with an error (a bad body, a prompt too long): the error file
//   kCancelled  the engine cancelled it (the batch is being cancelled or expired): no line
//   kRetry      the engine could not take it now (queue full, draining): run it again later
enum class ItemEnd : uint8_t { kSucceeded, kFailed, kCancelled, kRetry };

struct ItemResult {
  ItemEnd end = ItemEnd::kFailed;
  std::string line;  // the output line (no newline) for kSucceeded and kFailed
};

// Why an input line makes the whole file invalid (OpenAI fails the batch with these).
struct LineProblem {
  std::string code;
  std::string message;
  std::string param;
};

// One entry of a failed batch's `errors` (OpenAI's {code, message, param, line}).
struct BatchError {
  std::string code;
  std::string message;
  std::string param;
  std::optional<int64_t> line;  // 1-based line of the input file
};

class ItemRunner {
 public:
  virtual ~ItemRunner() = default;
  // The line's custom_id, or why the file is not a batch for `endpoint` (not JSON, no
  // custom_id, a url other than the endpoint, no body object). A body the endpoint refuses is
  // not a file problem: that item is answered with its error when it runs.
  virtual std::variant<std::string, LineProblem> check_line(std::string_view line,
                                                            std::string_view endpoint) = 0;
  // Starts item `index` (its input `line`) of `batch`; `done` gets its result, exactly once.
  // Returns a handle for cancel().
  virtual uint64_t start(const BatchRecord& batch, int64_t index, std::string_view line,
                         std::function<void(ItemResult)> done) = 0;
  // Cancels a started item (its `done` then reports kCancelled unless it had already ended).
  virtual void cancel(uint64_t handle) = 0;
  // The error-file line of an item the completion window left unrun (OpenAI's batch_expired).
  virtual std::string expired_line(std::string_view custom_id) = 0;
  // A failed batch's `errors.data`, as the JSON array the batch object shows.
  virtual std::string errors_json(const std::vector<BatchError>& errors) = 0;
};

}  // namespace troupe::batch
