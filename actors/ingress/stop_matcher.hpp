// StopMatcher: finds a request's stop strings in streamed text without ever emitting text that a
// stop string might still claim. Text that ends with a proper prefix of some stop string is held
// back until the next piece decides it (OpenAI semantics: the stop string itself is not returned).
//
//   push("Hello wor")  -> "Hello wor"      (stop = "STOP": no suffix is a prefix of it)
//   push("ld ST")      -> "ld "            ("ST" might start "STOP": held)
//   push("OP and")     -> stopped, ""      (the held "ST" + "OP" completes it)
//
// Thread-safety: one instance per request, used by one thread (the ingress actor).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace troupe::ingress {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop_strings, bool include_stop_string = false);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched; text ends before it (or after, if included)
  };

  // Feeds newly decoded text. Once stopped, further pushes return nothing.
  Result push(std::string_view text);
  // End of generation: everything still held is safe.
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t longest_partial_match() const;

  std::vector<std::string> stop_strings_;
  bool include_stop_string_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace troupe::ingress
