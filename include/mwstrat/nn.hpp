#pragma once
/// \file
/// The nn family: the reference CNN's layers, losses, optimizers, metrics and oneTBB kernels (the convolution
/// kernels of nn/kernels/ included).

#include <mwstrat/nn/graph_model.hpp>
#include <mwstrat/nn/initializers.hpp>
#include <mwstrat/nn/kernels/conv2d.hpp>
#include <mwstrat/nn/layer_specs.hpp>
#include <mwstrat/nn/losses.hpp>
#include <mwstrat/nn/metrics.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/nn/resnet_cifar.hpp>
#include <mwstrat/nn/sequential.hpp>
