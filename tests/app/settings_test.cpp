// The settings list (app/settings.hpp) is the one source of every setting: these tests fail when
// a setting exists in one place but not the others (the README's table, configs/default.json,
// the flags, --help) or when two of its values disagree.
#include "app/settings.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "app/cli.hpp"
#include "app/config.hpp"
#include "app/serve.hpp"
#include "gpu/backend_factory.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#if TROUPE_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif
#include "tests/support/source_dir.hpp"

namespace troupe::app {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::filesystem::path kSource = ::troupe::test_support::source_dir();

TEST(Settings, KeysAndFlagsAreUniqueAndEverySettingSaysWhatItIs) {
  std::set<std::string> keys, flags;
  for (const Setting& s : settings()) {
    EXPECT_FALSE(s.help.empty()) << s.key << s.flag;
    EXPECT_FALSE(s.value.empty()) << s.key << s.flag;
    EXPECT_TRUE(s.read_json || s.key.empty()) << s.key;
    EXPECT_TRUE(s.show) << s.key << s.flag;
    EXPECT_FALSE(s.key.empty() && s.flag.empty()) << "a setting nobody can set";
    if (!s.key.empty()) {
      EXPECT_TRUE(keys.insert(s.key).second) << "key twice: " << s.key;
    }
    if (!s.flag.empty()) {
      EXPECT_TRUE(flags.insert(s.flag).second) << "flag twice: " << s.flag;
    }
    if (s.repeatable) {
      EXPECT_TRUE(s.clear) << s.key << s.flag;
    }
  }
  EXPECT_GE(keys.size(), 75u);  // 78 when written: a guard against losing part of the list
}

// The README's table is generated (`troupe help settings`); this fails when they drift apart.
TEST(Settings, TheReadmeTableIsTheList) {
  const std::string readme = read_file(kSource / "README.md");
  const std::string begin = "<!-- settings table: troupe help settings -->\n";
  const std::string end = "<!-- end of settings table -->";
  const size_t from = readme.find(begin);
  const size_t to = readme.find(end);
  ASSERT_NE(from, std::string::npos) << "README.md has no settings table markers";
  ASSERT_NE(to, std::string::npos);
  EXPECT_EQ(readme.substr(from + begin.size(), to - from - begin.size()), settings_table())
      << "regenerate it: build/bin/troupe help settings";
}

// configs/default.json names every key with its built-in default: `./scripts/serve` (which
// loads it) and `troupe serve` without --config run the same server.
TEST(Settings, TheDefaultPresetNamesEveryKeyWithItsDefault) {
  const std::filesystem::path path = kSource / "configs" / "default.json";
  const ServerConfig preset = load_config_file(path);
  const ServerConfig built_in;
  const std::string text = read_file(path);
  for (const Setting& s : settings()) {
    if (s.key.empty()) continue;
    EXPECT_EQ(s.show(preset), s.show(built_in))
        << s.key << " differs between configs/default.json and the code";
    const std::string leaf = s.key.substr(s.key.rfind('.') + 1);
    EXPECT_NE(text.find('"' + leaf + '"'), std::string::npos)
        << s.key << " is missing from configs/default.json";
  }
}

// Every shown value reads back as itself, from the JSON file and from the command line alike.
TEST(Settings, EveryDefaultReadsBackFromJsonAndFromText) {
  const ServerConfig defaults;
  for (const Setting& s : settings()) {
    if (s.key.empty() || s.repeatable || s.key == "speculative") continue;
    std::string shown = s.show(defaults);
    if (shown == "\"\"") shown.clear();
    ServerConfig from_text;
    if (s.read_text) {
      s.read_text(from_text, shown, s.key);
      EXPECT_EQ(s.show(from_text), s.show(defaults)) << s.key;
    }
  }
}

TEST(Settings, FlagsAndSetOverrideTheFileInOrder) {
  ServeOptions options;
  options.settings = {
      {"--set cuda.gpu_memory_utilization", "cuda.gpu_memory_utilization", "", "0.5"},
      {"--set scheduler.max_step_ms", "scheduler.max_step_ms", "", "40"},
      {"--port", "http.port", "--port", "9000"},
      {"--set http.port", "http.port", "", "9001"},
      {"--prefill-url", "disagg.prefill_urls", "--prefill-url", "a:1"},
      {"--prefill-url", "disagg.prefill_urls", "--prefill-url", "http://b:2/"},
      {"--set speculative", "speculative", "", R"({"method": "none"})"},
      {"--model", "model", "--model", (kSource / "configs" / "default.json").string()}};
  const ServerConfig c = resolve_config(options);
  EXPECT_DOUBLE_EQ(c.cuda.gpu_memory_utilization, 0.5);
  EXPECT_DOUBLE_EQ(engine_config_of(c).cuda.gpu_memory_utilization, 0.5);
  EXPECT_EQ(c.scheduler.max_step_ms, 40);
  EXPECT_EQ(c.http.port, 9001);
  ASSERT_EQ(c.disagg.prefill_peers.size(), 2u);
  EXPECT_EQ(c.disagg.prefill_peers[1].to_string(), "b:2");
  EXPECT_FALSE(c.scheduler.speculative.enabled());
  options.settings = {
      {"--set cuda.gpu_memory_utilization", "cuda.gpu_memory_utilization", "", "1.5"}};
  try {
    (void)resolve_config(options);
    FAIL() << "1.5 accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--set cuda.gpu_memory_utilization: 1.5 is outside"),
              std::string::npos)
        << e.what();
  }
}

// The backend's sizes are the scheduler's and its memory share the cuda setting, derived in one
// function (engine::backend_options_of), never copied with defaults of their own.
TEST(Settings, TheBackendIsBuiltFromTheSettings) {
  ServerConfig c =
      parse_config(R"({"scheduler": {"max_num_seqs": 48, "max_num_batched_tokens": 3000,
                                                  "block_size": 32, "num_blocks": 77},
                                    "cuda": {"gpu_memory_utilization": 0.6},
                                    "cpu": {"threads": 3, "kv_memory_mb": 64, "prefill_attention": "bf16"},
                                    "backend": "cuda", "disagg": {"role": "prefill"}})");
  const engine::EngineConfig e = engine_config_of(c);
  const gpu::BackendOptions o = engine::backend_options_of(e, e.scheduler);
  EXPECT_EQ(o.request, gpu::BackendRequest::kCuda);
  EXPECT_EQ(o.max_num_seqs, 48);
  EXPECT_EQ(o.max_num_batched_tokens, 3000);
  EXPECT_EQ(o.block_size, 32);
  EXPECT_EQ(o.num_blocks, 77);
  EXPECT_DOUBLE_EQ(o.gpu_memory_utilization, 0.6);
  EXPECT_EQ(o.cpu_threads, 3);
  EXPECT_EQ(o.kv_memory_bytes, 64ll << 20);
  EXPECT_EQ(o.cpu_prefill_attention, gpu::cpu::PrefillAttentionPrecision::kBf16);
  EXPECT_TRUE(o.kv_host_mirror);
}

// A value both sides of a seam carry starts from the same default in every layer: the settings'
// (ServerConfig's, which the README's table shows), the scheduling policy's own, the backend
// options the engine derives, and each backend's config. Four layers once held four defaults
// for max_num_seqs (64, 256, 256, 256); gpu/backend_defaults.hpp now declares them once.
TEST(Settings, EveryLayerStartsFromTheSettingsDefaults) {
  const ServerConfig settings;
  const scheduler::SchedulerConfig policy;
  const gpu::BackendOptions options;
  const gpu::BackendOptions derived =
      engine::backend_options_of(engine_config_of(settings), settings.scheduler);
  const gpu::cpu::CpuBackendConfig cpu;
  for (const auto& [layer, seqs, tokens, block] :
       {std::tuple{"scheduler policy", policy.max_num_seqs, policy.max_num_batched_tokens,
                   policy.block_size},
        std::tuple{"backend options", options.max_num_seqs, options.max_num_batched_tokens,
                   options.block_size},
        std::tuple{"derived backend options", derived.max_num_seqs,
                   derived.max_num_batched_tokens, derived.block_size}}) {
    EXPECT_EQ(seqs, settings.scheduler.max_num_seqs) << layer;
    EXPECT_EQ(tokens, settings.scheduler.max_num_batched_tokens) << layer;
    EXPECT_EQ(block, settings.scheduler.block_size) << layer;
  }
  EXPECT_EQ(cpu.block_size, settings.scheduler.block_size);
  for (const int64_t bytes : {options.kv_memory_bytes, derived.kv_memory_bytes, cpu.kv_memory_bytes}) {
    EXPECT_EQ(bytes, settings.cpu.kv_memory_bytes);
  }
  EXPECT_DOUBLE_EQ(options.gpu_memory_utilization, settings.cuda.gpu_memory_utilization);
  EXPECT_DOUBLE_EQ(derived.gpu_memory_utilization, settings.cuda.gpu_memory_utilization);
#if TROUPE_HAVE_CUDA
  const gpu::cuda::CudaBackendConfig cuda;
  EXPECT_EQ(cuda.max_num_seqs, settings.scheduler.max_num_seqs);
  EXPECT_EQ(cuda.max_num_batched_tokens, settings.scheduler.max_num_batched_tokens);
  EXPECT_EQ(cuda.block_size, settings.scheduler.block_size);
  EXPECT_DOUBLE_EQ(cuda.gpu_memory_utilization, settings.cuda.gpu_memory_utilization);
#endif
}

TEST(Settings, ServeHelpListsEveryFlagWithItsKey) {
  const std::string help = serve_usage_text();
  for (const Setting& s : settings()) {
    if (s.flag.empty()) continue;
    EXPECT_NE(help.find(s.flag), std::string::npos) << s.flag;
    if (!s.key.empty()) {
      EXPECT_NE(help.find("(" + s.key + ")"), std::string::npos) << s.key;
    }
  }
  EXPECT_NE(help.find("--set KEY=VALUE"), std::string::npos);
}

}  // namespace
}  // namespace troupe::app
