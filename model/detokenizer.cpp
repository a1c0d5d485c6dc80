// IncrementalDetokenizer (see detokenizer.hpp).
#include "model/detokenizer.hpp"

#include "model/unicode.hpp"

namespace troupe::model {

std::string IncrementalDetokenizer::push(int32_t token_id) {
  return push_bytes(tokenizer_.token_piece(token_id, render_special_));
}

std::string IncrementalDetokenizer::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const unicode::Utf8Decoded d = unicode::decode_strict(pending_, i);
    if (d.status == unicode::Utf8Status::kIncomplete) break;  // wait for the next token
    if (d.status == unicode::Utf8Status::kOk) {
      out.append(pending_, i, d.length);
    } else {
      unicode::append_utf8(out, unicode::kReplacementChar);
    }
    i += d.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace troupe::model
