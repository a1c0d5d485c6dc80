// Placeholder: filled in by the q8_0 KV kernel tests.
#include <gtest/gtest.h>

TEST(AttentionQ8, Placeholder) {}
