// Reads tool calls back out of generated text (issue 19), incrementally: the text of each step
// goes in, content text and call pieces come out, so a stream can send `delta.tool_calls` as the
// model writes them. The whole-text form (parse_tool_calls) is the same machine fed once.
//
//   Hermes      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//   Llama 3     {"name": "f", "parameters": {...}}   (also "arguments"; an optional
//               <|python_tag|> before it; calls separated by "; ")
//
// States:  text ──trigger──► header ──`{"name": "f", "arguments": `──► arguments ──value done──►
//          tail ──`}` (+ "</tool_call>")──► text
// - text: content comes out, except a suffix that could be the start of a trigger and a run of
//   whitespace (held until non-space text follows; whitespace next to a call is dropped, so
//   "\n" between two calls is no content).
// - header: held until the name and the arguments key are read; kCallBegin then carries the name.
// - arguments: the JSON value (an object) comes out as it arrives, fragment by fragment
//   (kArguments), its end found by bracket depth outside strings.
// A call that does not have this shape (e.g. keys in another order, arguments not an object) is
// malformed: its text comes out as content where nothing of it was sent yet, and malformed()
// turns true. parse_tool_calls() then gives the whole text as content and no calls, as vLLM
// answers a model output it cannot parse. Output ending inside a call (max_tokens) is not
// malformed but truncated(): the calls before it stand, a call whose name was read stays a call
// with the arguments written so far (what a stream has already sent, and what OpenAI answers
// with finish_reason "length"), and a call cut before its name is content — the same answer
// streamed and whole.
//
// Thread-safety: a ToolCallStreamParser is one choice's state, one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tool_types.hpp"

namespace troupe::model {

struct ToolCallEvent {
  enum class Kind : uint8_t {
    kContent,    // text: content
    kCallBegin,  // text: the function name of call `call_index`
    kArguments,  // text: the next piece of call `call_index`'s arguments JSON
  };
  Kind kind = Kind::kContent;
  int32_t call_index = 0;
  std::string text;
};

class ToolCallStreamParser {
 public:
  explicit ToolCallStreamParser(ToolCallFormat format);

  // Appends the events of `text` (the next piece of the output) to `out`.
  void feed(std::string_view text, std::vector<ToolCallEvent>& out);
  // The output ended: held text comes out as content.
  void finish(std::vector<ToolCallEvent>& out);

  int32_t num_calls() const { return num_calls_; }
  bool malformed() const { return malformed_; }
  // finish() came inside a call (the output was cut off).
  bool truncated() const { return truncated_; }

 private:
  enum class State : uint8_t { kText, kHeader, kArguments, kTail };
  struct Trigger {
    std::string_view text;
    bool consumed;  // false: the call's own text starts with it (Llama 3's `{"name"`)
  };

  void run(std::vector<ToolCallEvent>& out);
  bool step_text(std::vector<ToolCallEvent>& out);
  bool step_header(std::vector<ToolCallEvent>& out);
  bool step_arguments(std::vector<ToolCallEvent>& out);
  bool step_tail(std::vector<ToolCallEvent>& out);
  void emit_content(std::string_view text, std::vector<ToolCallEvent>& out);
  void fail_call(std::vector<ToolCallEvent>& out);

  ToolCallFormat format_;
  std::vector<Trigger> triggers_;
  std::vector<std::string_view> argument_keys_;
  std::string_view end_marker_;
  State state_ = State::kText;
  std::string pending_;        // text not yet turned into events
  std::string held_space_;     // kText: whitespace waiting for non-space text
  std::string call_text_;      // kHeader: the trigger text consumed (for the malformed path)
  bool after_call_ = false;    // kText: directly after a call (separators are dropped)
  int32_t depth_ = 0;          // kArguments: bracket depth
  bool in_string_ = false;
  bool escaped_ = false;
  int32_t num_calls_ = 0;
  bool malformed_ = false;
  bool truncated_ = false;
};

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text as the model wrote it
};

struct ParsedToolOutput {
  std::string content;  // the text outside the calls (all of it when there are none)
  std::vector<ParsedToolCall> calls;
};

// The whole output at once. A malformed call anywhere: no calls, the text as content.
ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text);

}  // namespace troupe::model
