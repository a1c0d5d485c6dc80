// OpenAI's Batch API over the durable batch store (issue 40; actors/batch/):
//   POST /v1/batches               {input_file_id, endpoint, completion_window, metadata?}
//   GET  /v1/batches               ?limit=&after=   (newest first)
//   GET  /v1/batches/{id}
//   POST /v1/batches/{id}/cancel
// Shapes are OpenAI's, so `client.batches.create/retrieve/list/cancel` work unchanged. The
// handlers only read and write the store and wake the batch actor, which does the work: a
// request never waits for a batch. A batch belongs to the API key that created it (its name);
// any other key gets the 404 of a batch that does not exist.
//
// Thread-safety: add_batches_routes() before the server starts; the handlers run on the engine's
// tokenizer thread (SQLite I/O), never on an io thread.
#pragma once

#include <memory>

#include "actors/batch/batch_actor.hpp"
#include "actors/batch/batch_store.hpp"
#include "actors/batch/file_store.hpp"
#include "actors/engine/engine.hpp"
#include "net/router.hpp"

namespace troupe::net {

void add_batches_routes(Router& router, engine::Engine& engine, std::shared_ptr<batch::FileStore> files,
                        std::shared_ptr<batch::BatchStore> batches,
                        std::shared_ptr<batch::BatchActor> actor);

// The completion window's length in seconds ("24h", or any "<N>h", "<N>m", "<N>s" from one
// second to seven days); nullopt when it is not one.
std::optional<int64_t> completion_window_seconds(std::string_view window);

}  // namespace troupe::net
