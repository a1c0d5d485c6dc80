// Fuzzes chat-template rendering (model/chat_template.*) with hostile message contents and
// roles, for every built-in format, and the prompt encoding that follows it (encode_chat with
// the real SmolLM2 tokenizer, loaded once; without the model file the harness says so and exits
// cleanly). Also runs template detection on the raw input (a GGUF's tokenizer.chat_template is
// untrusted text too).
// Input: byte 0 (bits 0-3: the format; bit 4: add_generation_prompt; bit 5: SmolLM2's default
// system prompt), then messages separated by 0x1E; a message is "role\x1Fcontent", or just
// content, its role then alternating user/assistant.
// Properties: content spans are ordered, disjoint, inside the text, and each holds a role or a
// (possibly trimmed) content; no message can add or remove a special token: the prompt has as
// many control tokens as the same chat with every content and every role no template branches
// on replaced by "x"; the work stays within a CPU budget per byte.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat_template.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace troupe;

namespace {

std::optional<model::Tokenizer> g_tokenizer;

// Every role some template renders differently from an arbitrary one.
constexpr std::array<std::string_view, 5> kBranchingRoles = {"system", "user", "assistant", "tool",
                                                             "ipython"};

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\n\r\f\v") == std::string_view::npos;
}

std::vector<model::ChatMessage> parse_messages(std::string_view rest) {
  std::vector<model::ChatMessage> messages;
  while (true) {
    const size_t end = rest.find('\x1e');
    const std::string_view record = rest.substr(0, end);
    model::ChatMessage m;
    if (const size_t sep = record.find('\x1f'); sep != std::string_view::npos) {
      m.role = std::string(record.substr(0, sep));
      m.content = std::string(record.substr(sep + 1));
    } else {
      m.role = messages.size() % 2 == 0 ? "user" : "assistant";
      m.content = std::string(record);
    }
    messages.push_back(std::move(m));
    if (end == std::string_view::npos || messages.size() >= 64) break;
    rest.remove_prefix(end + 1);
  }
  return messages;
}

size_t count_control(const std::vector<int32_t>& ids) {
  size_t n = 0;
  for (const int32_t id : ids) n += g_tokenizer->is_control(id);
  return n;
}

void check_spans(const model::RenderedPrompt& prompt,
                 const std::vector<model::ChatMessage>& messages) {
  size_t previous_end = 0;
  for (const model::TextSpan& span : prompt.content_spans) {
    TROUPE_FUZZ_CHECK(span.begin < span.end && span.end <= prompt.text.size(), "span out of text");
    TROUPE_FUZZ_CHECK(span.begin >= previous_end, "spans overlap or are out of order");
    previous_end = span.end;
    const std::string_view inside = std::string_view(prompt.text).substr(span.begin,
                                                                         span.end - span.begin);
    const bool known = std::any_of(messages.begin(), messages.end(), [&](const auto& m) {
      return m.role == inside || std::string_view(m.content).find(inside) != std::string_view::npos;
    });
    TROUPE_FUZZ_CHECK(known, "a span holds text that is no role or content");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::filesystem::path path = fuzz::default_model_path();
  if (!std::filesystem::exists(path)) {
    std::printf("[chat_template_fuzz] %s is missing (run scripts/setup); nothing to fuzz\n",
                path.c_str());
    std::exit(0);
  }
  g_tokenizer.emplace(model::Tokenizer::from_gguf(model::GgufFile::open(path)));
  return 0;
}

namespace {

// One input, checked; LLVMFuzzerTestOneInput below also bounds its CPU time.
void fuzz_one(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  (void)model::detect_chat_template(all);

  const std::vector<std::string_view> names = model::ChatTemplate::names();
  const uint8_t selector = data[0];
  model::ChatTemplate chat_template = model::ChatTemplate::by_name(names[(selector & 15) % names.size()]);
  if ((selector & 32) && chat_template.kind() == model::ChatTemplateKind::kChatml) {
    chat_template = model::ChatTemplate(model::ChatTemplateKind::kChatml,
                                        std::string(model::kSmolLmDefaultSystemPrompt));
  }
  const bool add_generation_prompt = selector & 16;
  const std::vector<model::ChatMessage> messages = parse_messages(all.substr(1));

  const model::RenderedPrompt prompt = chat_template.render(messages, add_generation_prompt);
  check_spans(prompt, messages);
  const std::vector<int32_t> ids =
      model::encode_chat(*g_tokenizer, chat_template, messages, add_generation_prompt);
  for (const int32_t id : ids) {
    TROUPE_FUZZ_CHECK(id >= 0 && static_cast<size_t>(id) < g_tokenizer->vocab_size(), "id %d", id);
  }

  // The same chat with nothing a client could use to smuggle special tokens: the templates only
  // branch on the roles in kBranchingRoles (tool results are grouped into one turn by ChatML's
  // tool format, rendered as ipython turns by Llama 3's) and on a content being blank, all kept.
  std::vector<model::ChatMessage> tame = messages;
  for (model::ChatMessage& m : tame) {
    if (std::find(kBranchingRoles.begin(), kBranchingRoles.end(), m.role) == kBranchingRoles.end()) {
      m.role = "x";
    }
    if (!is_blank(m.content)) m.content = "x";
  }
  const std::vector<int32_t> tame_ids =
      model::encode_chat(*g_tokenizer, chat_template, tame, add_generation_prompt);
  TROUPE_FUZZ_CHECK(count_control(ids) == count_control(tame_ids),
                    "%zu control tokens with the client's text, %zu with tame text",
                    count_control(ids), count_control(tame_ids));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::within_cpu_budget("render + encode_chat", size, 80.0, 50.0, [&] { fuzz_one(data, size); });
  return 0;
}
