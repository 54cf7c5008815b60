#pragma once
// The shapes and scratch memory shared by the convolution kernels (nn/kernels/conv2d.hpp).

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace mwstrat::nn::kernels {

/// NHWC activations: input [batch][in_h][in_w][in_c], output [batch][out_h][out_w][out_c]. Output position
/// (oy, ox) reads input rows oy * stride_h + ky - pad_top and columns ox * stride_w + kx - pad_left; reads outside
/// the input are zeros (so padding beyond pad_top/pad_left is implied by out_h/out_w).
struct conv2d_geometry {
  std::size_t batch, in_h, in_w, in_c, out_c, kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_left, out_h,
      out_w;
};

/// Which implementation a workspace's calls take: `automatic` (the fastest kernels the shape allows: Winograd for
/// 3x3 stride-1 convolutions, as conv2d.hpp details, else the direct kernels, else the reference),
/// `direct` (never Winograd: the direct kernels where they apply, else the reference) or `reference` (always the
/// im2col reference; for tests).
enum class conv2d_path { automatic, direct, reference };

/// Reusable scratch memory: a layer keeps one per convolution, and once it has grown to a shape's needs no call
/// allocates again.
struct conv2d_workspace {
  conv2d_path path = conv2d_path::automatic;
  ::mwstrat::detail::aligned_vector<float> buffer_a, buffer_b, buffer_c;
  ::mwstrat::detail::aligned_vector<float> gradient;  // a data gradient to add, on the paths that cannot add it
  std::vector<std::ptrdiff_t> taps;

  static float* ensure(::mwstrat::detail::aligned_vector<float>& v, std::size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

}  // namespace mwstrat::nn::kernels

namespace mwstrat::detail {

// Throws config_error, naming `who` (the kernel entry point), unless `g` describes a convolution the kernels can run.
inline void check_conv_geometry(const nn::kernels::conv2d_geometry& g, const char* who) {
  const auto fail = [&](const std::string& what) {
    throw ::mwstrat::config_error({"nn"}, std::string(who) + ": " + what);
  };
  if (g.in_c == 0 || g.out_c == 0 || g.kernel_h == 0 || g.kernel_w == 0) fail("channels and kernel must be positive");
  if (g.stride_h == 0 || g.stride_w == 0) fail("strides must be positive");
  if (g.out_h == 0 || g.out_w == 0 || g.in_h == 0 || g.in_w == 0) fail("empty input or output");
  // Every window must touch the padded input: its first row/column must lie before the input's end plus the
  // implied bottom/right padding, which can never exceed the kernel's extent.
  if ((g.out_h - 1) * g.stride_h >= g.in_h + g.pad_top + g.kernel_h - 1 ||
      (g.out_w - 1) * g.stride_w >= g.in_w + g.pad_left + g.kernel_w - 1)
    fail("output " + std::to_string(g.out_h) + "x" + std::to_string(g.out_w) + " does not fit input " +
         std::to_string(g.in_h) + "x" + std::to_string(g.in_w));
  if (g.pad_top >= g.kernel_h || g.pad_left >= g.kernel_w) fail("padding must be smaller than the kernel");
}

}  // namespace mwstrat::detail

namespace mwstrat::nn::kernels {

/// A per-channel affine map and optional ReLU applied to the input as it is read (inference-mode batch norm and
/// ReLU before a convolution): x -> max(0, x * scale[c] + shift[c]) with relu, x * scale[c] + shift[c] without.
/// The convolution's zero padding is applied after it (as when the layers run one after the other).
struct conv2d_input_transform {
  const float* scale;
  const float* shift;
  bool relu;
};

}  // namespace mwstrat::nn::kernels
