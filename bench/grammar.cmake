# Structured output costs on SmolLM2's 49,152-token vocabulary (issue 19): compiling a JSON
# schema, filling a sequence's token bitmask per step, applying it to a logits row.
if(TROUPE_HAVE_XGRAMMAR)
  troupe_add_bench(NAME grammar_bench
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/grammar_bench.cpp
    LIBS troupe_grammar troupe_gpu)
endif()
