#pragma once
// Small writers of IDX files (raw or gzip) for the data tests, and the shared temporary folder.

#include <support/temp_dir.hpp>

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace mwstrat_data_test {

using mwstrat::test::temp_dir;

inline std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> out{0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (const std::uint32_t d : dims) {
    out.push_back(static_cast<std::uint8_t>(d >> 24U));
    out.push_back(static_cast<std::uint8_t>(d >> 16U));
    out.push_back(static_cast<std::uint8_t>(d >> 8U));
    out.push_back(static_cast<std::uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline void write_file(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw std::runtime_error("cannot write " + path.string());
  }
}

inline std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// level 0 stores the bytes uncompressed (the largest a gzip of them can be).
inline std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& bytes, int level = Z_BEST_SPEED) {
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2");
  }
  std::vector<std::uint8_t> out(deflateBound(&zs, static_cast<uLong>(bytes.size())) + 64);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    throw std::runtime_error("deflate");
  }
  return out;
}

// n images of rows x cols with pixel (i, k) = (i * 7 + k) % 256, and labels i % classes.
struct small_set {
  std::vector<std::uint8_t> images;
  std::vector<std::uint8_t> labels;
};
inline small_set make_small_set(std::uint32_t n, std::uint32_t rows, std::uint32_t cols, std::uint32_t classes = 10) {
  std::vector<std::uint8_t> pixels;
  std::vector<std::uint8_t> labels;
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t k = 0; k < rows * cols; ++k) {
      pixels.push_back(static_cast<std::uint8_t>((i * 7 + k) % 256));
    }
    labels.push_back(static_cast<std::uint8_t>(i % classes));
  }
  return {idx_bytes(0x08, {n, rows, cols}, pixels), idx_bytes(0x08, {n}, labels)};
}

}  // namespace mwstrat_data_test
