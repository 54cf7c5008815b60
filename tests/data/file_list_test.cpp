// list_files (data/file_list.hpp): glob patterns on the file-name part, sorted results, and the refusals (a
// pattern matching nothing, a directory, a missing folder, wildcards in a folder name), on real files.
#include <mwstrat/data/file_list.hpp>

#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace file_list_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;

TEST(file_list, glob_patterns_match_as_a_shell_does) {
  using detail::glob_match;
  EXPECT_TRUE(glob_match("*", "train-00001"));
  EXPECT_TRUE(glob_match("train-*-of-00008", "train-00003-of-00008"));
  EXPECT_FALSE(glob_match("train-*-of-00008", "train-00003-of-00016"));
  EXPECT_TRUE(glob_match("shard-?", "shard-7"));
  EXPECT_FALSE(glob_match("shard-?", "shard-17"));
  EXPECT_TRUE(glob_match("shard-[0-3]", "shard-2"));
  EXPECT_FALSE(glob_match("shard-[0-3]", "shard-4"));
  EXPECT_TRUE(glob_match("shard-[!0-3]", "shard-4"));
  EXPECT_TRUE(glob_match("shard-[^a]", "shard-b"));
  EXPECT_TRUE(glob_match("[]x]", "]"));
  EXPECT_TRUE(glob_match("a\\*b", "a*b"));
  EXPECT_FALSE(glob_match("a\\*b", "axb"));
  EXPECT_TRUE(glob_match("*.tfrecord*", "x.tfrecord-00000-of-00001"));
  EXPECT_TRUE(glob_match("*a*a*a*", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"));
  EXPECT_FALSE(glob_match("*a*a*a*c", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"));
  EXPECT_FALSE(glob_match("*", ".hidden")) << "a wildcard does not match a leading dot";
  EXPECT_TRUE(glob_match(".*", ".hidden"));
  EXPECT_TRUE(glob_match("[ab", "[ab")) << "an unclosed [ is literal";
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "x"));
}

struct shards {
  test::temp_dir dir{"file-list"};
  shards() {
    for (const char* n : {"train-00002-of-00003", "train-00000-of-00003", "train-00001-of-00003", "test-00000-of-00001",
                          ".train-hidden"})
      std::ofstream(dir / n) << "x";
    fs::create_directory(dir / "train-old");
  }
};

TEST(file_list, a_pattern_lists_its_files_sorted) {
  shards s;
  const auto files = list_files((s.dir / "train-*-of-00003").string());
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0], s.dir / "train-00000-of-00003");
  EXPECT_EQ(files[2], s.dir / "train-00002-of-00003");
  EXPECT_EQ(list_files((s.dir / "test-00000-of-00001").string()), std::vector<fs::path>{s.dir / "test-00000-of-00001"});
  const std::vector<std::string> two = {(s.dir / "test-*").string(), (s.dir / "train-0000[01]-*").string(),
                                        (s.dir / "test-00000-of-00001").string()};
  const auto both = list_files(two);
  ASSERT_EQ(both.size(), 3u) << "in pattern order, each file once";
  EXPECT_EQ(both[0], s.dir / "test-00000-of-00001");
  EXPECT_EQ(both[2], s.dir / "train-00001-of-00003");
}

std::string refusal(const std::string& pattern) {
  try {
    (void)list_files(pattern);
  } catch (const data_error& e) {
    EXPECT_EQ(e.path(), pattern);
    return e.what();
  }
  return "accepted";
}

TEST(file_list, a_glob_matching_nothing_is_refused) {
  shards s;
  const std::string p = (s.dir / "valid-*").string();
  EXPECT_EQ(refusal(p), "[mwstrat.data] " + p + ": the pattern matches no file");
  EXPECT_EQ(refusal((s.dir / "absent").string()),
            "[mwstrat.data] " + (s.dir / "absent").string() + ": no such file (the pattern matches nothing)");
  EXPECT_NE(refusal((s.dir / "nope" / "*").string()).find("does not exist"), std::string::npos);
  EXPECT_THROW((void)list_files(std::vector<std::string>{}), data_error);
}

TEST(file_list, a_directory_is_refused) {
  shards s;
  EXPECT_NE(refusal(s.dir.path().string()).find(": a directory, not a file (to read the files in it, give \""),
            std::string::npos);
  EXPECT_NE(refusal((s.dir / "train-*").string()).find("matches " + (s.dir / "train-old").string() + ", a directory"),
            std::string::npos);
  EXPECT_NE(refusal((s.dir.path() / "*" / "x").string()).find("wildcards in a folder name are not supported"),
            std::string::npos);
}

}  // namespace file_list_test
