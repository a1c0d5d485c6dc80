// OpenAI's Files API over the durable file store (issue 40; actors/batch/file_store.hpp):
//   POST   /v1/files                multipart/form-data: `purpose` ("batch") and `file`
//   GET    /v1/files                ?purpose=&limit=&after=&order=   (newest first by default)
//   GET    /v1/files/{id}           the file object
//   GET    /v1/files/{id}/content   its bytes
//   DELETE /v1/files/{id}
// Shapes are OpenAI's, so `client.files.create/list/retrieve/content/delete` work unchanged. A
// file belongs to the API key that uploaded it (its name; every request is one owner when the
// server has no keys): any other key gets the 404 of a file that does not exist.
//
// Thread-safety: add_files_routes() before the server starts; the handlers run on io threads and
// hand the file I/O to the engine's tokenizer thread (never an io thread's work: a 100 MB upload
// written there would stall every connection on it).
#pragma once

#include <cstdint>
#include <memory>

#include "actors/batch/file_store.hpp"
#include "actors/engine/engine.hpp"
#include "net/router.hpp"

namespace troupe::net {

struct FilesConfig {
  uint64_t max_file_bytes = 200ull << 20;  // storage.max_file_bytes: a larger upload is a 413
};

void add_files_routes(Router& router, engine::Engine& engine,
                      std::shared_ptr<batch::FileStore> store, FilesConfig config);

}  // namespace troupe::net
