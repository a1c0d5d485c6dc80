# Tokenizer, detokenizer, chat templates and their Unicode tables (issue 4).
target_sources(troupe_model PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/unicode.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unicode_tables.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pretokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/spm_tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/detokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chat_template.cpp
)
