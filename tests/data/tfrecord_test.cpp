// TFRecord framing: our writer and reader round trip (raw, gzip, zlib; records of 0, 1, odd and large sizes, with a
// buffer smaller than a record), offsets, and one test for each refusal (truncated, bad length CRC, bad data CRC,
// empty file, directory, over-long record, corrupt or truncated compressed streams). Records written by
// TensorFlow's own writer are read in tfrecord_interop_test.cpp.
#include <mwstrat/data/tfrecord.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>

#include <support/temp_dir.hpp>

#include "byte_files.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tfrecord_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;
using byte_files::read_bytes;
using byte_files::write_bytes;

std::vector<std::byte> payload(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

const std::vector<std::size_t> sizes = {0, 1, 37, (std::size_t{1} << 20) + 3, 12, 4096, 5};

// Writes `sizes` records; returns their offsets.
std::vector<std::uint64_t> write_records(const fs::path& path, tfrecord_compression c,
                                         const std::vector<std::size_t>& lengths = sizes) {
  tfrecord_writer w(path, {.compression = c, .buffer_bytes = 1000});
  std::vector<std::uint64_t> offsets;
  for (std::size_t i = 0; i < lengths.size(); ++i) offsets.push_back(w.write(payload(lengths[i], unsigned(i))));
  w.close();
  return offsets;
}



// Reads every record; the message of the data_error that ended the file ("" when none) goes to `error`.
std::vector<std::vector<std::byte>> read_all(const fs::path& p, std::string& error, tfrecord_options o = {},
                                             std::vector<std::uint64_t>* offsets = nullptr) {
  std::vector<std::vector<std::byte>> out;
  error.clear();
  try {
    tfrecord_reader r(p, o);
    for (int guard = 0; guard < 100000; ++guard) {
      const auto rec = r.next();
      if (!rec) break;
      out.emplace_back(rec->data.begin(), rec->data.end());
      if (offsets) offsets->push_back(rec->offset);
    }
  } catch (const data_error& e) {
    error = e.what();
    EXPECT_EQ(e.path(), p.string());
    EXPECT_EQ(e.component(), "tfrecord");
  }
  return out;
}

TEST(tfrecord, masked_crc32c_is_tensorflows) {
  // crc32c("123456789") = 0xE3069283, rotated right by 15 and offset by 0xa282ead8.
  const std::string text = "123456789";
  const std::uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c(std::as_bytes(std::span(text.data(), text.size()))),
            static_cast<std::uint32_t>(((crc >> 15) | (crc << 17)) + 0xa282ead8u));
  EXPECT_EQ(masked_crc32c({}), 0xa282ead8u);
}

TEST(tfrecord, records_round_trip_raw_gzip_and_zlib_with_their_offsets) {
  test::temp_dir dir("tfrecord");
  for (const auto c : {tfrecord_compression::none, tfrecord_compression::gzip, tfrecord_compression::zlib}) {
    const fs::path p = dir / ("r-" + std::string(to_string(c)));
    const auto offsets = write_records(p, c);
    ASSERT_TRUE(fs::exists(p));
    EXPECT_FALSE(fs::exists(p.string() + ".part"));
    for (const auto given : {tfrecord_compression::automatic, c}) {
      for (const std::size_t buffer : {std::size_t{64}, std::size_t{256} << 10}) {
        std::string error;
        std::vector<std::uint64_t> seen;
        tfrecord_options o;
        o.compression = given;
        o.buffer_bytes = buffer;
        const auto got = read_all(p, error, o, &seen);
        EXPECT_EQ(error, "") << to_string(c);
        ASSERT_EQ(got.size(), sizes.size()) << to_string(c);
        for (std::size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(got[i], payload(sizes[i], unsigned(i)));
        EXPECT_EQ(seen, offsets);
      }
      tfrecord_reader r(p, {.compression = given});
      EXPECT_EQ(r.compression(), c);
    }
  }
  // Offsets are those of the uncompressed stream: record k starts after k records of 16 bytes of framing.
  const auto offsets = write_records(dir / "o", tfrecord_compression::gzip);
  std::uint64_t expect = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(offsets[i], expect);
    expect += sizes[i] + 16;
  }
}

TEST(tfrecord, concatenated_gzip_members_read_as_one_file) {
  test::temp_dir dir("tfrecord");
  write_records(dir / "a", tfrecord_compression::gzip, {3, 5});
  write_records(dir / "b", tfrecord_compression::gzip, {7});
  auto both = read_bytes(dir / "a");
  const auto b = read_bytes(dir / "b");
  both.insert(both.end(), b.begin(), b.end());
  write_bytes(dir / "ab", both);
  std::string error;
  std::vector<std::uint64_t> offsets;
  const auto got = read_all(dir / "ab", error, {}, &offsets);
  EXPECT_EQ(error, "");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2], payload(7, 0));
  EXPECT_EQ(offsets, (std::vector<std::uint64_t>{0, 19, 40}));
}

TEST(tfrecord, a_truncated_record_is_refused_after_the_whole_records_before_it) {
  test::temp_dir dir("tfrecord");
  const auto offsets = write_records(dir / "t", tfrecord_compression::none, {10, 20, 30});
  auto bytes = read_bytes(dir / "t");
  for (const std::size_t cut : {std::size_t{5}, std::size_t{12 + 3}, std::size_t{12 + 20 + 2}}) {
    write_bytes(dir / "cut", {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(offsets[1] + cut)});
    std::string error;
    const auto got = read_all(dir / "cut", error);
    ASSERT_EQ(got.size(), 1u) << "only the first, whole, record";
    EXPECT_NE(error.find((dir / "cut").string() + ": record at byte 26: truncated record: "), std::string::npos)
        << error;
  }
  // A reader that failed stays failed, with the same error.
  tfrecord_reader r(dir / "cut");
  ASSERT_TRUE(r.next());
  std::string first, second;
  try { (void)r.next(); } catch (const data_error& e) { first = e.what(); }
  try { (void)r.next(); } catch (const data_error& e) { second = e.what(); }
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(first, second);
}

TEST(tfrecord, a_bad_length_crc_is_refused) {
  test::temp_dir dir("tfrecord");
  const auto offsets = write_records(dir / "f", tfrecord_compression::none, {10, 20, 30});
  auto bytes = read_bytes(dir / "f");
  bytes[offsets[1] + 1] ^= std::byte{0x01};  // a length byte of the second record
  write_bytes(dir / "f", bytes);
  std::string error;
  EXPECT_EQ(read_all(dir / "f", error).size(), 1u);
  EXPECT_NE(error.find("f: record at byte 26: bad length CRC"), std::string::npos) << error;
}

TEST(tfrecord, a_bad_data_crc_is_refused) {
  test::temp_dir dir("tfrecord");
  const auto offsets = write_records(dir / "f", tfrecord_compression::none, {10, 20, 30});
  auto bytes = read_bytes(dir / "f");
  bytes[offsets[2] + 12 + 29] ^= std::byte{0x80};  // the last data byte of the third record
  write_bytes(dir / "f", bytes);
  std::string error;
  EXPECT_EQ(read_all(dir / "f", error).size(), 2u);
  EXPECT_NE(error.find("f: record at byte 62: bad data CRC"), std::string::npos) << error;
  bytes = read_bytes(dir / "f");  // a flipped data CRC itself
  bytes[offsets[2] + 12 + 29] ^= std::byte{0x80};
  bytes.back() ^= std::byte{0x02};
  write_bytes(dir / "f", bytes);
  EXPECT_EQ(read_all(dir / "f", error).size(), 2u);
  EXPECT_NE(error.find("record at byte 62: bad data CRC"), std::string::npos) << error;
}

TEST(tfrecord, an_empty_file_is_refused_unless_allowed) {
  test::temp_dir dir("tfrecord");
  write_bytes(dir / "empty", {});
  std::string error;
  EXPECT_TRUE(read_all(dir / "empty", error).empty());
  EXPECT_EQ(error, "[mwstrat.tfrecord] " + (dir / "empty").string() + ": empty file (0 bytes): no TFRecord records");
  EXPECT_TRUE(read_all(dir / "empty", error, {.allow_empty = true}).empty());
  EXPECT_EQ(error, "");
  // A gzip file of no records is not 0 bytes, and still empty.
  tfrecord_writer(dir / "empty.gz", {.compression = tfrecord_compression::gzip}).close();
  EXPECT_GT(fs::file_size(dir / "empty.gz"), 0u);
  EXPECT_TRUE(read_all(dir / "empty.gz", error).empty());
  EXPECT_NE(error.find("empty.gz: record at byte 0: empty: the file holds no record"), std::string::npos) << error;
  EXPECT_TRUE(read_all(dir / "empty.gz", error, {.allow_empty = true}).empty());
  EXPECT_EQ(error, "");
}

TEST(tfrecord, a_directory_is_refused_and_a_missing_file_is_an_io_error) {
  test::temp_dir dir("tfrecord");
  try {
    tfrecord_reader r(dir.path());
    ADD_FAILURE() << "a directory was opened";
  } catch (const data_error& e) {
    EXPECT_EQ(e.path(), dir.path().string());
    EXPECT_NE(std::string(e.what()).find(": a directory, not a TFRecord file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tfrecord_reader(dir / "absent"), io_error);
}

TEST(tfrecord, a_record_longer_than_the_limit_is_refused_before_it_is_read) {
  test::temp_dir dir("tfrecord");
  write_records(dir / "f", tfrecord_compression::none, {100, 5000});
  std::string error;
  EXPECT_EQ(read_all(dir / "f", error, {.max_record_bytes = 4096}).size(), 1u);
  EXPECT_NE(error.find("record at byte 116: length 5000 exceeds the limit of 4096 bytes"), std::string::npos)
      << error;
}

TEST(tfrecord, truncated_corrupt_and_trailing_compressed_streams_are_refused) {
  test::temp_dir dir("tfrecord");
  for (const auto c : {tfrecord_compression::gzip, tfrecord_compression::zlib}) {
    const std::string name(to_string(c));
    write_records(dir / name, c, {3000, 3000, 3000});
    const auto bytes = read_bytes(dir / name);
    std::string error;
    write_bytes(dir / "cut", {bytes.begin(), bytes.end() - 40});
    EXPECT_LE(read_all(dir / "cut", error, {.compression = c}).size(), 2u);
    EXPECT_NE(error.find("truncated " + name + " stream: the file ends inside compressed data"), std::string::npos)
        << error;
    auto bad = bytes;
    for (std::size_t i = bad.size() / 2; i < bad.size() / 2 + 16; ++i) bad[i] ^= std::byte{0x5a};
    write_bytes(dir / "bad", bad);
    (void)read_all(dir / "bad", error, {.compression = c});
    EXPECT_NE(error.find("record at byte "), std::string::npos) << error;
    EXPECT_TRUE(error.find("corrupt " + name) != std::string::npos || error.find("bad data CRC") != std::string::npos ||
                error.find("bad length CRC") != std::string::npos)
        << error;
    auto trailing = bytes;
    trailing.push_back(std::byte{'x'});
    write_bytes(dir / "trailing", trailing);
    EXPECT_EQ(read_all(dir / "trailing", error, {.compression = c}).size(), 3u) << "every whole record first";
    EXPECT_NE(error.find("record at byte 9048: corrupt " + name + " file: bytes after the end of the compressed data"),
              std::string::npos)
        << error;
  }
}

TEST(tfrecord, a_compressed_file_read_as_raw_has_a_bad_length_crc) {
  test::temp_dir dir("tfrecord");
  write_records(dir / "g", tfrecord_compression::gzip, {10});
  std::string error;
  EXPECT_TRUE(read_all(dir / "g", error, {.compression = tfrecord_compression::none}).empty());
  EXPECT_NE(error.find("g: record at byte 0: bad length CRC"), std::string::npos) << error;
}

TEST(tfrecord, a_writer_leaves_no_file_unless_closed) {
  test::temp_dir dir("tfrecord");
  {
    tfrecord_writer w(dir / "w");
    w.write(std::string_view("abc"));
    EXPECT_TRUE(fs::exists(dir / "w.part"));
    EXPECT_FALSE(fs::exists(dir / "w"));
  }
  EXPECT_FALSE(fs::exists(dir / "w.part"));
  EXPECT_FALSE(fs::exists(dir / "w"));
  EXPECT_THROW(tfrecord_writer(dir / "x", {.compression = tfrecord_compression::automatic}), config_error);
  EXPECT_THROW(tfrecord_writer(dir / "x", {.level = 12}), config_error);
  EXPECT_THROW(tfrecord_writer(dir / "no" / "such" / "folder"), io_error);
  tfrecord_writer w(dir / "w");
  EXPECT_EQ(w.write(std::string_view("abc")), 0u);
  EXPECT_EQ(w.write(std::string_view("")), 19u);
  w.close();
  EXPECT_EQ(fs::file_size(dir / "w"), 19u + 16u);
  EXPECT_EQ(w.records_written(), 2u);
  EXPECT_THROW(w.write(std::string_view("late")), io_error);
}

}  // namespace tfrecord_test
