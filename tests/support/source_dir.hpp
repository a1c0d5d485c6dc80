// Where the test programs find the checkout's files (models/, tests/reference/, configs/).
// Any thread may call these.
#pragma once

#include <filesystem>

namespace troupe::test_support {

// The source tree the tests were configured from. One translation unit (source_dir.cpp) holds
// the path, so no other test object depends on where the checkout lies: the mutants' scratch
// copy (tests/mutants/run) then finds every other test object in ccache by its direct hash.
std::filesystem::path source_dir();

// The default model (scripts/setup places it), or $TROUPE_TEST_MODEL when set and non-empty.
// Tests that need it skip when the file is missing.
std::filesystem::path default_model_path();

}  // namespace troupe::test_support
