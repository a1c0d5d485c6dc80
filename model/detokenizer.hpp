// Incremental, UTF-8-safe detokenization for streaming: feed generated token ids one at a time
// and get back only text made of complete, valid UTF-8 characters. A token that ends in the
// middle of a character (byte-level BPE splits emoji and CJK across tokens) is held back until
// the character completes; bytes that can never form a valid character become U+FFFD as soon as
// that is certain, and whatever is still held at the end becomes U+FFFD on flush().
//
// Thread-safety: one instance per sequence, used by one thread at a time (the ingress actor).
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer.hpp"

namespace troupe::model {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool render_special = false)
      : tokenizer_(std::move(tokenizer)), render_special_(render_special) {}

  // Appends the token's bytes and returns the text that became complete (possibly empty).
  std::string push(int32_t token_id);
  // Appends raw bytes (e.g. several tokens' pieces) and returns the completed text.
  std::string push_bytes(std::string_view bytes);
  // Ends the stream: returns the held-back bytes as U+FFFD (one per ill-formed subsequence).
  std::string flush();

  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool render_special_;
  std::string pending_;  // bytes not yet returned: at most one incomplete character
};

}  // namespace troupe::model
