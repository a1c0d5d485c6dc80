# Structured output (issue 19). The bitmask layout and GrammarSpec need nothing but the standard
# library and are part of troupe_model; the compiler and matcher over xgrammar are a library of
# their own, troupe_grammar, built only when xgrammar's sources are there (TROUPE_HAVE_XGRAMMAR,
# cmake/TroupeXgrammar.cmake), so what does not constrain output never links xgrammar.
target_sources(troupe_model PRIVATE ${CMAKE_CURRENT_LIST_DIR}/grammar/grammar_spec.cpp)

if(TROUPE_HAVE_XGRAMMAR)
  add_library(troupe_grammar STATIC
    ${CMAKE_CURRENT_LIST_DIR}/grammar/tokenizer_info.cpp
    ${CMAKE_CURRENT_LIST_DIR}/grammar/grammar_compiler.cpp
    ${CMAKE_CURRENT_LIST_DIR}/grammar/grammar_matcher.cpp
  )
  target_link_libraries(troupe_grammar PUBLIC troupe_model PRIVATE xgrammar)
  target_compile_definitions(troupe_grammar PUBLIC TROUPE_HAVE_XGRAMMAR=1)
endif()
