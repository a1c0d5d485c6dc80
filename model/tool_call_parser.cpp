// The incremental tool-call parser (see tool_call_parser.hpp).
#include "model/tool_call_parser.hpp"

#include <algorithm>

namespace troupe::model {
namespace {

constexpr size_t kMaxHeaderBytes = 4096;  // a call whose name is not read by then is malformed

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum class Scan : uint8_t { kOk, kNeedMore, kBad };

// Reads the call's opening `{"name": "<name>", "<arguments key>": ` from text; `pos` ends on
// the arguments' first character.
class HeaderScanner {
 public:
  HeaderScanner(std::string_view text, const std::vector<std::string_view>& argument_keys)
      : text_(text), keys_(argument_keys) {}

  Scan scan(std::string& name) {
    std::string key;
    Scan s;
    if ((s = expect('{')) != Scan::kOk) return s;
    if ((s = string(key)) != Scan::kOk) return s;
    if (key != "name") return Scan::kBad;
    if ((s = expect(':')) != Scan::kOk) return s;
    if ((s = string(name)) != Scan::kOk) return s;
    if (name.empty()) return Scan::kBad;
    if ((s = expect(',')) != Scan::kOk) return s;
    if ((s = string(key)) != Scan::kOk) return s;
    if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) return Scan::kBad;
    if ((s = expect(':')) != Scan::kOk) return s;
    skip_space();
    if (pos_ == text_.size()) return Scan::kNeedMore;
    return text_[pos_] == '{' ? Scan::kOk : Scan::kBad;
  }
  size_t pos() const { return pos_; }

 private:
  void skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }
  Scan expect(char c) {
    skip_space();
    if (pos_ == text_.size()) return Scan::kNeedMore;
    if (text_[pos_] != c) return Scan::kBad;
    ++pos_;
    return Scan::kOk;
  }
  // A JSON string; \" and \\ decoded, other escapes kept as written (names are plain ASCII).
  Scan string(std::string& out) {
    out.clear();
    skip_space();
    if (pos_ == text_.size()) return Scan::kNeedMore;
    if (text_[pos_] != '"') return Scan::kBad;
    for (size_t i = pos_ + 1; i < text_.size(); ++i) {
      const char c = text_[i];
      if (c == '"') {
        pos_ = i + 1;
        return Scan::kOk;
      }
      if (c == '\\') {
        if (i + 1 == text_.size()) return Scan::kNeedMore;
        const char next = text_[++i];
        if (next != '"' && next != '\\') out.push_back('\\');
        out.push_back(next);
      } else {
        out.push_back(c);
      }
    }
    return Scan::kNeedMore;
  }

  std::string_view text_;
  const std::vector<std::string_view>& keys_;
  size_t pos_ = 0;
};

}  // namespace

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format) : format_(format) {
  if (format == ToolCallFormat::kLlama3Json) {
    triggers_ = {{"<|python_tag|>", true}, {"{\"name\"", false}};
    argument_keys_ = {"parameters", "arguments"};
  } else {
    triggers_ = {{"<tool_call>", true}};
    argument_keys_ = {"arguments"};
    end_marker_ = "</tool_call>";
  }
}

void ToolCallStreamParser::feed(std::string_view text, std::vector<ToolCallEvent>& out) {
  pending_.append(text);
  run(out);
}

void ToolCallStreamParser::run(std::vector<ToolCallEvent>& out) {
  for (;;) {
    bool moved = false;
    switch (state_) {
      case State::kText: moved = step_text(out); break;
      case State::kHeader: moved = step_header(out); break;
      case State::kArguments: moved = step_arguments(out); break;
      case State::kTail: moved = step_tail(out); break;
    }
    if (!moved) return;
  }
}

void ToolCallStreamParser::emit_content(std::string_view text, std::vector<ToolCallEvent>& out) {
  if (after_call_) {
    // Separators between calls ("\n", Llama 3's "; ") are no content.
    size_t skip = 0;
    while (skip < text.size() && (is_space(text[skip]) ||
                                  (format_ == ToolCallFormat::kLlama3Json && text[skip] == ';'))) {
      ++skip;
    }
    text.remove_prefix(skip);
    if (text.empty()) return;
    after_call_ = false;
  }
  size_t body_end = text.size();
  while (body_end > 0 && is_space(text[body_end - 1])) --body_end;
  if (body_end == 0) {
    held_space_.append(text);
    return;
  }
  std::string content = std::move(held_space_);
  held_space_.clear();
  content.append(text.substr(0, body_end));
  held_space_.assign(text.substr(body_end));
  if (!out.empty() && out.back().kind == ToolCallEvent::Kind::kContent) {
    out.back().text += content;
  } else {
    out.push_back({ToolCallEvent::Kind::kContent, 0, std::move(content)});
  }
}

bool ToolCallStreamParser::step_text(std::vector<ToolCallEvent>& out) {
  size_t best = std::string::npos;
  const Trigger* found = nullptr;
  for (const Trigger& t : triggers_) {
    const size_t at = pending_.find(t.text);
    if (at < best) {
      best = at;
      found = &t;
    }
  }
  if (found != nullptr) {
    emit_content(std::string_view(pending_).substr(0, best), out);
    held_space_.clear();  // whitespace before a call is no content
    after_call_ = false;
    const size_t consumed = found->consumed ? found->text.size() : 0;
    call_text_.assign(pending_, best, consumed);
    pending_.erase(0, best + consumed);
    state_ = State::kHeader;
    return true;
  }
  // Hold back a suffix that may grow into a trigger.
  size_t hold = 0;
  for (const Trigger& t : triggers_) {
    for (size_t n = std::min(t.text.size() - 1, pending_.size()); n > hold; --n) {
      if (std::string_view(pending_).substr(pending_.size() - n) == t.text.substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  emit_content(std::string_view(pending_).substr(0, pending_.size() - hold), out);
  pending_.erase(0, pending_.size() - hold);
  return false;
}

void ToolCallStreamParser::fail_call(std::vector<ToolCallEvent>& out) {
  malformed_ = true;
  // Nothing of this call was sent: its text is content. One character of it is consumed with
  // the trigger, so that a trigger the call starts with is not found again at the same place.
  std::string text = std::move(call_text_);
  call_text_.clear();
  if (!pending_.empty()) {
    text.push_back(pending_.front());
    pending_.erase(0, 1);
  }
  state_ = State::kText;
  emit_content(text, out);
}

bool ToolCallStreamParser::step_header(std::vector<ToolCallEvent>& out) {
  HeaderScanner scanner(pending_, argument_keys_);
  std::string name;
  const Scan result = scanner.scan(name);
  if (result == Scan::kNeedMore) {
    if (pending_.size() <= kMaxHeaderBytes) return false;
    fail_call(out);
    return true;
  }
  if (result == Scan::kBad) {
    fail_call(out);
    return true;
  }
  out.push_back({ToolCallEvent::Kind::kCallBegin, num_calls_, std::move(name)});
  ++num_calls_;
  call_text_.clear();
  pending_.erase(0, scanner.pos());
  state_ = State::kArguments;
  depth_ = 0;
  in_string_ = false;
  escaped_ = false;
  return true;
}

bool ToolCallStreamParser::step_arguments(std::vector<ToolCallEvent>& out) {
  size_t i = 0;
  bool done = false;
  for (; i < pending_.size() && !done; ++i) {
    const char c = pending_[i];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
    } else if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      done = --depth_ == 0;
    }
  }
  if (i > 0) {
    out.push_back({ToolCallEvent::Kind::kArguments, num_calls_ - 1, pending_.substr(0, i)});
    pending_.erase(0, i);
  }
  if (!done) return false;
  state_ = State::kTail;
  return true;
}

bool ToolCallStreamParser::step_tail(std::vector<ToolCallEvent>& out) {
  (void)out;
  size_t i = 0;
  while (i < pending_.size() && is_space(pending_[i])) ++i;
  if (i == pending_.size()) return false;
  bool ok = pending_[i] == '}';
  if (ok) {
    ++i;
    if (!end_marker_.empty()) {
      while (i < pending_.size() && is_space(pending_[i])) ++i;
      const std::string_view rest = std::string_view(pending_).substr(i);
      if (rest.size() < end_marker_.size()) {
        if (end_marker_.starts_with(rest)) return false;
        ok = false;
      } else {
        ok = rest.starts_with(end_marker_);
        if (ok) i += end_marker_.size();
      }
    }
  }
  if (ok) {
    pending_.erase(0, i);
  } else {
    malformed_ = true;  // the call was sent; what follows is content
  }
  state_ = State::kText;
  after_call_ = true;
  return true;
}

void ToolCallStreamParser::finish(std::vector<ToolCallEvent>& out) {
  switch (state_) {
    case State::kText: {
      const size_t calls_before = static_cast<size_t>(num_calls_);
      emit_content(pending_, out);
      pending_.clear();
      if (calls_before == 0 && !held_space_.empty()) {
        std::string space = std::move(held_space_);
        held_space_.clear();
        if (!out.empty() && out.back().kind == ToolCallEvent::Kind::kContent) {
          out.back().text += space;
        } else {
          out.push_back({ToolCallEvent::Kind::kContent, 0, std::move(space)});
        }
      }
      break;
    }
    case State::kHeader: {
      truncated_ = true;  // cut before the call's name: nothing of it was sent, it is content
      std::string text = std::move(call_text_) + pending_;
      call_text_.clear();
      pending_.clear();
      state_ = State::kText;
      emit_content(text, out);
      finish(out);
      return;
    }
    case State::kArguments:
    case State::kTail: truncated_ = true; break;  // cut off inside a call (max_tokens)
  }
  held_space_.clear();
}

ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text) {
  ToolCallStreamParser parser(format);
  std::vector<ToolCallEvent> events;
  parser.feed(text, events);
  parser.finish(events);
  ParsedToolOutput parsed;
  if (parser.malformed()) {
    parsed.content = std::string(text);
    return parsed;
  }
  for (ToolCallEvent& e : events) {
    switch (e.kind) {
      case ToolCallEvent::Kind::kContent: parsed.content += e.text; break;
      case ToolCallEvent::Kind::kCallBegin:
        parsed.calls.push_back({std::move(e.text), {}});
        break;
      case ToolCallEvent::Kind::kArguments: parsed.calls.back().arguments += e.text; break;
    }
  }
  return parsed;
}

}  // namespace troupe::model
