// A model's identity card, read from the GGUF header alone (no weights touched): what
// /v1/models, the admin `stats` command and the start-up log show.
//
// Thread-safety: a plain value; copy freely.
#pragma once

#include <cstdint>
#include <string>

#include "model/gguf.hpp"

namespace troupe::model {

struct ModelInfo {
  std::string id;            // served model name: config override, else derived from the file
  std::string name;          // general.name, when present
  std::string architecture;  // general.architecture
  uint64_t context_length = 0;
  uint64_t embedding_length = 0;
  uint64_t num_layers = 0;
  uint64_t num_heads = 0;
  uint64_t num_kv_heads = 0;
  uint64_t vocab_size = 0;
  uint64_t num_parameters = 0;  // sum of the elements of every tensor
  std::string quantization;     // "Q4_1": general.file_type, else the most common weight type
  uint64_t file_bytes = 0;
};

// Reads the card; throws GgufError when a required key is missing or mistyped (the message names
// it). `id_override` empty => the id is the file name without ".gguf" and a trailing
// quantization suffix ("SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct").
ModelInfo read_model_info(const GgufFile& file, const std::string& id_override = {});

}  // namespace troupe::model
