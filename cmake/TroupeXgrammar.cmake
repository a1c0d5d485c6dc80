# xgrammar (structured output, issue 19), built from the PyPI sdist that scripts/setup unpacks
# into .cache/xgrammar-<version>/ (the version and checksum are pinned in cmake/xgrammar.pin).
#
# TROUPE_XGRAMMAR=AUTO (the default) builds it whenever those sources exist, checked at every
# configure (so running scripts/setup after a first configure turns it on); without them the
# grammar library and its tests are left out and everything else builds. ON without the sources
# is an error that says how to get them; OFF leaves it out.
#
# We declare the static `xgrammar` target here from the sdist's sources instead of
# add_subdirectory() on its CMakeLists.txt, for three reasons found in 0.2.9:
#   - its cmake/config.cmake sets XGRAMMAR_BUILD_PYTHON_BINDINGS ON as a plain variable before
#     option() runs, so no -D or cache value can turn the bindings (TVM-FFI, not installed) off;
#   - its CMAKE_CXX_FLAGS prepend -Werror and -flto=auto (LTO objects in a static library make
#     every test executable's link an LTO link, and a newer compiler's warning breaks the build);
#   - it prepends -O3 even to our sanitizer builds' flags.
# The target below is the same as upstream's `xgrammar` target: every cpp/**/*.cc except the
# Python bindings (cpp/tvm_ffi/), public include/, picojson and dlpack as SYSTEM includes,
# C++17, XGRAMMAR_ENABLE_CPPTRACE=0 and XGRAMMAR_ENABLE_INTERNAL_CHECK=0 -- plus our logging
# hooks (XGRAMMAR_LOG_CUSTOMIZE, see below). It is compiled with our build type, our ccache
# launcher and our sanitizer flags, and with its warnings off: they are not ours to fix, and they
# never reach our code because its headers come in as SYSTEM includes. A build may instead link
# the library another build compiled (TROUPE_XGRAMMAR_PREBUILT, below).
file(STRINGS "${PROJECT_SOURCE_DIR}/cmake/xgrammar.pin" _xgr_version_line
     REGEX "^XGRAMMAR_VERSION=")
string(REGEX REPLACE "^XGRAMMAR_VERSION=" "" TROUPE_XGRAMMAR_VERSION "${_xgr_version_line}")
set(TROUPE_XGRAMMAR_SOURCE_DIR "${PROJECT_SOURCE_DIR}/.cache/xgrammar-${TROUPE_XGRAMMAR_VERSION}"
    CACHE PATH "Unpacked xgrammar sdist (scripts/setup puts it here)")

set(TROUPE_XGRAMMAR "AUTO" CACHE STRING
    "Structured output on xgrammar: AUTO (when scripts/setup has unpacked its sources), ON, OFF")
set_property(CACHE TROUPE_XGRAMMAR PROPERTY STRINGS AUTO ON OFF)
# A libxgrammar.a another build of this checkout compiled, to link instead of compiling the
# sources again. The ASan build takes the Release build's (scripts/test): xgrammar is not our
# code to check, ASan still watches every allocation it makes and our calls into it, and its
# 31 sources cost ~5 minutes of the two cores under ASan.
set(TROUPE_XGRAMMAR_PREBUILT "" CACHE FILEPATH
    "Link this prebuilt libxgrammar.a (same sources, version and checkout) instead of compiling")

set(TROUPE_HAVE_XGRAMMAR OFF)
set(_xgr_sources_there OFF)
if(EXISTS "${TROUPE_XGRAMMAR_SOURCE_DIR}/include/xgrammar/xgrammar.h")
  set(_xgr_sources_there ON)
endif()
if(TROUPE_XGRAMMAR STREQUAL "ON" AND NOT _xgr_sources_there)
  message(FATAL_ERROR "TROUPE_XGRAMMAR is ON but ${TROUPE_XGRAMMAR_SOURCE_DIR} holds no xgrammar "
                      "sources: run scripts/setup, or configure with -DTROUPE_XGRAMMAR=OFF")
endif()
# Include folders and definitions of the target, whichever way it comes.
set(_xgr_includes
  "${TROUPE_XGRAMMAR_SOURCE_DIR}/include"
  "${TROUPE_XGRAMMAR_SOURCE_DIR}/3rdparty/picojson"
  "${TROUPE_XGRAMMAR_SOURCE_DIR}/3rdparty/dlpack/include")
set(_xgr_definitions XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
if(_xgr_sources_there AND NOT TROUPE_XGRAMMAR STREQUAL "OFF" AND TROUPE_XGRAMMAR_PREBUILT)
  # The library another build of this checkout compiled, linked as it is (see above).
  if(NOT EXISTS "${TROUPE_XGRAMMAR_PREBUILT}")
    message(FATAL_ERROR "TROUPE_XGRAMMAR_PREBUILT: no file ${TROUPE_XGRAMMAR_PREBUILT}")
  endif()
  add_library(xgrammar STATIC IMPORTED GLOBAL)
  set_target_properties(xgrammar PROPERTIES IMPORTED_LOCATION "${TROUPE_XGRAMMAR_PREBUILT}")
  target_include_directories(xgrammar SYSTEM INTERFACE ${_xgr_includes})
  target_compile_definitions(xgrammar INTERFACE ${_xgr_definitions})
  target_link_libraries(xgrammar INTERFACE Threads::Threads spdlog::spdlog)
  set(TROUPE_HAVE_XGRAMMAR ON)
  message(STATUS "troupe: xgrammar ${TROUPE_XGRAMMAR_VERSION} prebuilt: ${TROUPE_XGRAMMAR_PREBUILT}")
elseif(_xgr_sources_there AND NOT TROUPE_XGRAMMAR STREQUAL "OFF")
  file(GLOB_RECURSE _xgr_sources CONFIGURE_DEPENDS "${TROUPE_XGRAMMAR_SOURCE_DIR}/cpp/*.cc")
  list(FILTER _xgr_sources EXCLUDE REGEX "/cpp/tvm_ffi/[^/]*\\.cc$")
  add_library(xgrammar STATIC ${_xgr_sources})
  set_target_properties(xgrammar PROPERTIES
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    CXX_EXTENSIONS OFF
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(xgrammar SYSTEM PUBLIC ${_xgr_includes})
  target_compile_definitions(xgrammar PUBLIC ${_xgr_definitions})
  target_compile_options(xgrammar PRIVATE -w)
  troupe_compute_code(xgrammar)
  target_link_libraries(xgrammar PUBLIC Threads::Threads)
  # Our logging hooks (model/grammar/xgrammar_logging.cpp): errors become clean messages for the
  # client, warnings go to spdlog rather than std::cerr. Part of the target, so the static
  # library resolves them itself whatever the link order.
  target_sources(xgrammar PRIVATE "${PROJECT_SOURCE_DIR}/model/grammar/xgrammar_logging.cpp")
  target_include_directories(xgrammar PRIVATE "${TROUPE_XGRAMMAR_SOURCE_DIR}/cpp")
  target_compile_definitions(xgrammar PRIVATE XGRAMMAR_LOG_CUSTOMIZE=1)
  target_link_libraries(xgrammar PRIVATE spdlog::spdlog)
  set(TROUPE_HAVE_XGRAMMAR ON)
  message(STATUS "troupe: xgrammar ${TROUPE_XGRAMMAR_VERSION} from ${TROUPE_XGRAMMAR_SOURCE_DIR}")
else()
  message(STATUS "troupe: xgrammar OFF (structured output is not built; run scripts/setup)")
endif()
