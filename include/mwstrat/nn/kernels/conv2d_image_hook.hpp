#pragma once
// Work a caller runs on each output image of a convolution's forward pass while the image is still in cache: a
// batch norm that reads the convolution's output sums it there (layer_impl::input_sums_hook) instead of in a pass
// of its own over the whole output, which would read it back from memory.

#include <mwstrat/nn/detail/parallel.hpp>

#include <algorithm>
#include <cstddef>

namespace mwstrat::nn::kernels {

/// run(context, n) once image n's output is complete. The images of each run of `group` consecutive images (the
/// first at a multiple of `group`) are done in order by one task, so a hook may continue one sum image after
/// image; different groups run in parallel. Not an std::function: nothing is allocated per call.
struct conv2d_image_hook {
  void* context = nullptr;
  void (*run)(void* context, std::size_t image) = nullptr;
  std::size_t group = 1;
};

/// The forward passes' loop over the images: body(n), then the hook (nullable) on image n, one task per group of
/// the hook's images (per image without a hook). The work is cut by the batch and the hook only, as every kernel's.
template <class Body>
void for_each_image(std::size_t batch, const conv2d_image_hook* hook, Body&& body) {
  const std::size_t group = hook != nullptr ? std::max<std::size_t>(1, hook->group) : 1;
  ::mwstrat::detail::parallel_tasks(::mwstrat::detail::ceil_div(batch, group), [&](std::size_t t) {
    const std::size_t last = std::min(batch, (t + 1) * group);
    for (std::size_t n = t * group; n < last; ++n) {
      body(n);
      if (hook != nullptr) hook->run(hook->context, n);
    }
  });
}

}  // namespace mwstrat::nn::kernels
