#pragma once
// Inputs and files of the hierarchical all-reduce tests: values of varied sign and magnitude (so the order of a
// sum shows in its bits), written and read back as raw floats.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mwstrat::test {

// Element i of rank r: a hash of (r, i) mapped to ±[2^-6, 2^6).
inline float varied_input(int rank, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ULL ^ (i + 1) * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 29;
  const double unit = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
  const double magnitude = std::ldexp(1.0 + unit, static_cast<int>(x % 13) - 6);
  return static_cast<float>((x & 0x100) != 0 ? -magnitude : magnitude);
}

// Field `n` of a comma-separated list ("a,a,b,b"); throws when there are fewer.
inline std::string nth_field(const std::string& list, int n) {
  std::size_t at = 0;
  for (int k = 0; k < n; ++k) {
    at = list.find(',', at);
    if (at == std::string::npos) throw std::runtime_error("'" + list + "' has no field " + std::to_string(n));
    ++at;
  }
  return list.substr(at, list.find(',', at) - at);
}

inline void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<float> v(static_cast<std::size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

}  // namespace mwstrat::test
