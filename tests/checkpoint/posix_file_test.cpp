// The checkpoint family's POSIX file helpers and safetensors header helpers, on real files in a temporary folder:
// gathered writes across buffer boundaries, exclusive creation, exact reads that name a short file, and the
// overflow-checked tensor size and hex checksum spelling.
#include <mwstrat/checkpoint/detail/posix_file.hpp>
#include <mwstrat/checkpoint/detail/safetensors_header.hpp>

#include "checkpoint_test_util.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace posix_file_test {

namespace d = mwstrat::detail;
using mwstrat::checkpoint_error;

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return out;
}

template <class F>
std::string error_text(F&& f) {
  try {
    f();
  } catch (const checkpoint_error& e) {
    return e.what();
  }
  return "(no checkpoint_error)";
}

TEST(posix_file, gathered_write_keeps_order_across_empty_and_uneven_buffers) {
  mwstrat::test::temp_dir dir;
  const auto path = dir / "gathered.bin";
  const auto a = pattern(3, 1), b = pattern(0, 2), c = pattern(70000, 3), e = pattern(1, 4);
  // More buffers than one writev takes (64), so the write continues in a second batch.
  std::vector<std::vector<std::byte>> many;
  for (unsigned i = 0; i < 100; ++i) many.push_back(pattern(i % 7, 10 + i));
  std::vector<std::span<const std::byte>> buffers{a, b, c, e};
  for (const auto& m : many) buffers.emplace_back(m);
  {
    d::unique_fd fd = d::create_exclusive(path, std::nullopt);
    d::write_all(fd.get(), buffers, path, std::nullopt);
    EXPECT_EQ(0, fd.close_checked());
    EXPECT_FALSE(fd);
  }
  std::vector<std::byte> expected;
  for (const auto& s : buffers) expected.insert(expected.end(), s.begin(), s.end());
  EXPECT_EQ(mwstrat::test::read_bytes(path), expected);

  const d::unique_fd in = d::open_for_reading(path, 3);
  EXPECT_EQ(d::file_size(in.get(), path, 3), expected.size());
  std::vector<std::byte> middle(1000);
  d::read_exact(in.get(), middle, 2, path, 3);
  EXPECT_TRUE(std::equal(middle.begin(), middle.end(), expected.begin() + 2));
}

TEST(posix_file, overwrite_in_place_and_reads_past_the_end_are_named) {
  mwstrat::test::temp_dir dir;
  const auto path = dir / "f.bin";
  const auto bytes = pattern(64, 5);
  {
    d::unique_fd fd = d::create_exclusive(path, 0);
    const std::span<const std::byte> one[] = {bytes};
    d::write_all(fd.get(), one, path, 0);
    const auto patch = pattern(4, 9);
    d::pwrite_all(fd.get(), patch, 10, path, 0);
    d::sync_fd(fd.get(), path, 0);
  }
  d::sync_folder(dir.path(), 0);
  auto expected = bytes;
  const auto patch = pattern(4, 9);
  std::copy(patch.begin(), patch.end(), expected.begin() + 10);
  EXPECT_EQ(mwstrat::test::read_bytes(path), expected);

  const d::unique_fd in = d::open_for_reading(path, 0);
  std::vector<std::byte> too_much(65);
  const std::string text = error_text([&] { d::read_exact(in.get(), too_much, 0, path, 0); });
  EXPECT_NE(text.find(path.string()), std::string::npos) << text;
  EXPECT_NE(text.find("file ended early"), std::string::npos) << text;
}

TEST(posix_file, exclusive_creation_refuses_an_existing_file_and_missing_files_are_named) {
  mwstrat::test::temp_dir dir;
  const auto path = dir / "exists.bin";
  mwstrat::test::write_bytes(path, pattern(8, 1));
  std::string text = error_text([&] { (void)d::create_exclusive(path, 1); });
  EXPECT_NE(text.find("cannot create"), std::string::npos) << text;
  EXPECT_NE(text.find(path.string()), std::string::npos) << text;
  EXPECT_EQ(mwstrat::test::read_bytes(path), pattern(8, 1)) << "the existing file was touched";

  text = error_text([&] { (void)d::open_for_reading(dir / "missing.bin", 1); });
  EXPECT_NE(text.find("cannot open for reading"), std::string::npos) << text;

  // A folder is not a regular file.
  const int fd = ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const d::unique_fd folder(fd);
  text = error_text([&] { (void)d::file_size(folder.get(), dir.path(), 1); });
  EXPECT_NE(text.find("not a regular file"), std::string::npos) << text;
}

TEST(posix_file, unique_fd_closes_once_and_moves) {
  mwstrat::test::temp_dir dir;
  mwstrat::test::write_bytes(dir / "x", pattern(1, 0));
  d::unique_fd a = d::open_for_reading(dir / "x", std::nullopt);
  const int raw = a.get();
  d::unique_fd b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is what is tested
  EXPECT_EQ(b.get(), raw);
  EXPECT_NE(::fcntl(raw, F_GETFD), -1);
  b.reset();
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1) << "reset did not close";
  EXPECT_EQ(0, b.close_checked()) << "closing an empty handle is a no-op";
}

TEST(safetensors_header, tensor_bytes_rejects_negative_and_overflowing_shapes) {
  constexpr auto big = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(d::tensor_bytes({}, 4, big), 4u);  // a scalar
  EXPECT_EQ(d::tensor_bytes({2, 3, 5}, 4, big), 120u);
  EXPECT_EQ(d::tensor_bytes({0, -0}, 8, big), 0u);
  EXPECT_EQ(d::tensor_bytes({3, 0, std::numeric_limits<std::int64_t>::max()}, 8, 100), 0u);  // empty wins
  EXPECT_FALSE(d::tensor_bytes({2, -1}, 4, big));
  EXPECT_FALSE(d::tensor_bytes({1 << 20, 1 << 20, 1 << 20, 1 << 20}, 1, big));  // 2^80 elements
  EXPECT_FALSE(d::tensor_bytes({10}, 4, 39));  // 40 bytes over a limit of 39
  EXPECT_EQ(d::tensor_bytes({10}, 4, 40), 40u);
}

TEST(safetensors_header, hex32_round_trips_and_parse_is_strict) {
  for (const std::uint32_t v : {0u, 1u, 0xdeadbeefu, 0xffffffffu, 0x0000abcdu}) {
    const std::string s = d::hex32(v);
    EXPECT_EQ(s.size(), 8u);
    EXPECT_EQ(d::parse_hex32(s), v) << s;
  }
  EXPECT_EQ(d::hex32(0xabcu), "00000abc");
  EXPECT_FALSE(d::parse_hex32("DEADBEEF")) << "upper case is not what we write";
  EXPECT_FALSE(d::parse_hex32("deadbee"));
  EXPECT_FALSE(d::parse_hex32("deadbeef0"));
  EXPECT_FALSE(d::parse_hex32("deadbeeg"));
  EXPECT_FALSE(d::parse_hex32(""));
}

}  // namespace posix_file_test
