#include "checkpoint_test_util.hpp"

#include <mwstrat/checkpoint/manager.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

namespace manager_test {

using namespace mwstrat;
using mwstrat::test::expect_checkpoint_error;
using mwstrat::test::make_state;
using mwstrat::test::read_bytes;
using mwstrat::test::temp_dir;
using mwstrat::test::write_bytes;

struct recorded_warnings {
  std::vector<std::string> lines;
  checkpoint_manager_options options() {
    checkpoint_manager_options o;
    o.warn = [this](std::string_view line) { lines.emplace_back(line); };
    return o;
  }
};

std::vector<std::string> names(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.filename().string());
  return out;
}

void flip_byte(const std::filesystem::path& path, std::size_t from_end) {
  auto bytes = read_bytes(path);
  bytes[bytes.size() - from_end] ^= std::byte{0x10};
  write_bytes(path, bytes);
}

TEST(checkpoint_manager, saves_restores_and_names_the_latest) {
  temp_dir dir;
  checkpoint_manager manager(dir / "ckpts", 3);
  EXPECT_FALSE(manager.latest().has_value());
  EXPECT_FALSE(manager.restore_latest().has_value());
  EXPECT_EQ(manager.save(make_state(1, 10), 10), dir / "ckpts" / "ckpt-10.safetensors");
  manager.save(make_state(2, 20), 20);
  EXPECT_EQ(manager.latest(), dir / "ckpts" / "ckpt-20.safetensors");
  const auto restored = manager.restore_latest_checkpoint();
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->step, 20);
  EXPECT_TRUE(restored->state == make_state(2, 20));
  EXPECT_TRUE(*manager.restore_latest() == make_state(2, 20));
  const auto index = read_bytes(manager.index_path());
  const std::string text(reinterpret_cast<const char*>(index.data()), index.size());
  EXPECT_EQ(text,
            "{\"format\":\"mwstrat.checkpoint_index/1\",\"latest\":\"ckpt-20.safetensors\","
            "\"checkpoints\":[\"ckpt-10.safetensors\",\"ckpt-20.safetensors\"]}\n");
}

TEST(checkpoint_manager, keeps_only_the_newest_max_to_keep) {
  temp_dir dir;
  checkpoint_manager manager(dir.path(), 2, "backup");
  for (std::int64_t step = 1; step <= 5; ++step) manager.save(make_state(static_cast<std::uint32_t>(step), step), step);
  EXPECT_EQ(names(manager.checkpoints()),
            (std::vector<std::string>{"backup-4.safetensors", "backup-5.safetensors"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "backup-3.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "backup-4.safetensors"));
  // Saving an existing step again replaces it and makes it the latest.
  manager.save(make_state(44, 4), 4);
  EXPECT_EQ(names(manager.checkpoints()),
            (std::vector<std::string>{"backup-5.safetensors", "backup-4.safetensors"}));
  EXPECT_TRUE(*manager.restore_latest() == make_state(44, 4));

  checkpoint_manager all(dir / "all", checkpoint_manager::keep_all);
  for (std::int64_t step = 0; step < 7; ++step) all.save(make_state(1, step), step);
  EXPECT_EQ(all.checkpoints().size(), 7u);
}

TEST(checkpoint_manager, falls_back_to_the_newest_good_checkpoint_with_a_warning) {
  temp_dir dir;
  recorded_warnings warnings;
  checkpoint_manager manager(dir.path(), 5, "ckpt", warnings.options());
  manager.save(make_state(1, 1), 1);
  manager.save(make_state(2, 2), 2);
  manager.save(make_state(3, 3), 3);
  flip_byte(manager.path_for(3), 5);                                      // bit rot in the data
  std::filesystem::resize_file(manager.path_for(2), 100);                 // truncated
  const auto restored = manager.restore_latest_checkpoint();
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->step, 1);
  EXPECT_TRUE(restored->state == make_state(1, 1));
  ASSERT_EQ(warnings.lines.size(), 2u);
  EXPECT_NE(warnings.lines[0].find("ckpt-3.safetensors"), std::string::npos) << warnings.lines[0];
  EXPECT_NE(warnings.lines[0].find("CRC32C mismatch"), std::string::npos) << warnings.lines[0];
  EXPECT_NE(warnings.lines[1].find("ckpt-2.safetensors"), std::string::npos) << warnings.lines[1];
  // latest() names the file without judging it.
  EXPECT_EQ(manager.latest(), manager.path_for(3));
}

TEST(checkpoint_manager, all_corrupt_is_an_error_naming_the_folder_and_every_file) {
  temp_dir dir;
  recorded_warnings warnings;
  checkpoint_manager manager(dir.path(), 5, "ckpt", warnings.options());
  manager.save(make_state(1, 1), 1);
  manager.save(make_state(2, 2), 2);
  write_bytes(manager.path_for(1), std::vector<std::byte>(3));
  write_bytes(manager.path_for(2), std::vector<std::byte>(50, std::byte{0xFF}));
  const auto e = expect_checkpoint_error([&] { (void)manager.restore_latest(); });
  EXPECT_EQ(e.path(), dir.path().string());
  EXPECT_NE(e.detail().find("ckpt-1.safetensors"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("ckpt-2.safetensors"), std::string::npos) << e.what();
}

TEST(checkpoint_manager, a_missing_or_corrupt_index_falls_back_to_scanning) {
  temp_dir dir;
  recorded_warnings warnings;
  checkpoint_manager manager(dir.path(), 5, "ckpt", warnings.options());
  manager.save(make_state(1, 9), 9);
  manager.save(make_state(2, 10), 10);  // 10 > 9 numerically even though "10" < "9" as text
  std::filesystem::remove(manager.index_path());
  EXPECT_EQ(manager.latest(), manager.path_for(10));
  EXPECT_TRUE(*manager.restore_latest() == make_state(2, 10));
  EXPECT_TRUE(warnings.lines.empty());

  const std::string corrupt = "{\"format\":\"mwstrat.checkpoint_index/1\",\"latest\":\"../../etc/passwd\","
                              "\"checkpoints\":[\"../../etc/passwd\"]}";
  write_bytes(manager.index_path(), std::as_bytes(std::span(corrupt)));
  EXPECT_TRUE(*manager.restore_latest() == make_state(2, 10));
  ASSERT_FALSE(warnings.lines.empty());
  EXPECT_NE(warnings.lines.back().find("ignoring the checkpoint index"), std::string::npos) << warnings.lines.back();

  // The next save repairs the index.
  manager.save(make_state(3, 11), 11);
  EXPECT_EQ(names(manager.checkpoints()), (std::vector<std::string>{"ckpt-9.safetensors", "ckpt-10.safetensors",
                                                                     "ckpt-11.safetensors"}));
}

TEST(checkpoint_manager, a_failed_save_keeps_the_previous_checkpoints_and_index) {
  temp_dir dir;
  checkpoint_manager_options options;
  bool fail = false;
  options.write.on_stage = [&](write_stage s, const auto&, const auto&) {
    if (fail && s == write_stage::synced) throw std::runtime_error("crash between write and rename");
  };
  checkpoint_manager manager(dir.path(), 2, "ckpt", options);
  manager.save(make_state(1, 1), 1);
  manager.save(make_state(2, 2), 2);
  const auto index_before = read_bytes(manager.index_path());
  const auto file_before = read_bytes(manager.path_for(2));

  fail = true;
  EXPECT_THROW(manager.save(make_state(3, 3), 3), std::runtime_error);
  training_state bad = make_state(4, 4);
  bad.weights[0].shape = {1};
  fail = false;
  expect_checkpoint_error([&] { manager.save(bad, 4); });
  expect_checkpoint_error([&] { manager.save(make_state(5), -1); });

  EXPECT_EQ(read_bytes(manager.index_path()), index_before);
  EXPECT_EQ(read_bytes(manager.path_for(2)), file_before);
  EXPECT_TRUE(std::filesystem::exists(manager.path_for(1)));
  EXPECT_FALSE(std::filesystem::exists(manager.path_for(3)));
  EXPECT_FALSE(std::filesystem::exists(manager.path_for(4)));
  EXPECT_TRUE(*manager.restore_latest() == make_state(2, 2));
}

// A state whose metadata or tensor name is not UTF-8 would make a file no reader accepts; if the save succeeded, the
// manager would then prune the readable checkpoints and leave nothing to restore.
TEST(checkpoint_manager, a_state_that_is_not_utf8_is_refused_and_the_older_checkpoints_are_kept) {
  temp_dir dir;
  checkpoint_manager manager(dir.path(), 2);
  manager.save(make_state(1, 1), 1);
  manager.save(make_state(2, 2), 2);
  const auto index_before = read_bytes(manager.index_path());

  for (std::int64_t step = 3; step <= 5; ++step) {
    training_state bad_note = make_state(3, step);
    bad_note.extra["note"] = "caf\xe9";
    const auto e = expect_checkpoint_error([&] { manager.save(bad_note, step); });
    EXPECT_NE(e.detail().find("metadata 'note': the value is not valid UTF-8 (byte 0xe9 at offset 3)"),
              std::string::npos)
        << e.detail();
  }
  training_state bad_name = make_state(6, 6);
  bad_name.weights[0].name = "w\xe9";
  const auto e = expect_checkpoint_error([&] { manager.save(bad_name, 6); });
  EXPECT_NE(e.detail().find("tensor 'w\\xe9': the name is not valid UTF-8 (byte 0xe9 at offset 1)"), std::string::npos)
      << e.detail();

  EXPECT_EQ(read_bytes(manager.index_path()), index_before);
  std::vector<std::string> files;
  for (const auto& f : std::filesystem::directory_iterator(dir.path())) files.push_back(f.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"ckpt-1.safetensors", "ckpt-2.safetensors", "ckpt.index.json"}));
  EXPECT_TRUE(*manager.restore_latest() == make_state(2, 2));

  training_state accented = make_state(7, 7);
  accented.extra["note"] = "caf\xc3\xa9";
  accented.weights[0].name = "\xe6\x97\xa5\xe6\x9c\xac";
  manager.save(accented, 7);
  EXPECT_TRUE(*manager.restore_latest() == accented);
}

// The crash the issue names: a save killed (SIGKILL) between writing the new checkpoint and renaming it into
// place. The previous checkpoint is what the manager loads, and the next save clears the debris.
TEST(checkpoint_manager, sigkill_between_write_and_rename_leaves_the_previous_checkpoint_in_use) {
  temp_dir dir;
  {
    checkpoint_manager manager(dir.path(), 3);
    manager.save(make_state(1, 100), 100);
  }
  for (const write_stage kill_at : {write_stage::written, write_stage::synced}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      checkpoint_manager_options options;
      options.write.on_stage = [&](write_stage s, const std::filesystem::path&, const std::filesystem::path& target) {
        if (s == kill_at && target.extension() == ".safetensors") ::raise(SIGKILL);
      };
      checkpoint_manager manager(dir.path(), 3, "ckpt", options);
      try {
        manager.save(make_state(2, 200), 200);
      } catch (...) {
      }
      ::_exit(3);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    recorded_warnings warnings;
    checkpoint_manager manager(dir.path(), 3, "ckpt", warnings.options());
    EXPECT_EQ(manager.latest(), manager.path_for(100));
    const auto restored = manager.restore_latest_checkpoint();
    ASSERT_TRUE(restored.has_value());
    EXPECT_EQ(restored->step, 100);
    EXPECT_TRUE(restored->state == make_state(1, 100));
    EXPECT_TRUE(warnings.lines.empty());
    std::size_t temporaries = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir.path()))
      temporaries += is_temporary_for(f.path().filename().string(), "ckpt") ? 1 : 0;
    EXPECT_EQ(temporaries, 1u) << "the killed write leaves its temporary file";
  }
  checkpoint_manager manager(dir.path(), 3);
  manager.save(make_state(3, 300), 300);
  for (const auto& f : std::filesystem::directory_iterator(dir.path()))
    EXPECT_FALSE(is_temporary_for(f.path().filename().string(), "ckpt")) << f.path();
  EXPECT_EQ(names(manager.checkpoints()),
            (std::vector<std::string>{"ckpt-100.safetensors", "ckpt-300.safetensors"}));
}

TEST(checkpoint_manager, remove_all_deletes_its_files_and_the_empty_folder_only) {
  temp_dir dir;
  const auto folder = dir / "backup";
  checkpoint_manager manager(folder, 2);
  for (std::int64_t step = 0; step < 3; ++step) manager.save(make_state(1, step), step);
  checkpoint_manager other(folder, 2, "other");
  other.save(make_state(9), 1);
  manager.remove_all();
  EXPECT_FALSE(manager.latest().has_value());
  EXPECT_FALSE(std::filesystem::exists(manager.index_path()));
  EXPECT_TRUE(std::filesystem::exists(other.path_for(1))) << "another prefix's files are not ours to delete";
  other.remove_all();
  EXPECT_FALSE(std::filesystem::exists(folder));
  other.remove_all();  // nothing there: no error
}

TEST(checkpoint_manager, cleans_only_its_own_temporaries) {
  temp_dir dir;
  const std::vector<std::byte> junk(10);
  write_bytes(dir / ".ckpt-3.safetensors.tmp-1-0", junk);       // ours: a crashed save
  write_bytes(dir / ".ckpt.index.json.tmp-1-1", junk);          // ours: a crashed index update
  write_bytes(dir / ".ckpt_best-3.safetensors.tmp-1-0", junk);  // another manager's, maybe in flight
  checkpoint_manager manager(dir.path(), 2);
  manager.save(make_state(1), 1);
  EXPECT_FALSE(std::filesystem::exists(dir / ".ckpt-3.safetensors.tmp-1-0"));
  EXPECT_FALSE(std::filesystem::exists(dir / ".ckpt.index.json.tmp-1-1"));
  EXPECT_TRUE(std::filesystem::exists(dir / ".ckpt_best-3.safetensors.tmp-1-0"));
}

// "ckpt" is a prefix of "ckpt-best" and of its index "ckpt-best.index.json": a "ckpt" manager must still leave the
// temporaries of a "ckpt-best" save alone, since that save may be in flight.
TEST(checkpoint_manager, leaves_the_temporaries_of_a_prefix_that_extends_its_own) {
  temp_dir dir;
  const std::vector<std::byte> junk(10);
  write_bytes(dir / ".ckpt-best-3.safetensors.tmp-1-0", junk);
  write_bytes(dir / ".ckpt-best.index.json.tmp-1-1", junk);
  write_bytes(dir / ".ckpt-9.safetensors.tmp-1-2", junk);  // ours: a crashed save
  checkpoint_manager manager(dir.path(), 2);
  manager.save(make_state(1), 1);
  EXPECT_TRUE(std::filesystem::exists(dir / ".ckpt-best-3.safetensors.tmp-1-0"));
  EXPECT_TRUE(std::filesystem::exists(dir / ".ckpt-best.index.json.tmp-1-1"));
  EXPECT_FALSE(std::filesystem::exists(dir / ".ckpt-9.safetensors.tmp-1-2"));

  // A "ckpt-best" save in flight, between write and rename, while the "ckpt" manager saves and removes everything.
  checkpoint_manager_options best_options;
  bool interleaved = false;
  best_options.write.on_stage = [&](write_stage s, const std::filesystem::path&, const std::filesystem::path& target) {
    if (s != write_stage::synced || target.extension() != ".safetensors" || interleaved) return;
    interleaved = true;
    manager.save(make_state(2), 2);
    manager.remove_all();
  };
  checkpoint_manager best(dir.path(), 2, "ckpt-best", best_options);
  EXPECT_NO_THROW(best.save(make_state(5), 5));
  ASSERT_TRUE(interleaved);
  EXPECT_TRUE(*best.restore_latest() == make_state(5));
  EXPECT_FALSE(manager.latest().has_value());
}

TEST(checkpoint_manager, rejects_bad_configuration) {
  temp_dir dir;
  EXPECT_THROW(checkpoint_manager(dir.path(), 0), config_error);
  EXPECT_THROW(checkpoint_manager(dir.path(), 1, ""), config_error);
  EXPECT_THROW(checkpoint_manager(dir.path(), 1, "../up"), config_error);
  EXPECT_THROW(checkpoint_manager(dir.path(), 1, ".hidden"), config_error);
  EXPECT_NO_THROW(checkpoint_manager(dir.path(), 1, "model_v2.best"));
}

TEST(checkpoint_manager, an_unwritable_folder_is_a_checkpoint_error) {
  temp_dir dir;
  write_bytes(dir / "file", std::vector<std::byte>(1));
  checkpoint_manager manager(dir / "file" / "sub", 1);
  const auto e = expect_checkpoint_error([&] { manager.save(make_state(1), 1); });
  EXPECT_NE(std::string(e.what()).find("sub"), std::string::npos) << e.what();
}

}  // namespace manager_test
