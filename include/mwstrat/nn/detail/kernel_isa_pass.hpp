// One pass of nn/detail/kernel_isas.hpp: every header whose code is compiled once per ISA, in the order they use
// each other, into the namespaces MWSTRAT_ISA_NS names. No include guard: the driver includes this once per ISA
// (and a direct include is the driver's).
#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>
#else

#include <mwstrat/nn/detail/simd.hpp>
#include <mwstrat/nn/detail/elementwise.hpp>
#include <mwstrat/nn/detail/batch_sum.hpp>
#include <mwstrat/nn/detail/relu_backward.hpp>
#include <mwstrat/nn/detail/gemm.hpp>
#include <mwstrat/nn/detail/conv_filter_gradient.hpp>
#include <mwstrat/nn/kernels/conv2d_direct.hpp>
#include <mwstrat/nn/kernels/conv2d_direct_filter.hpp>
#include <mwstrat/nn/kernels/conv2d_scatter.hpp>
#include <mwstrat/nn/kernels/conv2d_winograd.hpp>
#include <mwstrat/nn/kernels/conv2d_winograd_filter.hpp>
#include <mwstrat/nn/kernels/conv2d.hpp>
#include <mwstrat/nn/layers/activation.hpp>
#include <mwstrat/nn/layers/add.hpp>
#include <mwstrat/nn/layers/alias.hpp>
#include <mwstrat/nn/layers/batch_normalization.hpp>
#include <mwstrat/nn/layers/conv2d.hpp>
#include <mwstrat/nn/layers/dense.hpp>
#include <mwstrat/nn/layers/dropout.hpp>
#include <mwstrat/nn/layers/global_average_pooling2d.hpp>
#include <mwstrat/nn/layers/max_pool2d.hpp>
#include <mwstrat/nn/layers/pad_channels_shortcut.hpp>
#include <mwstrat/nn/layers/relu.hpp>
#include <mwstrat/nn/layers/softmax.hpp>
#include <mwstrat/nn/layers/zero_padding2d.hpp>
#include <mwstrat/nn/detail/isa_pass.hpp>

// The pass's macros end with it, so the driver defines each pass's afresh.
#undef MWSTRAT_ISA_NS
#undef MWSTRAT_ISA_IS_BUILD
#undef MWSTRAT_ISA_AVX512
#undef MWSTRAT_ISA_AVX
#undef MWSTRAT_ISA_FMA
#undef MWSTRAT_ISA_SSE2

#endif  // MWSTRAT_ISA_NS
