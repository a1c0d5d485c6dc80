// The durable file store (actors/batch/file_store.hpp) on a real SQLite database: create, read,
// list with OpenAI's paging, delete, owners apart, reopening keeps everything, bytes without a
// row are swept, and an unwritable directory is refused by name at open.
#include "actors/batch/file_store.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "tests/net/temp_dir.hpp"

namespace troupe::batch {
namespace {

using net::testing::TempDir;

std::string content_of(const FileStore& store, std::string_view owner, std::string_view id) {
  auto read = store.read(owner, id);
  if (!read) return "<missing>";
  if (auto* error = std::get_if<StorageError>(&*read)) return "<error " + error->message + ">";
  return std::get<std::string>(*read);
}

StoredFile created(FileStore& store, std::string_view owner, std::string_view name,
                   std::string_view content, int64_t now = 100) {
  auto result = store.create(owner, "batch", name, content, now);
  EXPECT_TRUE(std::holds_alternative<StoredFile>(result));
  return std::get<StoredFile>(result);
}

TEST(FileStore, CreateReadListDelete) {
  TempDir dir("file-store");
  auto store = FileStore::open(dir.path());
  using namespace std::string_literals;
  const std::string jsonl = "{\"custom_id\":\"a\"}\r\n{\"custom_id\":\"b\"}\n\0tail"s;
  const StoredFile file = created(*store, "alice", "batch.jsonl", jsonl, 1234);
  EXPECT_EQ(file.id.rfind("file-", 0), 0u);
  EXPECT_EQ(file.bytes, static_cast<int64_t>(jsonl.size()));
  EXPECT_EQ(file.created_at, 1234);
  EXPECT_EQ(content_of(*store, "alice", file.id), jsonl);
  ASSERT_TRUE(store->get("alice", file.id));
  EXPECT_EQ(store->get("alice", file.id)->filename, "batch.jsonl");
  EXPECT_EQ(store->list("alice", {}).files.size(), 1u);
  EXPECT_TRUE(store->remove("alice", file.id));
  EXPECT_FALSE(store->remove("alice", file.id));
  EXPECT_FALSE(store->get("alice", file.id));
  EXPECT_EQ(content_of(*store, "alice", file.id), "<missing>");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "files" / file.id));
}

TEST(FileStore, AnotherOwnerSeesNothing) {
  TempDir dir("file-store");
  auto store = FileStore::open(dir.path());
  const StoredFile file = created(*store, "alice", "a.jsonl", "x");
  EXPECT_FALSE(store->get("bob", file.id));
  EXPECT_EQ(content_of(*store, "bob", file.id), "<missing>");
  EXPECT_TRUE(store->list("bob", {}).files.empty());
  EXPECT_FALSE(store->remove("bob", file.id));
  EXPECT_TRUE(store->get("alice", file.id));
}

TEST(FileStore, ListsNewestFirstInPagesAndByPurpose) {
  TempDir dir("file-store");
  auto store = FileStore::open(dir.path());
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(created(*store, "o", "f" + std::to_string(i), "x").id);
  ASSERT_TRUE(std::holds_alternative<StoredFile>(store->create("o", "user_data", "u", "y", 1)));
  FileListQuery query;
  query.purpose = "batch";
  query.limit = 2;
  FileList page = store->list("o", query);
  ASSERT_EQ(page.files.size(), 2u);
  EXPECT_TRUE(page.has_more);
  EXPECT_EQ(page.files[0].id, ids[4]);
  EXPECT_EQ(page.files[1].id, ids[3]);
  query.after = page.files.back().id;
  page = store->list("o", query);
  EXPECT_EQ(page.files[0].id, ids[2]);
  query.limit = 10;
  query.after = ids[1];
  page = store->list("o", query);
  ASSERT_EQ(page.files.size(), 1u);
  EXPECT_FALSE(page.has_more);
  EXPECT_EQ(page.files[0].id, ids[0]);
  FileListQuery ascending;
  ascending.ascending = true;
  ascending.limit = 1;
  EXPECT_EQ(store->list("o", ascending).files[0].id, ids[0]);
  EXPECT_EQ(store->list("o", {}).files.size(), 6u);
}

TEST(FileStore, ReopeningKeepsFilesAndSweepsOrphans) {
  TempDir dir("file-store");
  std::string id;
  {
    auto store = FileStore::open(dir.path());
    id = created(*store, "o", "keep.jsonl", "kept").id;
  }
  // What a crash leaves: bytes renamed in place but never recorded, and a half-written file.
  std::ofstream(dir.path() / "files" / "file-000000000000000000000000") << "orphan";
  std::ofstream(dir.path() / "files" / "file-0.tmp") << "partial";
  auto store = FileStore::open(dir.path());
  EXPECT_EQ(content_of(*store, "o", id), "kept");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "files" / "file-000000000000000000000000"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "files" / "file-0.tmp"));
}

TEST(FileStore, AnUnwritableDirectoryIsRefusedByName) {
  TempDir dir("file-store");
  // Root writes through permissions: /proc takes no directories from anyone.
  const bool root = ::geteuid() == 0;
  const std::filesystem::path path = root ? std::filesystem::path("/proc/troupe-storage") : dir.path() / "storage";
  if (!root) {
    std::filesystem::permissions(dir.path(),
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  try {
    FileStore::open(path);
    ADD_FAILURE() << "opened an unwritable directory";
  } catch (const StorageOpenError& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
}

TEST(FileStore, AFileThatIsNotADirectoryIsRefused) {
  TempDir dir("file-store");
  std::ofstream(dir.path() / "plain") << "x";
  EXPECT_THROW(FileStore::open(dir.path() / "plain"), StorageOpenError);
}

}  // namespace
}  // namespace troupe::batch
