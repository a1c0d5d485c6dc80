# Warnings, sanitizers and the project-wide interface target every troupe library links.
add_library(troupe_options INTERFACE)
target_compile_options(troupe_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
target_include_directories(troupe_options INTERFACE "${PROJECT_SOURCE_DIR}")

if(TROUPE_SANITIZE STREQUAL "address")
  # ASan + UBSan: catches g++ 12.2's double destruction of co_await temporaries (TOOLCHAIN.md).
  set(_san -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
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

# Test and bench programs: one call per executable keeps the folders' CMake files short.
# troupe_add_test(NAME n SOURCES a.cpp... LIBS l... LABELS l...)
#   relative SOURCES are beside the .cmake file that calls it (tests/<area>/*.cmake fragments).
function(troupe_add_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  # Inside a function CMAKE_CURRENT_LIST_DIR is the caller's folder.
  list(TRANSFORM T_SOURCES PREPEND "${CMAKE_CURRENT_LIST_DIR}/" REGEX "^[^/]")
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE troupe_options ${T_LIBS} GTest::gtest_main GTest::gmock)
  target_compile_definitions(${T_NAME} PRIVATE
    TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  # gtest_discover_tests flattens a property list on its way to the generated test file, so the
  # labels travel as one string ("unit:actors:runtime"); ctest -L / -LE take regexes, so
  # `ctest -L runtime` and `ctest -LE slow` still select by any one tag.
  string(REPLACE ";" ":" _labels "${T_LABELS}")
  gtest_discover_tests(${T_NAME}
    PROPERTIES LABELS "${_labels}"
    DISCOVERY_TIMEOUT 60)
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
