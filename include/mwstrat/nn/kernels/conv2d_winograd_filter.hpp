// The filter gradient of a 3x3 stride-1 convolution by Winograd's F(4x4, 3x3), transposed. The forward pass's
// output tile is y = A^T [(G g G^T) . (B^T d B)] A, so the sum over its outputs of dy . y is the sum over the 36
// points of (A dy A^T) . (G g G^T) . (B^T d B), and its gradient in g is G^T [(A dy A^T) . (B^T d B)] G. Summed over
// every tile of the batch before the last transform:
//   S[xi][c][f] = sum over tiles of (B^T d B)[xi][c] * (A dy A^T)[xi][f],   dW[.][.][c][f] = G^T S[.][c][f] G,
// 36 GEMMs of (C x tiles) by (tiles x F): a pair of channels costs 36 multiplies per 4x4 tile where the direct sums
// need 144. The GEMMs run on the direct path's filter-gradient tiles; the transforms are adds and small multiples.
//
// Bits: the batch is summed in the direct path's fixed chunks of images (filter_chunk: each chunk's tiles, in
// order, into its own sums, transformed, then the chunks added by the aligned tree of nn/detail/batch_sum.hpp), so
// they depend neither on the thread count nor on how a power-of-two global batch is split among replicas. They
// differ from the direct path's by the transforms' rounding (tests/nn/conv2d_kernels_test.cpp bounds the error
// against double sums). The bias gradient is the direct path's sum, so its bits are the same.

#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#define MWSTRAT_WINOGRAD_FILTER_UNROLL _Pragma("GCC unroll 36")

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(nn::kernels::winograd) {

/// Whether the filter gradient takes this path: the shapes the forward pass's Winograd path takes, with room for
/// whole 4x4 output tiles (smaller outputs take the direct kernels).
inline bool filter_applies(const conv2d_geometry& g) { return applies(g) && tile_size(g) == 4; }

// (A dy A^T) of one tile's output gradient: dy the tile's top-left value in an NHWC output gradient `out_w` pixels
// wide with F channels, `rows` x `cols` of its 4 x 4 values inside the output (the rest taken as zeros); point xi
// (row r, column x) of channel f goes to out[xi * xi_stride + f]. Channels and Stride: std::size_t or fixed<N>
// (conv2d_winograd.hpp).
template <class Channels, class Stride>
void transform_output_gradient_tile(const float* dy, std::size_t out_w, Channels F, std::size_t rows,
                                    std::size_t cols, float* out, Stride xi_stride) noexcept {
  using T = transforms<4>;
  constexpr std::size_t alpha = T::alpha, m = 4;
  constexpr auto L = static_cast<std::size_t>(lanes);
  const auto f_count = static_cast<std::size_t>(F);
  const bool whole = rows == m && cols == m;
  for (std::size_t f = 0; f < f_count; f += L) {
    V t[alpha][alpha];  // t[r][x]: column x transformed (rows 0..3 of dy into 6 points), then each row
    MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t x = 0; x < m; ++x) {
      V col[alpha];
      MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t r = 0; r < m; ++r) {
        if (whole || (r < rows && x < cols)) detail::vload(col[r], dy + (r * out_w + x) * f_count + f);
        else col[r] = V{};
      }
      T::output_gradient(col, 1);
      MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t r = 0; r < alpha; ++r) t[r][x] = col[r];
    }
    MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t r = 0; r < alpha; ++r) {
      T::output_gradient(t[r], 1);
      MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t x = 0; x < alpha; ++x)
        detail::vstore(out + (r * alpha + x) * static_cast<std::size_t>(xi_stride) + f, t[r][x]);
    }
  }
}

// The tiles of a filter-gradient pass for C input and F output channels: as many as keep the pass's transformed
// inputs and output gradients in about 128 KiB, and at least 16, so that the products outweigh loading and storing
// the sums.
constexpr std::size_t filter_pass_tiles(std::size_t C, std::size_t F) {
  constexpr std::size_t P = transforms<4>::alpha * transforms<4>::alpha;
  return std::max<std::size_t>(16, (std::size_t{128} << 10) / (P * (C + F) * sizeof(float)));
}

// A point's rows in a pass's buffers: a cache line more than the pass's tiles apart (at a multiple of 4 KiB, a
// tile's 36 stores would fall in one set of L1 and evict each other).
constexpr std::size_t filter_point_stride(std::size_t channels, std::size_t pass_tiles) {
  return pass_tiles * channels + static_cast<std::size_t>(lanes);
}

/// grad_kernel (HWIO) and grad_bias (nullable) = the gradients summed over the batch; overwritten. The geometry is
/// one filter_applies() takes.
inline void backward_filter(const conv2d_geometry& g, const float* input, const float* grad_output,
                            float* grad_kernel, float* grad_bias, conv2d_workspace& ws) {
  using T = transforms<4>;
  constexpr std::size_t alpha = T::alpha, P = alpha * alpha, m = 4;
  constexpr auto L = static_cast<std::size_t>(lanes);
  const std::size_t C = g.in_c, F = g.out_c;
  const std::size_t th = (g.out_h + m - 1) / m, tw = (g.out_w + m - 1) / m, tiles = th * tw;
  const std::size_t hp = m * th + 2, wp = m * tw + 2;
  // Images per chunk, sized as when each image was copied padded (it is read in place now): the sums' bits stay.
  const std::size_t chunk = direct::filter_chunk(g, hp * wp * C);
  const auto pad_top = static_cast<std::ptrdiff_t>(g.pad_top), pad_left = static_cast<std::ptrdiff_t>(g.pad_left);

  const direct::blocking b = direct::filter_plan(C, F / L);
  const std::size_t width = static_cast<std::size_t>(b.nv) * L;
  const std::size_t mr = static_cast<std::size_t>(b.mr);
  const std::size_t rem = C % mr;
  const direct::filter_tile_fn full = direct::filter_tiles[static_cast<std::size_t>(b.nv - 1)][mr - 1];
  const direct::filter_tile_fn tail =
      rem != 0 ? direct::filter_tiles[static_cast<std::size_t>(b.nv - 1)][rem - 1] : nullptr;

  // Each thread's slot: a pass's transformed inputs Vt[xi][tile][C] and output gradients Yt[xi][tile][F], then the
  // chunk's sums S[xi][C][F]; the pass's tiles are transformed and then multiplied while they are in cache. The
  // point strides are those of a full pass even when a chunk has fewer tiles, so that they are compile-time
  // constants for the channel counts with_fixed_channels fixes.
  const std::size_t chunk_tiles = chunk * tiles;
  const std::size_t full_pass = filter_pass_tiles(C, F), pass_tiles = std::min(chunk_tiles, full_pass);
  const std::size_t v_stride = filter_point_stride(C, full_pass), y_stride = filter_point_stride(F, full_pass);
  const std::size_t slot_size = P * (v_stride + y_stride + C * F);
  const auto threads = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  float* slots = conv2d_workspace::ensure(ws.buffer_b, threads * slot_size);

  const std::size_t wsize = 9 * C * F;
  const std::size_t chunks = detail::ceil_div(g.batch, chunk);
  const std::size_t stride = wsize + F;  // one chunk's partial sums: the kernel's, then the bias's
  float* part = conv2d_workspace::ensure(ws.buffer_c, chunks * stride);
  const auto a_px = static_cast<std::ptrdiff_t>(C);
  const auto g_px = static_cast<std::ptrdiff_t>(F);

  detail::parallel_tasks(chunks, [&](std::size_t task) {
    const std::size_t n0 = task * chunk;
    const std::size_t images = std::min(g.batch, n0 + chunk) - n0;
    const std::size_t total = images * tiles;  // the chunk's tiles, image by image
    const float* in = input + n0 * g.in_h * g.in_w * C;  // read in place (transform_image_tile)
    const float* go = grad_output + n0 * g.out_h * g.out_w * F;
    const auto slot = static_cast<std::size_t>(std::max(0, tbb::this_task_arena::current_thread_index()));
    float* Vt = slots + slot * slot_size;
    float* Yt = Vt + P * v_stride;
    float* S = Yt + P * y_stride;

    for (std::size_t t0 = 0; t0 < total; t0 += pass_tiles) {
      const std::size_t count = std::min(pass_tiles, total - t0);
      const auto transform_pass = [&](auto Cc, auto Fc, auto v_step, auto y_step) {
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t n = (t0 + i) / tiles, t = (t0 + i) % tiles, ty = t / tw, tx = t % tw;
          transform_image_tile<m>(in + n * g.in_h * g.in_w * C, g.in_h, g.in_w, Cc,
                                  static_cast<std::ptrdiff_t>(m * ty) - pad_top,
                                  static_cast<std::ptrdiff_t>(m * tx) - pad_left, Vt + i * C, v_step);
          transform_output_gradient_tile(go + ((n * g.out_h + m * ty) * g.out_w + m * tx) * F, g.out_w, Fc,
                                         std::min(m, g.out_h - m * ty), std::min(m, g.out_w - m * tx), Yt + i * F,
                                         y_step);
        }
      };
      // With C = F of a fixed count, the strides are fixed too (the same values as v_stride and y_stride).
      const auto transform_pass_fixed = [&](auto Cc) {
        if constexpr (std::is_same_v<decltype(Cc), std::size_t>) {
          transform_pass(C, F, v_stride, y_stride);
        } else {
          constexpr std::size_t c_fixed = decltype(Cc)::value;
          constexpr std::size_t step = filter_point_stride(c_fixed, filter_pass_tiles(c_fixed, c_fixed));
          transform_pass(Cc, Cc, fixed<step>{}, fixed<step>{});
        }
      };
      if (C == F) with_fixed_channels(C, transform_pass_fixed);
      else transform_pass(C, F, v_stride, y_stride);
      // S[xi] (+)= Vt[xi]^T Yt[xi], each sum over the chunk's tiles in order, pass after pass.
      const bool accumulate = t0 > 0;
      for (std::size_t xi = 0; xi < P; ++xi) {
        const float* a = Vt + xi * v_stride;
        const float* y = Yt + xi * y_stride;
        float* s = S + xi * C * F;
        for (std::size_t f = 0; f < F; f += width) {
          std::size_t c = 0;
          for (; c + mr <= C; c += mr)
            full(1, 1, count, a + c, 0, 0, a_px, y + f, 0, g_px, s + c * F + f, F, accumulate);
          if (tail != nullptr) tail(1, 1, count, a + c, 0, 0, a_px, y + f, 0, g_px, s + c * F + f, F, accumulate);
        }
      }
    }
    // dW = G^T S G per pair of channels, a vector of output channels at a time, into the chunk's partial sums.
    float* dw = part + task * stride;
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t f = 0; f < F; f += L) {
        V rowsum[3][alpha];  // G^T over the rows of the 6 x 6 points, for each column
        MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t x = 0; x < alpha; ++x) {
          V col[alpha];
          MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t r = 0; r < alpha; ++r)
            detail::vload(col[r], S + ((r * alpha + x) * C + c) * F + f);
          T::filter(col, 1, &rowsum[0][x], alpha);
        }
        MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t ky = 0; ky < 3; ++ky) {
          V k[3];
          T::filter(rowsum[ky], 1, k, 1);
          MWSTRAT_WINOGRAD_FILTER_UNROLL for (std::size_t kx = 0; kx < 3; ++kx)
            detail::vstore(dw + ((ky * 3 + kx) * C + c) * F + f, k[kx]);
        }
      }
    direct::sum_pixels(go, images * g.out_h * g.out_w, F, part + task * stride + wsize);
  });
  detail::combine_blocks(part, chunks, stride, stride);
  std::copy_n(part, wsize, grad_kernel);
  if (grad_bias != nullptr) std::copy_n(part + wsize, F, grad_bias);
}

}  // namespace nn::kernels::winograd

#undef MWSTRAT_WINOGRAD_FILTER_UNROLL

#endif  // MWSTRAT_ISA_NS
