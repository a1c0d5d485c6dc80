# Warnings, sanitizers and the project-wide interface target every troupe library links.
add_library(troupe_options INTERFACE)
target_compile_options(troupe_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
target_include_directories(troupe_options INTERFACE "${PROJECT_SOURCE_DIR}")

if(TROUPE_SANITIZE STREQUAL "address")
  # ASan + UBSan: catches g++ 12.2's double destruction of co_await temporaries (TOOLCHAIN.md).
  # UBSan's null and alignment checks only where bytes are read as wider types -- the compute
  # code, troupe_compute_code() below turns them back on. Elsewhere (Beast, Asio, coroutines,
  # gtest) they instrument every pointer use: ws_session.cpp compiled in 117 s with them and 87 s
  # without; ASan still reports a null dereference, as a SEGV with its stack.
  set(_san -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
           -fno-sanitize=null,alignment)
elseif(TROUPE_SANITIZE STREQUAL "thread")
  set(_san -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT TROUPE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TROUPE_SANITIZE must be '', 'address' or 'thread', not '${TROUPE_SANITIZE}'")
endif()
if(_san)
  # Quoted: the genex holds a list, which must expand to several options.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_san}>")
  add_link_options(${_san})
endif()

# The linker: lld when present (scripts/setup installs it). It links an ASan test program in 2 s
# where GNU ld takes 5, and a build links some 70 of them (the mutants relink them again).
include(CheckLinkerFlag)
check_linker_flag(CXX "-fuse-ld=lld" TROUPE_HAVE_LLD)
if(TROUPE_HAVE_LLD)
  add_link_options(-fuse-ld=lld)
endif()

# Optimisation by what the code is, in the builds that check rather than serve.
#   TROUPE_CHECK_BUILD (ON for the sanitizer builds, scripts/build asan|tsan): their build type
#     leaves everything at -O0, the cheapest to compile (g++ 12.2's co_await miscompile is in
#     its front end, so ASan catches it at any level), and troupe_compute_code() raises the code
#     their tests spend their time in -- the model library, the kernels, xgrammar -- to -O1
#     (and, under ASan, keeps UBSan's null and alignment checks on in it).
#     A real-model test ran 15x slower under ASan at -O1 than in Release; at -O0 it would crawl.
#   Release: product code keeps the build type's -O3; test programs are compiled at -O1 (below,
#     troupe_add_test): they call the optimised libraries, their own code is not what runs hot,
#     and -O1 compiles them in 60% of the time.
option(TROUPE_CHECK_BUILD "Sanitizer build: -O0 except the compute code (troupe_compute_code)" OFF)
function(troupe_compute_code target)
  if(TROUPE_CHECK_BUILD)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
  endif()
  if(TROUPE_SANITIZE STREQUAL "address")
    # GGUF blocks, packed quantized rows and SIMD loads: misalignment here is a real bug.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=null,alignment>)
  endif()
endfunction()

# Test and bench programs: one call per executable keeps the folders' CMake files short.
# troupe_add_test(NAME n SOURCES a.cpp... LIBS l... LABELS l... [SLOW pattern...])
#   relative SOURCES are beside the .cmake file that calls it (tests/<area>/*.cmake fragments).
#   SLOW: gtest name patterns (Suite.Name, * wildcards) of tests that take minutes under a
#   sanitizer; they are labelled `slow` instead of `unit`, so the Release stage runs them and
#   the ASan stage (ctest -LE slow) does not.
function(troupe_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS;SLOW" ${ARGN})
  # Inside a function CMAKE_CURRENT_LIST_DIR is the caller's folder.
  list(TRANSFORM T_SOURCES PREPEND "${CMAKE_CURRENT_LIST_DIR}/" REGEX "^[^/]")
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE troupe_options troupe_test_support ${T_LIBS}
    GTest::gtest_main GTest::gmock)
  target_compile_options(${T_NAME} PRIVATE $<$<CONFIG:Release>:-O1>)
  # gtest_discover_tests flattens a property list on its way to the generated test file, so the
  # labels travel as one string ("unit:actors:runtime"); ctest -L / -LE take regexes, so
  # `ctest -L runtime` and `ctest -LE slow` still select by any one tag.
  string(REPLACE ";" ":" _labels "${T_LABELS}")
  if(NOT T_SLOW)
    gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${_labels}" DISCOVERY_TIMEOUT 60)
    return()
  endif()
  # Two discoveries of the one program, split by a gtest filter: the slow patterns, the rest.
  string(REPLACE ";" ":" _slow "${T_SLOW}")
  set(_slow_labels ${T_LABELS})
  list(REMOVE_ITEM _slow_labels unit)
  list(APPEND _slow_labels slow)
  string(REPLACE ";" ":" _slow_labels "${_slow_labels}")
  gtest_discover_tests(${T_NAME} TEST_FILTER "-${_slow}"
    PROPERTIES LABELS "${_labels}" DISCOVERY_TIMEOUT 60)
  gtest_discover_tests(${T_NAME} TEST_FILTER "${_slow}"
    PROPERTIES LABELS "${_slow_labels}" DISCOVERY_TIMEOUT 60)
endfunction()

# troupe_add_tests(LIBS l... LABELS l... TESTS n...): troupe_add_test for each name n, built
# from n.cpp beside the calling .cmake file, all with the same libraries and labels.
function(troupe_add_tests)
  cmake_parse_arguments(T "" "" "LIBS;LABELS;TESTS" ${ARGN})
  foreach(_name IN LISTS T_TESTS)
    troupe_add_test(NAME ${_name} SOURCES "${CMAKE_CURRENT_LIST_DIR}/${_name}.cpp"
      LIBS ${T_LIBS} LABELS ${T_LABELS})
  endforeach()
endfunction()

function(troupe_add_bench)
  cmake_parse_arguments(B "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${B_NAME} ${B_SOURCES})
  target_link_libraries(${B_NAME} PRIVATE troupe_options ${B_LIBS} benchmark::benchmark)
  target_compile_definitions(${B_NAME} PRIVATE TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endfunction()
