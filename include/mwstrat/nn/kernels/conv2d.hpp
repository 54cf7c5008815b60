// 2-D convolution kernels on NHWC activations and Keras's HWIO kernels: forward, data gradient and filter
// gradient, parallel on oneTBB with results that are the same bits for any number of threads (work is cut by the
// problem's shape only; the filter gradient's sum over the batch is taken in fixed chunks, added by an aligned tree).
//
// Four implementations share this interface, chosen per call by the workspace's path and the shape: Winograd
// F(4x4, 3x3) (conv2d_winograd.hpp: 2.25x fewer multiplies) for the forward pass and data gradient of 3x3 stride-1
// convolutions, and its transposed form (conv2d_winograd_filter.hpp: 4x fewer) for their filter gradient; the
// scattered data gradient (conv2d_scatter.hpp) of a stride-2 3x3 convolution whose input is one vector of channels;
// the direct kernels (conv2d_direct.hpp: register-blocked direct convolution over a zero-padded copy of the input, or
// the input itself where nothing pads before it, weights repacked once per call) for the other shapes they apply
// to; the reference (im2col / col2im around the library's GEMM) everywhere else. Tests compare them through the
// path.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>
#include <mwstrat/nn/detail/parallel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

// The im2col reference's pieces (the fast kernels have their own: conv2d_direct.hpp, conv2d_winograd.hpp).
inline std::size_t conv_patch_size(const nn::kernels::conv2d_geometry& g) { return g.kernel_h * g.kernel_w * g.in_c; }
inline std::size_t conv_out_positions(const nn::kernels::conv2d_geometry& g) { return g.out_h * g.out_w; }

// cols[n][oy][ox][ky][kx][c] for one image.
inline void im2col_image(const nn::kernels::conv2d_geometry& g, const float* x, float* cols) {
  const std::size_t patch = conv_patch_size(g);
  for (std::size_t oy = 0; oy < g.out_h; ++oy)
    for (std::size_t ox = 0; ox < g.out_w; ++ox) {
      float* dst = cols + (oy * g.out_w + ox) * patch;
      for (std::size_t ky = 0; ky < g.kernel_h; ++ky) {
        const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride_h + ky) - static_cast<std::ptrdiff_t>(g.pad_top);
        for (std::size_t kx = 0; kx < g.kernel_w; ++kx) {
          const std::ptrdiff_t ix =
              static_cast<std::ptrdiff_t>(ox * g.stride_w + kx) - static_cast<std::ptrdiff_t>(g.pad_left);
          float* d = dst + (ky * g.kernel_w + kx) * g.in_c;
          if (iy < 0 || ix < 0 || iy >= static_cast<std::ptrdiff_t>(g.in_h) || ix >= static_cast<std::ptrdiff_t>(g.in_w)) {
            std::fill(d, d + g.in_c, 0.0f);
          } else {
            std::memcpy(d, x + (static_cast<std::size_t>(iy) * g.in_w + static_cast<std::size_t>(ix)) * g.in_c,
                        g.in_c * sizeof(float));
          }
        }
      }
    }
}

// dx (one image, zeroed first) += the patch gradients in cols, added in (oy, ox, ky, kx) order.
inline void col2im_image(const nn::kernels::conv2d_geometry& g, const float* cols, float* dx) {
  const std::size_t patch = conv_patch_size(g);
  std::fill(dx, dx + g.in_h * g.in_w * g.in_c, 0.0f);
  for (std::size_t oy = 0; oy < g.out_h; ++oy)
    for (std::size_t ox = 0; ox < g.out_w; ++ox) {
      const float* src = cols + (oy * g.out_w + ox) * patch;
      for (std::size_t ky = 0; ky < g.kernel_h; ++ky) {
        const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride_h + ky) - static_cast<std::ptrdiff_t>(g.pad_top);
        if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(g.in_h)) continue;
        for (std::size_t kx = 0; kx < g.kernel_w; ++kx) {
          const std::ptrdiff_t ix =
              static_cast<std::ptrdiff_t>(ox * g.stride_w + kx) - static_cast<std::ptrdiff_t>(g.pad_left);
          if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(g.in_w)) continue;
          float* d = dx + (static_cast<std::size_t>(iy) * g.in_w + static_cast<std::size_t>(ix)) * g.in_c;
          const float* s = src + (ky * g.kernel_w + kx) * g.in_c;
          for (std::size_t c = 0; c < g.in_c; ++c) d[c] += s[c];
        }
      }
    }
}

// Images per chunk of the filter gradient's batch sum: fixed by the shape (about 2^20 multiply-adds of work
// per chunk at the least; a power of two), never by the thread count or the batch.
inline std::size_t conv_filter_chunk_images(const nn::kernels::conv2d_geometry& g) {
  const std::size_t per_image = conv_out_positions(g) * conv_patch_size(g) * g.out_c;
  return power_of_two_floor(
      std::clamp<std::size_t>((std::size_t{1} << 20) / std::max<std::size_t>(per_image, 1), 1, 8));
}

}  // namespace mwstrat::detail

namespace MWSTRAT_ISA_NS(nn::kernels) {

/// Reference forward pass: im2col, then one GEMM with the HWIO kernel (whose rows are the patch order).
inline void conv2d_forward_reference(const conv2d_geometry& g, const float* input, const float* kernel,
                                     const float* bias, float* output, conv2d_workspace& ws) {
  detail::check_conv_geometry(g, "conv2d_forward");
  const std::size_t patch = detail::conv_patch_size(g);
  const std::size_t rows = detail::conv_out_positions(g);
  float* cols = conv2d_workspace::ensure(ws.buffer_a, g.batch * rows * patch);
  detail::parallel_tasks(g.batch, [&](std::size_t n) {
    detail::im2col_image(g, input + n * g.in_h * g.in_w * g.in_c, cols + n * rows * patch);
  });
  detail::gemm_nn<float>(g.batch * rows, g.out_c, patch, cols, static_cast<std::ptrdiff_t>(patch), 1, kernel,
                         g.out_c, output, g.out_c, bias);
}

/// Reference data gradient: patch gradients = grad_output * kernel^T (one GEMM), then col2im per image.
inline void conv2d_backward_data_reference(const conv2d_geometry& g, const float* grad_output, const float* kernel,
                                           float* grad_input, conv2d_workspace& ws,
                                           const conv2d_image_hook* hook = nullptr) {
  detail::check_conv_geometry(g, "conv2d_backward_data");
  const std::size_t patch = detail::conv_patch_size(g);
  const std::size_t rows = detail::conv_out_positions(g);
  const std::size_t m = g.batch * rows;
  float* cols = conv2d_workspace::ensure(ws.buffer_a, m * patch);
  const std::size_t scratch = detail::gemm_nt_workspace(m, patch, g.out_c);
  float* part = conv2d_workspace::ensure(ws.buffer_b, std::max<std::size_t>(scratch, 1));
  detail::gemm_nt<float>(m, patch, g.out_c, grad_output, g.out_c, kernel, g.out_c, cols, patch, nullptr, false,
                         std::span<float>(part, scratch));
  for_each_image(g.batch, hook, [&](std::size_t n) {
    detail::col2im_image(g, cols + n * rows * patch, grad_input + n * g.in_h * g.in_w * g.in_c);
  });
}

/// Reference filter gradient: grad_kernel = cols^T * grad_output, summed over fixed chunks of images (each chunk
/// one task, into its own partial sum), then the partial sums added by the aligned tree (batch-split invariant).
inline void conv2d_backward_filter_reference(const conv2d_geometry& g, const float* input, const float* grad_output,
                                             float* grad_kernel, float* grad_bias, conv2d_workspace& ws) {
#if MWSTRAT_ISA_IS_BUILD
  if (detail::on_dispatched_isa<detail::kernel_entry::conv2d_backward_filter>(g, input, grad_output, grad_kernel, grad_bias, ws)) return;
#endif
  detail::check_conv_geometry(g, "conv2d_backward_filter");
  const std::size_t patch = detail::conv_patch_size(g);
  const std::size_t rows = detail::conv_out_positions(g);
  const std::size_t chunk = detail::conv_filter_chunk_images(g);
  const std::size_t chunks = detail::ceil_div(g.batch, chunk);
  const std::size_t wsize = patch * g.out_c;
  float* cols = conv2d_workspace::ensure(ws.buffer_a, g.batch * rows * patch);
  float* part = conv2d_workspace::ensure(ws.buffer_b, chunks * (wsize + g.out_c));
  detail::parallel_tasks(chunks, [&](std::size_t t) {
    const std::size_t n0 = t * chunk;
    const std::size_t n1 = std::min(g.batch, n0 + chunk);
    for (std::size_t n = n0; n < n1; ++n)
      detail::im2col_image(g, input + n * g.in_h * g.in_w * g.in_c, cols + n * rows * patch);
    const std::size_t m0 = n0 * rows;
    const std::size_t k = (n1 - n0) * rows;
    float* out = part + t * (wsize + g.out_c);
    // A(i, k) = cols[k][i]: the patch element i of position k.
    detail::gemm_nn_block<float>(0, patch, 0, g.out_c, k, cols + m0 * patch, 1, static_cast<std::ptrdiff_t>(patch),
                                 grad_output + m0 * g.out_c, g.out_c, out, g.out_c, nullptr);
    float* bsum = out + wsize;
    std::fill(bsum, bsum + g.out_c, 0.0f);
    for (std::size_t r = 0; r < k; ++r) {
      const float* dy = grad_output + (m0 + r) * g.out_c;
      for (std::size_t f = 0; f < g.out_c; ++f) bsum[f] += dy[f];
    }
  });
  detail::combine_blocks(part, chunks, wsize + g.out_c, wsize + g.out_c);
  std::copy_n(part, wsize, grad_kernel);
  if (grad_bias != nullptr) std::copy_n(part + wsize, g.out_c, grad_bias);
}

}  // namespace nn::kernels

namespace MWSTRAT_ISA_NS(detail) {

// The reference forward pass, then the hook (nullable) on each image: the reference's one GEMM finishes every
// image at once, so the hook reads them back from memory, but gets the same calls as on the fast paths.
inline void conv_forward_reference_hooked(const nn::kernels::conv2d_geometry& g, const float* input,
                                          const float* kernel, const float* bias, float* output,
                                          nn::kernels::conv2d_workspace& ws,
                                          const nn::kernels::conv2d_image_hook* hook) {
  nn::kernels::conv2d_forward_reference(g, input, kernel, bias, output, ws);
  if (hook != nullptr) nn::kernels::for_each_image(g.batch, hook, [](std::size_t) {});
}

}  // namespace mwstrat::detail

namespace MWSTRAT_ISA_NS(nn::kernels) {

/// output = conv(input, kernel) + bias (bias may be null); output is overwritten. The hook (nullable) runs on each
/// output image once it is complete (nn/kernels/conv2d_image_hook.hpp), on every path.
inline void conv2d_forward(const conv2d_geometry& g, const float* input, const float* kernel, const float* bias,
                           float* output, conv2d_workspace& ws, const conv2d_image_hook* hook = nullptr) {
#if MWSTRAT_ISA_IS_BUILD
  if (detail::on_dispatched_isa<detail::kernel_entry::conv2d_forward>(g, input, kernel, bias, output, ws, hook)) return;
#endif
  detail::check_conv_geometry(g, "conv2d_forward");
  if (ws.path == conv2d_path::automatic && winograd::applies(g)) {
    winograd::forward(g, input, nullptr, kernel, bias, output, ws, hook);
    return;
  }
  if (ws.path != conv2d_path::reference && direct::applies(g.out_c)) {
    direct::forward(g, input, nullptr, kernel, bias, output, ws, hook);
    return;
  }
  detail::conv_forward_reference_hooked(g, input, kernel, bias, output, ws, hook);
}

/// output = conv(t(input), kernel) + bias, where t is the per-channel transform (inference-mode batch norm and
/// ReLU) applied as the input is read; the padding stays zero. The fast path does it in its padding pass at no
/// extra pass over memory; the reference path transforms into the workspace first.
inline void conv2d_forward(const conv2d_geometry& g, const float* input, const conv2d_input_transform& transform,
                           const float* kernel, const float* bias, float* output, conv2d_workspace& ws,
                           const conv2d_image_hook* hook = nullptr) {
#if MWSTRAT_ISA_IS_BUILD
  if (detail::on_dispatched_isa<detail::kernel_entry::conv2d_forward>(g, input, transform, kernel, bias, output, ws, hook)) return;
#endif
  detail::check_conv_geometry(g, "conv2d_forward");
  if (transform.scale == nullptr || transform.shift == nullptr)
    throw ::mwstrat::config_error({"nn"}, "conv2d_forward: the input transform needs a scale and a shift");
  if (ws.path == conv2d_path::automatic && winograd::applies(g)) {
    winograd::forward(g, input, &transform, kernel, bias, output, ws, hook);
    return;
  }
  if (ws.path != conv2d_path::reference && direct::applies(g.out_c)) {
    direct::forward(g, input, &transform, kernel, bias, output, ws, hook);
    return;
  }
  const std::size_t n = g.batch * g.in_h * g.in_w * g.in_c;
  float* x = conv2d_workspace::ensure(ws.buffer_c, n);
  detail::parallel_chunks(n / g.in_c, 1024, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t c = 0; c < g.in_c; ++c) {
        float v = detail::fmadd(input[p * g.in_c + c], transform.scale[c], transform.shift[c]);
        if (transform.relu) v = v > 0.0f ? v : 0.0f;
        x[p * g.in_c + c] = v;
      }
  });
  detail::conv_forward_reference_hooked(g, x, kernel, bias, output, ws, hook);
}

/// grad_input = the gradient of the loss with respect to the input; overwritten, or with `add` added to what is
/// there (each element's sum rounded once: the bits of computing the gradient apart and then adding it, which is
/// what the other paths do; the Winograd path adds as it stores, saving a write and a read of the whole tensor).
/// The hook (nullable) runs on each image of grad_input once it is final (nn/kernels/conv2d_image_hook.hpp).
inline void conv2d_backward_data(const conv2d_geometry& g, const float* grad_output, const float* kernel,
                                 float* grad_input, conv2d_workspace& ws, bool add = false,
                                 const conv2d_image_hook* hook = nullptr) {
#if MWSTRAT_ISA_IS_BUILD
  if (detail::on_dispatched_isa<detail::kernel_entry::conv2d_backward_data>(g, grad_output, kernel, grad_input, ws, add, hook)) return;
#endif
  detail::check_conv_geometry(g, "conv2d_backward_data");
  if (ws.path == conv2d_path::automatic && winograd::applies(g)) {
    winograd::backward_data(g, grad_output, kernel, grad_input, ws, add, hook);
    return;
  }
  if (add) {
    const std::size_t image = g.in_h * g.in_w * g.in_c;
    float* own = conv2d_workspace::ensure(ws.gradient, g.batch * image);
    kernels::conv2d_backward_data(g, grad_output, kernel, own, ws);
    for_each_image(g.batch, hook, [&](std::size_t n) {
      for (std::size_t i = n * image; i < (n + 1) * image; ++i) grad_input[i] += own[i];
    });
    return;
  }
  if (ws.path != conv2d_path::reference && scatter::applies(g)) {
    scatter::backward_data(g, grad_output, kernel, grad_input, ws, hook);
    return;
  }
  if (ws.path != conv2d_path::reference && direct::backward_data_applies(g)) {
    direct::backward_data(g, grad_output, kernel, grad_input, ws, hook);
    return;
  }
  kernels::conv2d_backward_data_reference(g, grad_output, kernel, grad_input, ws, hook);
}

/// grad_kernel (HWIO) and grad_bias (nullable) = the gradients summed over the batch; overwritten.
inline void conv2d_backward_filter(const conv2d_geometry& g, const float* input, const float* grad_output,
                                   float* grad_kernel, float* grad_bias, conv2d_workspace& ws) {
  detail::check_conv_geometry(g, "conv2d_backward_filter");
  if (ws.path == conv2d_path::automatic && winograd::filter_applies(g)) {
    winograd::backward_filter(g, input, grad_output, grad_kernel, grad_bias, ws);
    return;
  }
  if (ws.path != conv2d_path::reference && direct::applies(g.out_c)) {
    direct::backward_filter(g, input, grad_output, grad_kernel, grad_bias, ws);
    return;
  }
  kernels::conv2d_backward_filter_reference(g, input, grad_output, grad_kernel, grad_bias, ws);
}

}  // namespace nn::kernels

#endif  // MWSTRAT_ISA_NS
