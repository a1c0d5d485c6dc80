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
  ${CMAKE_CURRENT_LIST_DIR}/json_string.cpp
)

# Tool calling (issue 19): the tool renderings of the chat templates, the tool-call grammars and
# the parser of generated calls. simdjson re-writes JSON texts the way the templates' `tojson` does.
target_sources(troupe_model PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/chat_template_tools.cpp
  ${CMAKE_CURRENT_LIST_DIR}/python_json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tool_calling.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tool_call_parser.cpp
)
target_link_libraries(troupe_model PRIVATE simdjson::simdjson)
