// The direct path's filter gradient (the kernels' gradient summed over the batch), for the shapes Winograd's filter
// gradient (conv2d_winograd_filter.hpp) does not take: strided and 1x1 convolutions, and every convolution under
// the direct path. Its tiles also run that Winograd path's products.
//
// A filter-gradient tile is MR patch values (broadcast) by NV vectors of output channels, summed over a chunk's
// pixels; where a kernel row's patch values are 2 or 3 whole vectors, a transposed tile (vectors along the patch
// values, broadcasts of the output gradient) loads fewer values per FMA. The batch is summed in fixed chunks of
// images (each chunk one task into its own partial sum, the partial sums then added by the aligned tree of
// nn/detail/batch_sum.hpp), so its bits depend neither on the thread count nor on how a power-of-two global batch is
// split among replicas.

#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#define MWSTRAT_CONV_FILTER_UNROLL _Pragma("GCC unroll 32")

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(nn::kernels::direct) {

// Patch values per filter-gradient tile (their broadcasts come from one pointer at fixed offsets).
inline constexpr int filter_max_mr = accumulator_budget;

// ---------------------------------------------------------------------------------------------- tiles

// Filter-gradient tile: out[i * ldo + v * L] = sum over the images, rows and columns of a chunk of
// a[img * a_img + r * a_row + c * a_px + i] * g[img * g_img + (r * cols + c) * g_px + v * L], pixel by pixel after
// out's own values with `accumulate` (continuing sums an earlier call left there).
template <int MR, int NV>
void filter_tile(std::size_t images, std::size_t rows, std::size_t cols, const float* a, std::ptrdiff_t a_img,
                 std::ptrdiff_t a_row, std::ptrdiff_t a_px, const float* g, std::ptrdiff_t g_img, std::ptrdiff_t g_px,
                 float* out, std::size_t ldo, bool accumulate) noexcept {
  V acc[MR][NV];
  const V zero = {};
  MWSTRAT_CONV_FILTER_UNROLL for (int i = 0; i < MR; ++i)
    MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NV; ++v) {
      if (accumulate) detail::vload(acc[i][v], out + static_cast<std::size_t>(i) * ldo + static_cast<std::size_t>(v * lanes));
      else acc[i][v] = zero;
    }
  for (std::size_t n = 0; n < images; ++n)
    for (std::size_t r = 0; r < rows; ++r) {
      const float* ar = a + static_cast<std::ptrdiff_t>(n) * a_img + static_cast<std::ptrdiff_t>(r) * a_row;
      const float* gr = g + static_cast<std::ptrdiff_t>(n) * g_img + static_cast<std::ptrdiff_t>(r * cols) * g_px;
      // Pointers stepped rather than indexed: a broadcast FMA from [base + disp] stays one fused uop, where an
      // indexed address is split in two at issue on Intel cores (the front end then limits the loop).
      const float* gc = gr;
      const float* ac = ar;
      for (std::size_t c = 0; c < cols; ++c, gc += g_px, ac += a_px) {
        V gv[NV];
        MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NV; ++v) {
          detail::vload(gv[v], gc + v * lanes);
          detail::in_register(gv[v]);
        }
        MWSTRAT_CONV_FILTER_UNROLL for (int i = 0; i < MR; ++i) {
          const float s = ac[i];
          MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NV; ++v) detail::vfma(acc[i][v], s, gv[v]);
        }
      }
    }
  MWSTRAT_CONV_FILTER_UNROLL for (int i = 0; i < MR; ++i)
    MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NV; ++v)
      detail::vstore(out + static_cast<std::size_t>(i) * ldo + static_cast<std::size_t>(v * lanes), acc[i][v]);
}

// The same sums, transposed: vectors along the patch values, broadcasts of the output gradient. state[(j * NVK + v)
// * L + l] += sum over `rows` rows of `cols` pixels of a[r * a_row + c * a_px + v * L + l] * g[(r * cols + c) * g_px
// + j], continuing the sums the state holds, pixel by pixel in order: the same operations on each sum as filter_tile
// (a product is exact before its one rounding, whichever factor is broadcast), so the same bits. Per pixel it loads
// NVK vectors and MRC scalars for NVK * MRC FMAs, where filter_tile loads one scalar per FMA when the output channels
// are one vector: 11 loads for 24 FMAs instead of 25, which on a core with two FMA units was the limit.
template <int NVK, int MRC>
void filter_tile_transposed(std::size_t rows, std::size_t cols, const float* a, std::ptrdiff_t a_row,
                            std::ptrdiff_t a_px, const float* g, std::ptrdiff_t g_px, float* state) noexcept {
  V acc[MRC][NVK];
  MWSTRAT_CONV_FILTER_UNROLL for (int j = 0; j < MRC; ++j)
    MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NVK; ++v) detail::vload(acc[j][v], state + (j * NVK + v) * lanes);
  for (std::size_t r = 0; r < rows; ++r) {
    // Pointers stepped rather than indexed: a broadcast FMA from [base + disp] stays one fused uop.
    const float* ac = a + static_cast<std::ptrdiff_t>(r) * a_row;
    const float* gc = g + static_cast<std::ptrdiff_t>(r * cols) * g_px;
    for (std::size_t c = 0; c < cols; ++c, ac += a_px, gc += g_px) {
      V av[NVK];
      MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NVK; ++v) {
        detail::vload(av[v], ac + v * lanes);
        detail::in_register(av[v]);
      }
      MWSTRAT_CONV_FILTER_UNROLL for (int j = 0; j < MRC; ++j) {
        const float s = gc[j];
        MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NVK; ++v) detail::vfma(acc[j][v], s, av[v]);
      }
    }
  }
  MWSTRAT_CONV_FILTER_UNROLL for (int j = 0; j < MRC; ++j)
    MWSTRAT_CONV_FILTER_UNROLL for (int v = 0; v < NVK; ++v) detail::vstore(state + (j * NVK + v) * lanes, acc[j][v]);
}
using transposed_tile_fn = void (*)(std::size_t, std::size_t, const float*, std::ptrdiff_t, std::ptrdiff_t,
                                    const float*, std::ptrdiff_t, float*) noexcept;

// The transposed tiles' shapes: three vectors of patch values (a 3-wide kernel row of whole vectors of channels) or
// two, by as many output channels as leave the accumulators their budget (8 with AVX-512, 4 with 16 registers).
inline constexpr int transposed_mrc = accumulator_budget / 3;
inline std::size_t transposed_vectors(std::size_t K, std::size_t out_c) {
  const auto L = static_cast<std::size_t>(lanes);
  if (out_c % static_cast<std::size_t>(transposed_mrc) != 0 || K % L != 0) return 0;
  if ((K / L) % 3 == 0) return 3;
  if ((K / L) % 2 == 0) return 2;
  return 0;
}

// Table of the instantiations a plan may pick: [NV - 1][MR - 1], null where MR * NV exceeds the budget.
using filter_tile_fn = void (*)(std::size_t, std::size_t, std::size_t, const float*, std::ptrdiff_t, std::ptrdiff_t,
                                std::ptrdiff_t, const float*, std::ptrdiff_t, std::ptrdiff_t, float*,
                                std::size_t, bool) noexcept;

template <int NV, int MR>
constexpr filter_tile_fn filter_tile_entry() {
  if constexpr (MR * NV <= accumulator_budget) return &filter_tile<MR, NV>;
  else return nullptr;
}

template <int NV, std::size_t... M>
constexpr std::array<filter_tile_fn, filter_max_mr> filter_tile_row(std::index_sequence<M...>) {
  return {filter_tile_entry<NV, static_cast<int>(M) + 1>()...};
}

template <std::size_t... N>
constexpr std::array<std::array<filter_tile_fn, filter_max_mr>, max_nv> filter_tile_table(std::index_sequence<N...>) {
  return {filter_tile_row<static_cast<int>(N) + 1>(std::make_index_sequence<filter_max_mr>{})...};
}

inline constexpr auto filter_tiles = filter_tile_table(std::make_index_sequence<max_nv>{});

// ---------------------------------------------------------------------------------------------- planning

// The filter gradient's (NV, MR): `extent` patch values by `vectors` vectors of output channels. Every tile is a
// pass over the chunk's pixels reading, per pixel, NV vectors of the output gradient and a line or two of the input
// from L2 (about 20 bytes a cycle), and doing MR * NV FMAs; the cheapest cover wins.
inline blocking filter_plan(std::size_t extent, std::size_t vectors) {
  blocking best;
  double best_cost = 1e300;
  for (int nv = max_nv; nv >= 1; --nv) {
    const auto n = static_cast<std::size_t>(nv);
    if (vectors % n != 0) continue;
    const int mr_top = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::min(filter_max_mr, accumulator_budget / nv)), extent));
    for (int mr = mr_top; mr >= 1; --mr) {
      const auto m = static_cast<std::size_t>(mr);
      const auto pass = [&](std::size_t mm) {
        const double bytes = static_cast<double>(n * sizeof(V) + (mm * sizeof(float) > 64 ? 128 : 96));
        return std::max(static_cast<double>(std::max<std::size_t>(mm * n, 12)), bytes / 20.0) + 0.01 * bytes / 20.0;
      };
      double cost = static_cast<double>(extent / m) * pass(m) + (extent % m != 0 ? pass(extent % m) : 0.0);
      cost *= static_cast<double>(vectors / n);
      if (cost < best_cost - 1e-9) {
        best_cost = cost;
        best = {nv, mr};
      }
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------- filter gradient

// Images per chunk of the batch sum: the chunk's padded input and output gradient in about 1 MiB (an L2 of the
// machine it was tuned on; every tile re-reads them; measured better than 128-512 KiB, fewer partial sums), at most
// 16 images, fixed by the shape; a power of two, so the chunks' tree is batch-split invariant (detail/batch_sum.hpp).
inline std::size_t filter_chunk(const conv2d_geometry& g, std::size_t padded_image) {
  const std::size_t bytes = (padded_image + g.out_h * g.out_w * g.out_c) * sizeof(float);
  return detail::power_of_two_floor(
      std::clamp<std::size_t>((std::size_t{1024} << 10) / std::max<std::size_t>(bytes, 1), 1, 16));
}

// sum[f] = the sum over `pixels` pixels of x[p * C + f], pixel by pixel (a chunk's bias gradient); C whole vectors.
inline void sum_pixels(const float* x, std::size_t pixels, std::size_t C, float* sum) noexcept {
  for (std::size_t f = 0; f < C; f += static_cast<std::size_t>(lanes)) {
    V acc = {};
    for (std::size_t p = 0; p < pixels; ++p) {
      V v;
      detail::vload(v, x + p * C + f);
      acc += v;
    }
    detail::vstore(sum + f, acc);
  }
}

inline void backward_filter(const conv2d_geometry& g, const float* input, const float* grad_output,
                            float* grad_kernel, float* grad_bias, conv2d_workspace& ws) {
  const std::size_t hp = padded_extent(g.in_h, g.pad_top, g.out_h, g.stride_h, g.kernel_h);
  const std::size_t wp = padded_extent(g.in_w, g.pad_left, g.out_w, g.stride_w, g.kernel_w);
  const std::size_t C = g.in_c, OC = g.out_c;
  const std::size_t chunk = filter_chunk(g, hp * wp * C);
  const staged_images staged(input, g.in_h, g.in_w, C, hp, wp, g.pad_top, g.pad_left, nullptr, chunk, ws.buffer_a);

  const std::size_t K = g.kernel_w * C;  // one kernel row's patch values: [kx][c]
  const std::size_t vectors = OC / lanes;
  const blocking b = filter_plan(K, vectors);
  const std::size_t width = static_cast<std::size_t>(b.nv * lanes);
  const std::size_t blocks = vectors / static_cast<std::size_t>(b.nv);
  const std::size_t mr = static_cast<std::size_t>(b.mr);
  const std::size_t rem = K % mr;
  const filter_tile_fn full = filter_tiles[static_cast<std::size_t>(b.nv - 1)][mr - 1];
  const filter_tile_fn tail = rem != 0 ? filter_tiles[static_cast<std::size_t>(b.nv - 1)][rem - 1] : nullptr;
  const std::size_t nvk = transposed_vectors(K, OC);
  const transposed_tile_fn transposed = nvk == 3   ? &filter_tile_transposed<3, transposed_mrc>
                                       : nvk == 2 ? &filter_tile_transposed<2, transposed_mrc>
                                                  : nullptr;
  // The transposed tiles run over blocks of output rows small enough to stay in L1 (about 24 KiB of input and output
  // gradient), every tile of every kernel row over one block before the next, each tile's sums kept in a state of
  // its own (its accumulators, per thread), so the chunk is read from L2 once rather than once per tile.
  const std::size_t mrc = static_cast<std::size_t>(transposed_mrc), kw = nvk * static_cast<std::size_t>(lanes);
  const std::size_t row_tiles = nvk != 0 ? (OC / mrc) * (K / kw) : 0;  // tiles of one kernel row
  const std::size_t tile_floats = mrc * kw;
  const std::size_t state_floats = g.kernel_h * row_tiles * tile_floats;
  const std::size_t block_rows = std::clamp<std::size_t>(
      (std::size_t{24} << 10) / ((g.stride_h * wp * C + g.out_w * OC) * sizeof(float)), 1, g.out_h);
  const auto threads = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  float* states = transposed != nullptr ? conv2d_workspace::ensure(ws.buffer_b, threads * state_floats) : nullptr;

  const std::size_t wsize = g.kernel_h * K * OC;
  const std::size_t chunks = detail::ceil_div(g.batch, chunk);
  const std::size_t stride = wsize + OC;  // one chunk's partial sums: the kernel's, then the bias's
  float* part = conv2d_workspace::ensure(ws.buffer_c, chunks * stride);
  const auto a_img = static_cast<std::ptrdiff_t>(hp * wp * C);
  const auto a_row = static_cast<std::ptrdiff_t>(g.stride_h * wp * C);
  const auto a_px = static_cast<std::ptrdiff_t>(g.stride_w * C);
  const auto g_img = static_cast<std::ptrdiff_t>(g.out_h * g.out_w * OC);
  const auto g_px = static_cast<std::ptrdiff_t>(OC);
  // One task per chunk of images (its padded copy made by the task, in cache), into the chunk's own partial sums.
  detail::parallel_tasks(chunks, [&](std::size_t t) {
    const std::size_t n0 = t * chunk;
    const std::size_t images = std::min(g.batch, n0 + chunk) - n0;
    const float* padded = staged.stage(n0, images);
    const float* go = grad_output + n0 * g.out_h * g.out_w * OC;
    if (transposed != nullptr) {
      const auto slot = static_cast<std::size_t>(std::max(0, tbb::this_task_arena::current_thread_index()));
      float* state = states + slot * state_floats;
      std::fill_n(state, state_floats, 0.0f);
      for (std::size_t n = 0; n < images; ++n)
        for (std::size_t r0 = 0; r0 < g.out_h; r0 += block_rows) {
          const std::size_t rows = std::min(block_rows, g.out_h - r0);
          const float* gb = go + (n * g.out_h + r0) * g.out_w * OC;
          float* st = state;
          for (std::size_t ky = 0; ky < g.kernel_h; ++ky) {
            const float* ab = padded + static_cast<std::ptrdiff_t>(n) * a_img + static_cast<std::ptrdiff_t>(r0) * a_row +
                              static_cast<std::ptrdiff_t>(ky * wp * C);
            for (std::size_t j = 0; j < OC; j += mrc)
              for (std::size_t k = 0; k < K; k += kw, st += tile_floats)
                transposed(rows, g.out_w, ab + k, a_row, a_px, gb + j, g_px, st);
          }
        }
      // Each tile's state, (j, v, lane) = the sum of patch value k + v * L + lane against output channel j, into
      // the chunk's partial sums, [ky][k][oc].
      const float* st = state;
      for (std::size_t ky = 0; ky < g.kernel_h; ++ky)
        for (std::size_t j = 0; j < OC; j += mrc)
          for (std::size_t k = 0; k < K; k += kw, st += tile_floats) {
            float* out = part + t * stride + (ky * K + k) * OC + j;
            for (std::size_t jj = 0; jj < mrc; ++jj)
              for (std::size_t kk = 0; kk < kw; ++kk) out[kk * OC + jj] = st[jj * kw + kk];
          }
    }
    for (std::size_t ky = 0; ky < g.kernel_h && transposed == nullptr; ++ky) {
      const float* a = padded + ky * wp * C;
      float* out = part + t * stride + ky * K * OC;
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        std::size_t k = 0;
        for (; k + mr <= K; k += mr)
          full(images, g.out_h, g.out_w, a + k, a_img, a_row, a_px, go + blk * width, g_img, g_px,
               out + k * OC + blk * width, OC, false);
        if (tail != nullptr)
          tail(images, g.out_h, g.out_w, a + k, a_img, a_row, a_px, go + blk * width, g_img, g_px,
               out + k * OC + blk * width, OC, false);
      }
    }
    sum_pixels(go, images * g.out_h * g.out_w, OC, part + t * stride + wsize);
  });
  detail::combine_blocks(part, chunks, stride, stride);
  std::copy_n(part, wsize, grad_kernel);
  if (grad_bias != nullptr) std::copy_n(part + wsize, OC, grad_bias);
}

}  // namespace nn::kernels::direct

#undef MWSTRAT_CONV_FILTER_UNROLL

#endif  // MWSTRAT_ISA_NS
