// The durable batches' items as OpenAI requests (issue 40): implements the batch actor's
// ItemRunner (actors/batch/item_runner.hpp) with /v1/batch's decoders and sinks
// (net/batch_codec.hpp, net/batch_item_sinks.hpp). Items run at the lowest priority, so the
// scheduler gives them only the capacity interactive users leave, and preempts them first.
//
// Thread-safety: as ItemRunner says; the item sinks run on the engine's ingress thread.
#pragma once

#include <memory>

#include "actors/batch/item_runner.hpp"
#include "net/openai_sink.hpp"

namespace troupe::net {

// Why `line` makes a batch input file invalid for `endpoint`, or its custom_id (what OpenAI
// checks while a batch is validating).
std::variant<std::string, batch::LineProblem> check_batch_input_line(std::string_view line,
                                                                    std::string_view endpoint);

class OpenAiItemRunner final : public batch::ItemRunner {
 public:
  explicit OpenAiItemRunner(std::shared_ptr<OpenAiContext> context) : context_(std::move(context)) {}

  std::variant<std::string, batch::LineProblem> check_line(std::string_view line,
                                                           std::string_view endpoint) override {
    return check_batch_input_line(line, endpoint);
  }
  uint64_t start(const batch::BatchRecord& batch, int64_t index, std::string_view line,
                 std::function<void(batch::ItemResult)> done) override;
  void cancel(uint64_t handle) override;
  std::string expired_line(std::string_view custom_id) override;
  std::string errors_json(const std::vector<batch::BatchError>& errors) override;

 private:
  std::shared_ptr<OpenAiContext> context_;
};

}  // namespace troupe::net
