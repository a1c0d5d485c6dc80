# Structured output in the engine (issue 19): 16 streams constrained vs unconstrained.
if(TARGET troupe_grammar)
  troupe_add_bench(NAME structured_output_bench
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/structured_output_bench.cpp
    LIBS troupe_actors)
endif()
