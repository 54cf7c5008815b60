// detail::inflating_reader alone (tfrecord_test.cpp reads it through TFRecord files): raw, gzip and zlib files
// compressed here with zlib give back their bytes through reads of any size and buffers of any size, gzip members in
// a row read as one stream, and each way a compressed file can be wrong ends the stream on a defect that says what
// and where: a truncated stream, a corrupt header or check value, bytes after the end. A read the operating system
// refuses is an io_error naming the file.
#include <mwstrat/data/detail/inflating_reader.hpp>

#include <support/temp_dir.hpp>

#include "byte_files.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace inflating_reader_test {

using mwstrat::detail::inflating_reader;
using mwstrat::detail::stream_codec;
namespace fs = std::filesystem;

// 300 KB from a small alphabet: compressible, and several inflate buffers long.
std::vector<std::byte> payload(std::size_t n = 300'007) {
  std::vector<std::byte> v(n);
  std::uint32_t x = 12345;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>('a' + (x >> 28));
  }
  return v;
}

// `data` compressed by zlib itself, as one gzip member or one zlib stream.
std::vector<std::byte> deflated(std::span<const std::byte> data, stream_codec codec) {
  z_stream zs{};
  const int bits = codec == stream_codec::gzip ? 16 + MAX_WBITS : MAX_WBITS;
  EXPECT_EQ(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<std::byte> out(deflateBound(&zs, static_cast<uLong>(data.size())) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::vector<std::byte> encoded(std::span<const std::byte> data, stream_codec codec) {
  if (codec == stream_codec::raw) return {data.begin(), data.end()};
  return deflated(data, codec);
}

// A reader over the file at `path`, opened as tfrecord_reader opens it (unbuffered: the reader's buffer is the one).
std::unique_ptr<inflating_reader> reader_of(const fs::path& path, stream_codec codec, std::size_t buffer_bytes = 4096) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path.string());
  std::setvbuf(f, nullptr, _IONBF, 0);
  return std::make_unique<inflating_reader>(f, path.string(), codec, buffer_bytes);
}

// Everything the reader delivers, in reads of `chunk` bytes.
std::vector<std::byte> read_all(inflating_reader& r, std::size_t chunk) {
  std::vector<std::byte> out;
  std::vector<std::byte> piece(chunk);
  for (;;) {
    const std::size_t got = r.read(piece.data(), chunk);
    out.insert(out.end(), piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(got));
    EXPECT_EQ(r.position(), out.size());
    if (got < chunk) return out;  // fewer only where the stream ends
  }
}

bool is_prefix(const std::vector<std::byte>& part, const std::vector<std::byte>& whole) {
  return part.size() <= whole.size() && std::equal(part.begin(), part.end(), whole.begin());
}

const char* codec_name(stream_codec c) {
  return c == stream_codec::gzip ? "gzip" : c == stream_codec::zlib ? "zlib" : "raw";
}

TEST(inflating_reader, raw_gzip_and_zlib_give_back_their_bytes_in_reads_of_any_size) {
  mwstrat::test::temp_dir dir("inflating-reader");
  const auto data = payload();
  for (const auto codec : {stream_codec::raw, stream_codec::gzip, stream_codec::zlib}) {
    const auto file = encoded(data, codec);
    byte_files::write_bytes(dir / "f", file);
    for (const std::size_t buffer : {std::size_t{1}, std::size_t{4096}}) {  // 1: the reader takes its minimum, 64
      for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, data.size() + 1}) {
        SCOPED_TRACE(std::string(codec_name(codec)) + ", buffer " + std::to_string(buffer) + ", reads of " +
                     std::to_string(chunk));
        const auto r = reader_of(dir / "f", codec, buffer);
        std::byte none{};
        EXPECT_EQ(r->read(&none, 0), 0u);
        EXPECT_FALSE(r->ended()) << "a read of 0 bytes ends nothing";
        EXPECT_TRUE(read_all(*r, chunk) == data);
        EXPECT_TRUE(r->ended());
        EXPECT_FALSE(r->defect()) << *r->defect();
        EXPECT_EQ(r->position(), data.size());
        EXPECT_EQ(r->file_position(), file.size());
        EXPECT_EQ(r->read(&none, 1), 0u) << "nothing after the end";
      }
    }
  }
}

TEST(inflating_reader, gzip_members_in_a_row_read_as_one_stream) {
  mwstrat::test::temp_dir dir("inflating-reader");
  const auto data = payload();
  const std::span<const std::byte> all(data);
  std::vector<std::byte> file;
  for (const auto part : {all.first(1000), all.subspan(1000, 0), all.subspan(1000)}) {  // an empty member between
    const auto member = deflated(part, stream_codec::gzip);
    file.insert(file.end(), member.begin(), member.end());
  }
  byte_files::write_bytes(dir / "f.gz", file);
  for (const std::size_t chunk : {std::size_t{999}, data.size()}) {
    const auto r = reader_of(dir / "f.gz", stream_codec::gzip, 100);
    EXPECT_TRUE(read_all(*r, chunk) == data) << "reads of " << chunk;
    EXPECT_FALSE(r->defect()) << *r->defect();
    EXPECT_EQ(r->file_position(), file.size());
  }
}

TEST(inflating_reader, a_truncated_stream_ends_on_a_defect_saying_where_the_file_ended) {
  mwstrat::test::temp_dir dir("inflating-reader");
  const auto data = payload();
  for (const auto codec : {stream_codec::gzip, stream_codec::zlib}) {
    const auto whole = deflated(data, codec);
    for (const std::size_t cut : {std::size_t{0}, std::size_t{1}, whole.size() / 2, whole.size() - 1}) {
      SCOPED_TRACE(std::string(codec_name(codec)) + " cut to " + std::to_string(cut) + " of " +
                   std::to_string(whole.size()));
      byte_files::write_bytes(dir / "cut", {whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut)});
      const auto r = reader_of(dir / "cut", codec, 512);
      const auto got = read_all(*r, 4096);
      EXPECT_TRUE(is_prefix(got, data)) << "what came before the cut is the data's start";
      EXPECT_TRUE(r->ended());
      ASSERT_TRUE(r->defect());
      EXPECT_EQ(*r->defect(), std::string("truncated ") + codec_name(codec) +
                                  " stream: the file ends inside compressed data (after " + std::to_string(cut) +
                                  " bytes of the file, " + std::to_string(got.size()) + " bytes of records)");
      std::byte b{};
      EXPECT_EQ(r->read(&b, 1), 0u) << "nothing after a defect";
    }
  }
  // A raw file has no end to miss: cut anywhere, it ends cleanly.
  byte_files::write_bytes(dir / "raw", {data.begin(), data.begin() + 100});
  const auto r = reader_of(dir / "raw", stream_codec::raw);
  EXPECT_EQ(read_all(*r, 4096).size(), 100u);
  EXPECT_FALSE(r->defect());
}

// The "at file byte N" of a defect, checked to lie inside the file.
std::size_t file_byte_of(const std::string& defect) {
  const auto at = defect.rfind("at file byte ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no file byte in: " << defect;
    return 0;
  }
  return std::stoul(defect.substr(at + 13));
}

TEST(inflating_reader, a_corrupt_stream_ends_on_a_defect_that_names_zlib_s_reason) {
  mwstrat::test::temp_dir dir("inflating-reader");
  const auto data = payload();
  struct damage {
    stream_codec codec;
    std::ptrdiff_t byte;  // from the start, or from the end where negative
    const char* reason;
    bool data_delivered;  // the check value is read after the data
  };
  for (const damage d : {damage{stream_codec::gzip, 0, "incorrect header check", false},
                         damage{stream_codec::zlib, 0, "incorrect header check", false},
                         damage{stream_codec::gzip, -8, "incorrect data check", true},   // the CRC-32
                         damage{stream_codec::gzip, -1, "incorrect length check", true},  // ISIZE
                         damage{stream_codec::zlib, -1, "incorrect data check", true}}) {  // the Adler-32
    SCOPED_TRACE(std::string(codec_name(d.codec)) + ", byte " + std::to_string(d.byte));
    auto file = deflated(data, d.codec);
    const std::size_t at = d.byte >= 0 ? std::size_t(d.byte) : file.size() - std::size_t(-d.byte);
    file[at] ^= std::byte{0x01};
    byte_files::write_bytes(dir / "bad", file);
    const auto r = reader_of(dir / "bad", d.codec, 1000);
    const auto got = read_all(*r, 5000);
    ASSERT_TRUE(r->defect());
    const std::string& m = *r->defect();
    const std::string start =
        std::string("corrupt ") + codec_name(d.codec) + " stream (" + d.reason + ") at file byte ";
    EXPECT_EQ(m.rfind(start, 0), 0u) << m;
    EXPECT_LE(file_byte_of(m), file.size()) << m;
    EXPECT_GE(file_byte_of(m), d.data_delivered ? at : 0) << m;
    if (d.data_delivered) EXPECT_TRUE(got == data);
    else EXPECT_TRUE(got.empty());
  }
}

TEST(inflating_reader, bytes_after_the_compressed_data_are_a_defect_after_all_of_it) {
  mwstrat::test::temp_dir dir("inflating-reader");
  const auto data = payload(5000);
  const auto gz = deflated(data, stream_codec::gzip);
  const auto zl = deflated(data, stream_codec::zlib);
  struct trailing {
    stream_codec codec;
    std::vector<std::byte> file;
    const char* end;
  };
  auto gz_x = gz;
  gz_x.push_back(std::byte{'x'});
  auto gz_half_magic = gz;  // gzip's first magic byte, not its second
  gz_half_magic.insert(gz_half_magic.end(), {std::byte{0x1f}, std::byte{'x'}});
  auto zl_zl = zl;  // a second zlib stream: a zlib file holds one
  zl_zl.insert(zl_zl.end(), zl.begin(), zl.end());
  auto zl_gz = zl;  // nor is a gzip member after it one
  zl_gz.insert(zl_gz.end(), gz.begin(), gz.end());
  for (const auto& t : {trailing{stream_codec::gzip, gz_x, "another gzip member"},
                        trailing{stream_codec::gzip, gz_half_magic, "another gzip member"},
                        trailing{stream_codec::zlib, zl_zl, "part of it"},
                        trailing{stream_codec::zlib, zl_gz, "part of it"}}) {
    SCOPED_TRACE(codec_name(t.codec));
    byte_files::write_bytes(dir / "f", t.file);
    const auto r = reader_of(dir / "f", t.codec, 64);
    EXPECT_TRUE(read_all(*r, 333) == data);
    ASSERT_TRUE(r->defect());
    const std::size_t stream_bytes = t.codec == stream_codec::gzip ? gz.size() : zl.size();
    EXPECT_EQ(*r->defect(), std::string("corrupt ") + codec_name(t.codec) +
                                " file: bytes after the end of the compressed data at file byte " +
                                std::to_string(stream_bytes) + " are not " + t.end);
  }
}

TEST(inflating_reader, a_read_the_operating_system_refuses_is_an_io_error_naming_the_file) {
  mwstrat::test::temp_dir dir("inflating-reader");
  for (const auto codec : {stream_codec::raw, stream_codec::gzip}) {
    const auto r = reader_of(dir.path(), codec);  // glibc opens a directory for reading; read(2) then fails
    std::byte b[16];
    try {
      (void)r->read(b, sizeof b);
      ADD_FAILURE() << codec_name(codec) << ": reading a directory did not throw";
    } catch (const mwstrat::io_error& e) {
      EXPECT_EQ(std::string(e.what()),
                "[mwstrat.tfrecord] cannot read " + dir.path().string() + ": " + std::strerror(EISDIR));
    }
  }
}

}  // namespace inflating_reader_test
