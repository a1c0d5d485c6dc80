#include "model/model_info.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace troupe::model {
namespace {

std::string default_model_id(const GgufFile& file) {
  std::string stem = file.path().filename().string();
  if (stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  // Strip a quantization suffix such as ".Q4_1", "-Q4_K_M" or ".f16" when the rest is non-empty.
  const size_t cut = stem.find_last_of(".-");
  if (cut != std::string::npos && cut > 0) {
    std::string suffix = stem.substr(cut + 1);
    std::transform(suffix.begin(), suffix.end(), suffix.begin(), ::toupper);
    const bool looks_like_quant =
        !suffix.empty() && (suffix[0] == 'Q' || suffix[0] == 'F' || suffix == "BF16" ||
                            suffix.starts_with("IQ")) &&
        suffix.size() <= 7 && std::any_of(suffix.begin(), suffix.end(), ::isdigit);
    if (looks_like_quant) stem.resize(cut);
  }
  return stem;
}

// The most common type among 2-D weights, for files without general.file_type.
std::string majority_weight_type(const GgufFile& file) {
  std::map<std::string_view, uint64_t> bytes_by_type;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.num_dims >= 2) bytes_by_type[tensor_type_name(t.type)] += t.num_elements;
  }
  auto best = std::max_element(bytes_by_type.begin(), bytes_by_type.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
  return best == bytes_by_type.end() ? std::string("unknown") : std::string(best->first);
}

}  // namespace

ModelInfo read_model_info(const GgufFile& file, const std::string& id_override) {
  ModelInfo info;
  info.architecture = std::string(file.architecture());
  const std::string prefix = info.architecture + ".";
  info.id = id_override.empty() ? default_model_id(file) : id_override;
  info.name = std::string(file.get_string("general.name").value_or(""));
  info.context_length = file.require_uint(prefix + "context_length");
  info.embedding_length = file.require_uint(prefix + "embedding_length");
  info.num_layers = file.require_uint(prefix + "block_count");
  info.num_heads = file.require_uint(prefix + "attention.head_count");
  info.num_kv_heads = file.get_uint(prefix + "attention.head_count_kv").value_or(info.num_heads);
  if (auto v = file.get_uint(prefix + "vocab_size")) {
    info.vocab_size = *v;
  } else if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens")) {
    info.vocab_size = tokens->size();
  }
  for (const GgufTensorInfo& t : file.tensors()) info.num_parameters += t.num_elements;
  const auto file_type = file.get_uint("general.file_type");
  const auto named = file_type ? file_type_name(static_cast<uint32_t>(*file_type)) : std::nullopt;
  info.quantization = named ? std::string(*named) : majority_weight_type(file);
  info.file_bytes = file.file_size();
  return info;
}

}  // namespace troupe::model
