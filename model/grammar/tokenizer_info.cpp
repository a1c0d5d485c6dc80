// TokenizerInfo from our tokenizer (see tokenizer_info.hpp for the choice of VocabType::RAW).
#include "model/grammar/tokenizer_info.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/grammar/token_bitmask.hpp"
#include "model/grammar/xgrammar_impl.hpp"
#include "model/tokenizer.hpp"

namespace troupe::model::grammar {

TokenizerInfo TokenizerInfo::from_tokenizer(const Tokenizer& tokenizer,
                                            std::optional<size_t> vocab_size) {
  const size_t num_tokens = tokenizer.vocab_size();
  const size_t width = vocab_size.value_or(num_tokens);
  if (width < num_tokens) {
    throw std::runtime_error("grammar vocabulary: logits width " + std::to_string(width) +
                             " is smaller than the tokenizer's " + std::to_string(num_tokens) +
                             " tokens");
  }
  std::vector<std::string> bytes(num_tokens);
  for (size_t id = 0; id < num_tokens; ++id) {
    bytes[id] = tokenizer.token_piece(static_cast<int32_t>(id), /*render_special=*/false);
  }
  std::vector<int32_t> stop_ids = tokenizer.end_of_generation_ids();
  if (stop_ids.empty() && tokenizer.eos_id() >= 0) stop_ids.push_back(tokenizer.eos_id());
  if (stop_ids.empty()) {
    throw std::runtime_error("grammar vocabulary: the tokenizer has no end-of-generation token");
  }

  auto impl = std::make_shared<Impl>();
  try {
    impl->info =
        xgrammar::TokenizerInfo(bytes, xgrammar::VocabType::RAW, static_cast<int>(width), stop_ids,
                                /*add_prefix_space=*/false);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("grammar vocabulary: xgrammar refused it: ") + e.what());
  }
  impl->stop_token_ids = impl->info.GetStopTokenIds();
  impl->special.assign(width, 0);
  for (int32_t id : impl->info.GetSpecialTokenIds()) impl->special[id] = 1;
  return TokenizerInfo(std::move(impl));
}

size_t TokenizerInfo::vocab_size() const {
  return static_cast<size_t>(impl_->info.GetVocabSize());
}

size_t TokenizerInfo::bitmask_num_words() const {
  return grammar::bitmask_num_words(vocab_size());
}

const std::vector<int32_t>& TokenizerInfo::stop_token_ids() const {
  return impl_->stop_token_ids;
}

const std::vector<int32_t>& TokenizerInfo::special_token_ids() const {
  return impl_->info.GetSpecialTokenIds();
}

bool TokenizerInfo::is_special(int32_t token_id) const {
  return token_id < 0 || static_cast<size_t>(token_id) >= impl_->special.size() ||
         impl_->special[token_id] != 0;
}

std::string_view TokenizerInfo::token_bytes(int32_t token_id) const {
  const auto& decoded = impl_->info.GetDecodedVocab();
  if (is_special(token_id) || static_cast<size_t>(token_id) >= decoded.size()) return {};
  return decoded[token_id];
}

}  // namespace troupe::model::grammar
