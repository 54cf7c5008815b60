// libFuzzer target: any bytes given to the IDX parser (raw or as gzip) either parse into a consistent array or
// raise mwstrat::data_error; never a crash, a hang, another exception, or an unbounded allocation.

#include <mwstrat/data/idx.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  mwstrat::data::idx_read_options options;
  options.max_bytes = std::size_t{1} << 22U;
  try {
    const auto a = mwstrat::data::parse_idx(std::vector<std::uint8_t>(bytes, bytes + size), "fuzz-input", options);
    std::size_t expected = mwstrat::data::element_size(a.type);
    for (const std::size_t d : a.dims) {
      expected *= d;
    }
    if (a.data.size() != expected || a.dims.empty()) {
      std::abort();
    }
    (void)a.to_vector<double>();
  } catch (const mwstrat::data_error&) {
  }
  return 0;
}
