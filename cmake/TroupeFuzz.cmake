# libFuzzer builds (issue 14). With TROUPE_FUZZ=ON and clang, every troupe library is compiled
# with libFuzzer's coverage instrumentation plus ASan and UBSan, and tests/fuzz adds one
# harness per parser of untrusted input. scripts/fuzz configures build-fuzz/ this way and builds
# only the harnesses (and the libraries they link), never the server's Beast coroutine TUs.
set(TROUPE_FUZZ_ENABLED OFF)
if(TROUPE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(WARNING "TROUPE_FUZZ needs clang's libFuzzer (configure with CC=clang-16 "
                    "CXX=clang++-16, or run scripts/fuzz); the fuzz harnesses are skipped")
  elseif(NOT TROUPE_SANITIZE STREQUAL "")
    message(FATAL_ERROR "TROUPE_FUZZ brings its own sanitizers; leave TROUPE_SANITIZE empty")
  else()
    set(TROUPE_FUZZ_ENABLED ON)
    # Quoted: the genex holds a list, which must expand to several options.
    add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=undefined;-fno-omit-frame-pointer>")
    # The harnesses add -fsanitize=fuzzer (libFuzzer's main) themselves.
    add_link_options(-fsanitize=address,undefined)
    message(STATUS "troupe: libFuzzer harnesses ON (tests/fuzz)")
  endif()
endif()
