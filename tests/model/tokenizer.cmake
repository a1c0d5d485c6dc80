# Tokenizer, detokenizer, chat template and Unicode tests (issue 4). The llama.cpp comparison
# reads tests/reference/smollm2_tokenize.json and needs models/SmolLM2-135M-Instruct.Q4_1.gguf
# (or TROUPE_TEST_MODEL); without the model those tests skip with a message.
troupe_add_test(NAME tokenizer_test
  SOURCES tokenizer_test.cpp detokenizer_test.cpp chat_template_test.cpp unicode_test.cpp
    tool_calling_test.cpp
  LIBS troupe_model simdjson::simdjson LABELS "unit;model")
