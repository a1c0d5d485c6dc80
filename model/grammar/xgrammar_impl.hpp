// Private to model/grammar/*.cpp: the xgrammar objects behind the wrappers, so no header that
// other folders include pulls in xgrammar (or DLPack).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "model/grammar/grammar_compiler.hpp"
#include "model/grammar/tokenizer_info.hpp"

namespace troupe::model::grammar {

struct TokenizerInfo::Impl {
  xgrammar::TokenizerInfo info{xgrammar::NullObj{}};
  std::vector<int32_t> stop_token_ids;
  std::vector<uint8_t> special;  // per id: 1 when xgrammar treats it as special
};

struct CompiledGrammar::Impl {
  xgrammar::CompiledGrammar compiled{xgrammar::NullObj{}};
  GrammarKind kind = GrammarKind::kJsonObject;
  TokenizerInfo tokenizer;
};

}  // namespace troupe::model::grammar
