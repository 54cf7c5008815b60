#include "checkpoint_test_util.hpp"

#include <mwstrat/checkpoint/atomic_file.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

namespace atomic_file_test {

using namespace mwstrat;
using mwstrat::test::expect_checkpoint_error;
using mwstrat::test::read_bytes;
using mwstrat::test::temp_dir;

std::vector<std::byte> text_bytes(std::string_view s) {
  const auto b = std::as_bytes(std::span(s));
  return {b.begin(), b.end()};
}

std::size_t count_files(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& f : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

TEST(atomic_file, writes_and_replaces_a_file_through_every_stage_in_order) {
  temp_dir dir;
  std::vector<write_stage> seen;
  write_options options;
  options.on_stage = [&](write_stage s, const std::filesystem::path& temporary, const std::filesystem::path& target) {
    seen.push_back(s);
    EXPECT_EQ(temporary.parent_path(), target.parent_path()) << "the temporary file must be in the target's folder";
    EXPECT_TRUE(is_temporary_for(temporary.filename().string(), "f.bin"));
  };
  write_bytes_atomically(dir / "f.bin", text_bytes("first"), options);
  write_bytes_atomically(dir / "f.bin", text_bytes("second"), options);
  EXPECT_EQ(read_bytes(dir / "f.bin"), text_bytes("second"));
  const std::vector<write_stage> once = {write_stage::created, write_stage::written, write_stage::synced,
                                         write_stage::renamed, write_stage::completed};
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_TRUE(std::equal(once.begin(), once.end(), seen.begin()));
  EXPECT_EQ(count_files(dir.path()), 1u);
  EXPECT_EQ(std::string(to_string(write_stage::synced)), "synced");
}

TEST(atomic_file, a_failure_before_the_rename_leaves_the_previous_file_and_no_temporary) {
  temp_dir dir;
  const auto target = dir / "f.bin";
  write_bytes_atomically(target, text_bytes("previous"));
  for (const write_stage fail_at : {write_stage::created, write_stage::written, write_stage::synced}) {
    write_options options;
    options.on_stage = [&](write_stage s, const auto&, const auto&) {
      if (s == fail_at) throw std::runtime_error("injected fault");
    };
    EXPECT_THROW(write_bytes_atomically(target, text_bytes("new contents"), options), std::runtime_error);
    EXPECT_EQ(read_bytes(target), text_bytes("previous")) << to_string(fail_at);
    EXPECT_EQ(count_files(dir.path()), 1u) << to_string(fail_at);
  }
}

TEST(atomic_file, a_failing_body_leaves_the_previous_file) {
  temp_dir dir;
  const auto target = dir / "f.bin";
  write_bytes_atomically(target, text_bytes("previous"));
  EXPECT_THROW(write_file_atomically(target,
                                     [](file_sink& sink) {
                                       const auto half = text_bytes("half written");
                                       sink.write(half);
                                       throw std::runtime_error("disk full, say");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_bytes(target), text_bytes("previous"));
  EXPECT_EQ(count_files(dir.path()), 1u);
}

TEST(atomic_file, large_gathered_writes_arrive_whole_and_in_order) {
  temp_dir dir;
  std::vector<std::vector<std::byte>> parts;
  std::vector<std::byte> expected;
  for (std::size_t i = 0; i < 150; ++i) {  // more buffers than one writev takes
    parts.emplace_back(i * 997 % 5000, static_cast<std::byte>(i));
    expected.insert(expected.end(), parts.back().begin(), parts.back().end());
  }
  std::vector<std::span<const std::byte>> spans(parts.begin(), parts.end());
  write_file_atomically(dir / "big", [&](file_sink& sink) { sink.write(spans); });
  EXPECT_EQ(read_bytes(dir / "big"), expected);
}

TEST(atomic_file, errors_name_the_file) {
  temp_dir dir;
  const auto target = dir / "no-such-folder" / "f.bin";
  const auto e = expect_checkpoint_error([&] { write_bytes_atomically(target, text_bytes("x"), {.rank = 1}); });
  EXPECT_NE(std::string(e.what()).find("no-such-folder"), std::string::npos) << e.what();
  EXPECT_EQ(e.rank(), 1);
  EXPECT_EQ(std::string(e.what()).rfind("[mwstrat.checkpoint] rank 1: ", 0), 0u) << e.what();
}

TEST(atomic_file, a_failed_rename_is_a_checkpoint_error_and_leaves_no_temporary) {
  temp_dir dir;
  const auto target = dir / "occupied";
  std::filesystem::create_directories(target / "child");  // a non-empty folder cannot be renamed over
  const auto e = expect_checkpoint_error([&] { write_bytes_atomically(target, text_bytes("new")); });
  EXPECT_NE(e.detail().find("cannot rename"), std::string::npos) << e.what();
  EXPECT_TRUE(std::filesystem::is_directory(target / "child"));
  EXPECT_EQ(count_files(dir.path()), 1u);
}

// A real crash: a child process is SIGKILLed at each point of the write; the target is always either the old or
// the complete new contents, and what is left over is at most one temporary file, which cleanup removes.
TEST(atomic_file, sigkill_at_any_stage_leaves_old_or_new_contents_whole) {
  temp_dir dir;
  const auto target = dir / "f.bin";
  const auto old_bytes = std::vector<std::byte>(100000, std::byte{1});
  const auto new_bytes = std::vector<std::byte>(200000, std::byte{2});
  for (const write_stage kill_at : {write_stage::created, write_stage::written, write_stage::synced,
                                    write_stage::renamed, write_stage::completed}) {
    write_bytes_atomically(target, old_bytes);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      write_options options;
      options.on_stage = [&](write_stage s, const auto&, const auto&) {
        if (s == kill_at) ::raise(SIGKILL);
      };
      try {
        write_bytes_atomically(target, new_bytes, options);
      } catch (...) {
      }
      ::_exit(3);  // not reached when the kill happens
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << to_string(kill_at);
    const auto now = read_bytes(target);
    const bool renamed = kill_at == write_stage::renamed || kill_at == write_stage::completed;
    EXPECT_EQ(now, renamed ? new_bytes : old_bytes) << to_string(kill_at);
    EXPECT_EQ(count_files(dir.path()), renamed ? 1u : 2u) << to_string(kill_at);
    EXPECT_EQ(remove_stale_temporaries(dir.path(), "f.bin"), renamed ? 0u : 1u);
    EXPECT_EQ(count_files(dir.path()), 1u);
  }
}

TEST(atomic_file, stale_temporaries_are_recognised_by_prefix_only) {
  EXPECT_TRUE(is_temporary_for(".ckpt-5.safetensors.tmp-123-0", "ckpt"));
  EXPECT_FALSE(is_temporary_for(".ckpt-5.safetensors.tmp-123-0", "other"));
  EXPECT_FALSE(is_temporary_for("ckpt-5.safetensors", "ckpt"));
  EXPECT_FALSE(is_temporary_for(".ckpt-5.safetensors", "ckpt"));
  // Exactly `.<target>.tmp-<pid>-<n>`: the marker alone is not enough, and the last one is the real one.
  EXPECT_FALSE(is_temporary_for(".ckpt-5.tmp-notes.txt", "ckpt"));
  EXPECT_FALSE(is_temporary_for(".ckpt-5.safetensors.tmp-123", "ckpt"));
  EXPECT_TRUE(is_temporary_for(".run.tmp-a.bin.tmp-12-3", "run.tmp-a.bin"));
}

}  // namespace atomic_file_test
