# Structured output over xgrammar (issue 19): vocabulary, grammars, masks, matcher, cache. Only
# where xgrammar is built (scripts/setup fetches its sources); the SmolLM2 tests need
# models/SmolLM2-135M-Instruct.Q4_1.gguf (or TROUPE_TEST_MODEL) and skip without it.
if(TROUPE_HAVE_XGRAMMAR)
  troupe_add_test(NAME grammar_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/grammar_test.cpp
    LIBS troupe_grammar xgrammar
    LABELS "unit;model")
endif()
