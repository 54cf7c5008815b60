#pragma once
// Window geometry of convolutions and pooling.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::detail {

// Window geometry shared by conv2d and max_pool2d (Keras/TensorFlow rules for valid and same padding).
struct window_2d {
  std::size_t h, w, c;      // input
  std::size_t kh, kw;       // window
  std::size_t sh, sw;       // strides
  std::size_t oh, ow;       // output
  std::size_t pad_top, pad_left;

  static window_2d make(const std::string& who, const nn_shape& in, std::array<std::size_t, 2> k,
                        std::array<std::size_t, 2> s, nn::padding pad) {
    if (in.size() != 3) nn_config_error(who + ": input shape " + shape_string(in) + " is not (height, width, channels)");
    if (k[0] == 0 || k[1] == 0 || s[0] == 0 || s[1] == 0) nn_config_error(who + ": window and strides must be positive");
    window_2d g{in[0], in[1], in[2], k[0], k[1], s[0], s[1], 0, 0, 0, 0};
    if (pad == nn::padding::valid) {
      if (g.h < g.kh || g.w < g.kw)
        nn_config_error(who + ": window " + std::to_string(g.kh) + "x" + std::to_string(g.kw) + " larger than input " +
                        shape_string(in));
      g.oh = (g.h - g.kh) / g.sh + 1;
      g.ow = (g.w - g.kw) / g.sw + 1;
    } else {
      g.oh = ceil_div(g.h, g.sh);
      g.ow = ceil_div(g.w, g.sw);
      const std::size_t need_h = (g.oh - 1) * g.sh + g.kh;
      const std::size_t need_w = (g.ow - 1) * g.sw + g.kw;
      g.pad_top = need_h > g.h ? (need_h - g.h) / 2 : 0;
      g.pad_left = need_w > g.w ? (need_w - g.w) / 2 : 0;
    }
    if (g.oh == 0 || g.ow == 0 || g.c == 0) nn_config_error(who + ": empty output for input " + shape_string(in));
    return g;
  }
  // Input row/column for output (o) and window offset (k); negative or >= extent means padding.
  [[nodiscard]] std::ptrdiff_t in_row(std::size_t o, std::size_t k) const {
    return static_cast<std::ptrdiff_t>(o * sh + k) - static_cast<std::ptrdiff_t>(pad_top);
  }
  [[nodiscard]] std::ptrdiff_t in_col(std::size_t o, std::size_t k) const {
    return static_cast<std::ptrdiff_t>(o * sw + k) - static_cast<std::ptrdiff_t>(pad_left);
  }
};

}  // namespace mwstrat::detail
