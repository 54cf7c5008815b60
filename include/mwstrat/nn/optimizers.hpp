#pragma once
/// \file
/// The optimizers, with Keras's names, defaults and update rules (Keras 3): SGD (momentum, Nesterov), Adam, AdamW,
/// RMSprop, Adagrad; each with clipping (`clipnorm`/`global_clipnorm` over the whole gradient, `clipvalue`) and
/// decoupled weight decay, and a learning rate that is a number or a schedule (optimizers/schedules.hpp). Each
/// updates a flat span of parameters from a span of gradients (a model's whole arena in one call), elementwise in
/// parallel in the calling oneTBB arena (`model.execute([&] { opt.apply(...); })`), with the same bits for any
/// number of threads. Slot variables are one span, with the iteration count, for checkpoints.
///
///     nn::sgd opt({.learning_rate = nn::linear_warmup(nn::cosine_decay(0.1, 20000), 500), .momentum = 0.9,
///                  .nesterov = true, .weight_decay = 5e-4});

#include <mwstrat/nn/optimizers/adagrad.hpp>
#include <mwstrat/nn/optimizers/adam.hpp>
#include <mwstrat/nn/optimizers/optimizer_base.hpp>
#include <mwstrat/nn/optimizers/rmsprop.hpp>
#include <mwstrat/nn/optimizers/schedules.hpp>
#include <mwstrat/nn/optimizers/sgd.hpp>
