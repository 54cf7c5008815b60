// Sums over the batch that do not depend on how the global batch is split among replicas.
//
// A layer's sum over its batch (a filter gradient, batch norm's statistics) is taken as partial sums over fixed
// blocks of examples — a power of two of them, fixed by the layer's shape, never by the batch — combined by an
// aligned binary tree: block i absorbs block i + 2^l at level l. For R replicas whose batch is the same power-of-two
// number of blocks, each replica's result is exactly one node of the tree one replica over the whole global batch
// would build, and a two-replica sum adds the two halves as that tree's root does; IEEE addition is commutative,
// so 2 replicas × B give the bits of 1 replica × 2B (with the gradient mean's power-of-two scalings, which are
// exact). Thread-count invariant too: the tree's shape is the block count's.

#include <mwstrat/nn/detail/parallel.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

/// The largest power of two not above `n` (1 for 0): block sizes are rounded to one, so blocks stay aligned to
/// every power-of-two batch split.
constexpr std::size_t power_of_two_floor(std::size_t n) noexcept { return n <= 1 ? 1 : std::bit_floor(n); }

/// Adds `blocks` rows of partial sums (row b at parts + b * stride, `width` values each) by the aligned binary
/// tree; the total is left in row 0. Parallel over columns, the same bits for any thread count.
template <class T>
void combine_blocks(T* parts, std::size_t blocks, std::size_t stride, std::size_t width) {
  if (blocks <= 1) return;
  parallel_chunks(width, 4096, [&](std::size_t j0, std::size_t j1) {
    for (std::size_t step = 1; step < blocks; step *= 2)
      for (std::size_t b = 0; b + step < blocks; b += 2 * step) {
        T* to = parts + b * stride;
        const T* from = parts + (b + step) * stride;
        for (std::size_t j = j0; j < j1; ++j) to[j] += from[j];
      }
  });
}

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
