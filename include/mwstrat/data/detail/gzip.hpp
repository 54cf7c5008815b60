#pragma once
/// \file
/// Whole-file gzip inflation with zlib, for IDX files shipped as `.gz` (Fashion-MNIST).

#include <mwstrat/error.hpp>

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

/// True when the bytes start like a gzip member (RFC 1952 magic 1f 8b).
[[nodiscard]] inline bool looks_gzipped(std::span<const std::uint8_t> bytes) noexcept {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

/// Inflates every gzip member in `in` (concatenated members are one file, as gzip(1) treats them), checking each
/// member's CRC-32 and length; refuses to produce more than `max_bytes`. Throws data_error naming `path`.
/// zlib takes at most `slice` bytes of input a call (its counts are 32-bit; 1 GiB unless a test asks for less), and
/// a member may run on through any number of slices.
[[nodiscard]] inline std::vector<std::uint8_t> gunzip(std::span<const std::uint8_t> in, const std::string& path,
                                                      std::size_t max_bytes, std::size_t slice = std::size_t{1} << 30) {
  auto fail = [&](const std::string& what) -> data_error {
    return data_error({"idx"}, path, path + ": " + what);
  };
  std::vector<std::uint8_t> out;
  out.reserve(in.size() * 4);  // IDX images compress about 4:1; a guess, not a limit
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    throw fail("zlib could not start inflating");
  }
  struct end_guard {
    z_stream* zs;
    ~end_guard() { inflateEnd(zs); }
  } guard{&zs};

  std::size_t consumed = 0;
  constexpr std::size_t chunk = std::size_t{1} << 20;
  while (consumed < in.size()) {
    zs.next_in = const_cast<Bytef*>(in.data() + consumed);  // zlib's API is not const-correct; it only reads
    const std::size_t avail = in.size() - consumed;
    zs.avail_in = static_cast<uInt>(std::min({avail, std::max<std::size_t>(slice, 1), std::size_t{1} << 30}));
    const uInt given = zs.avail_in;
    int rc = Z_OK;
    do {
      if (out.size() >= max_bytes) {
        throw fail("decompressed size exceeds the limit of " + std::to_string(max_bytes) + " bytes");
      }
      const std::size_t room = std::min(chunk, max_bytes - out.size());
      const std::size_t before = out.size();
      out.resize(before + room);
      zs.next_out = out.data() + before;
      zs.avail_out = static_cast<uInt>(room);
      rc = inflate(&zs, Z_NO_FLUSH);
      out.resize(before + (room - zs.avail_out));
      if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
        throw fail(std::string("corrupt gzip stream (") + (zs.msg != nullptr ? zs.msg : "bad data") + ") at input byte " +
                   std::to_string(consumed + (given - zs.avail_in)));
      }
      if (rc == Z_MEM_ERROR) {
        throw fail("zlib ran out of memory");
      }
      if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
        break;  // input exhausted mid-member: reported below as truncation
      }
    } while (rc != Z_STREAM_END && (zs.avail_in > 0 || zs.avail_out == 0));
    consumed += given - zs.avail_in;
    if (rc != Z_STREAM_END) {
      if (consumed < in.size()) {
        continue;  // this slice is used up (the loop above leaves only then): the member goes on in the next one
      }
      throw fail("truncated gzip stream: input ended after " + std::to_string(in.size()) +
                 " bytes inside a compressed member (" + std::to_string(out.size()) + " bytes inflated so far)");
    }
    // Another member may follow; anything that is not one is trailing garbage.
    if (consumed < in.size()) {
      if (!looks_gzipped(in.subspan(consumed))) {
        throw fail("corrupt gzip file: " + std::to_string(in.size() - consumed) +
                   " bytes after the end of the compressed data are not a gzip member");
      }
      if (inflateReset(&zs) != Z_OK) {
        throw fail("zlib could not restart for the next gzip member");
      }
    }
  }
  if (in.empty()) {
    throw fail("empty gzip file");
  }
  return out;
}

}  // namespace mwstrat::detail
