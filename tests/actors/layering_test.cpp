// The actors' folders depend on one another in one direction only (docs/design.md §1): the
// message layer (actors/messages/) includes no actor folder, and no two actor folders include
// each other, directly or around a cycle. Read from the sources, so a new include that closes a
// cycle fails here, naming it.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/source_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Graph = std::map<std::string, std::set<std::string>>;  // folder -> folders it includes

// Every include of "actors/<folder>/..." in actors/<folder>/**, by folder (the engine is the top
// and may include anything, so it is left out).
Graph actor_folder_includes() {
  const fs::path actors = ::troupe::test_support::source_dir() / "actors";
  const std::regex include(R"re(#include "actors/([a-z_]+)/)re");
  Graph graph;
  for (const auto& entry : fs::recursive_directory_iterator(actors)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".hpp" && ext != ".cpp")) continue;
    const std::string folder = fs::relative(entry.path(), actors).begin()->string();
    if (folder == "engine") continue;
    graph[folder];
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, include) && m[1] != folder) graph[folder].insert(m[1]);
    }
  }
  return graph;
}

// A cycle through `node`, as "a -> b -> a", or empty.
std::string find_cycle(const Graph& graph, const std::string& node, std::vector<std::string>& path,
                       std::set<std::string>& done) {
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != node) continue;
    std::string cycle;
    for (size_t j = i; j < path.size(); ++j) cycle += path[j] + " -> ";
    return cycle + node;
  }
  if (done.count(node)) return {};
  path.push_back(node);
  if (const auto it = graph.find(node); it != graph.end()) {
    for (const std::string& next : it->second) {
      if (std::string cycle = find_cycle(graph, next, path, done); !cycle.empty()) return cycle;
    }
  }
  path.pop_back();
  done.insert(node);
  return {};
}

TEST(ActorLayering, TheMessageLayerIncludesNoActorFolder) {
  const Graph graph = actor_folder_includes();
  ASSERT_TRUE(graph.count("messages")) << "actors/messages/ is gone";
  EXPECT_TRUE(graph.at("messages").empty())
      << "actors/messages/ includes actors/" << *graph.at("messages").begin() << "/";
  EXPECT_GE(graph.size(),
            7u);  // messages, common, runtime, disagg, kv_cache, scheduler, ingress, ...
}

TEST(ActorLayering, NoTwoActorFoldersIncludeEachOther) {
  const Graph graph = actor_folder_includes();
  std::set<std::string> done;
  for (const auto& [folder, _] : graph) {
    std::vector<std::string> path;
    const std::string cycle = find_cycle(graph, folder, path, done);
    EXPECT_TRUE(cycle.empty()) << "include cycle between actor folders: " << cycle;
  }
}

}  // namespace
