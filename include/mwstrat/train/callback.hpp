#pragma once
/// \file
/// Callbacks: any object with any subset of Keras's hooks, called by `fit` in Keras's order:
///
///     on_train_begin(ctx)
///       on_epoch_begin(ctx, epoch)
///         on_train_batch_begin(ctx, step)  on_train_batch_end(ctx, step, batch_logs)   × steps
///         on_test_begin(ctx)  on_test_end(ctx, evaluation)                              (when validating)
///       on_epoch_end(ctx, epoch, epoch_logs)
///     on_train_end(ctx, history)
///
/// `ctx` is the `train_context` of the run (strategy, model, optimizer, position, `stop_training`). A hook may be a
/// template over the context type. A type with none of the hooks is not a callback (a typo would silently do
/// nothing), which `callback_for` rejects.

#include <mwstrat/train/logs.hpp>

#include <cstddef>

namespace mwstrat {

/// `C` has at least one of the hooks, callable with a context of type `Ctx`.
template <class C, class Ctx>
concept callback_for = requires(C& c, Ctx& ctx) { c.on_train_begin(ctx); } ||
                       requires(C& c, Ctx& ctx, const history& h) { c.on_train_end(ctx, h); } ||
                       requires(C& c, Ctx& ctx, int e) { c.on_epoch_begin(ctx, e); } ||
                       requires(C& c, Ctx& ctx, int e, const epoch_logs& l) { c.on_epoch_end(ctx, e, l); } ||
                       requires(C& c, Ctx& ctx, std::size_t s) { c.on_train_batch_begin(ctx, s); } ||
                       requires(C& c, Ctx& ctx, std::size_t s, const batch_logs& l) {
                         c.on_train_batch_end(ctx, s, l);
                       } ||
                       requires(C& c, Ctx& ctx) { c.on_test_begin(ctx); } ||
                       requires(C& c, Ctx& ctx, const evaluation& r) { c.on_test_end(ctx, r); };

namespace detail {

// One function per hook: calls it on every callback that has it, in the order given.
template <class Ctx, class... C>
void fire_train_begin(Ctx& ctx, C&... cs) {
  ([&] { if constexpr (requires { cs.on_train_begin(ctx); }) cs.on_train_begin(ctx); }(), ...);
}
template <class Ctx, class... C>
void fire_train_end(Ctx& ctx, const history& h, C&... cs) {
  ([&] { if constexpr (requires { cs.on_train_end(ctx, h); }) cs.on_train_end(ctx, h); }(), ...);
}
template <class Ctx, class... C>
void fire_epoch_begin(Ctx& ctx, int epoch, C&... cs) {
  ([&] { if constexpr (requires { cs.on_epoch_begin(ctx, epoch); }) cs.on_epoch_begin(ctx, epoch); }(), ...);
}
template <class Ctx, class... C>
void fire_epoch_end(Ctx& ctx, int epoch, const epoch_logs& logs, C&... cs) {
  ([&] { if constexpr (requires { cs.on_epoch_end(ctx, epoch, logs); }) cs.on_epoch_end(ctx, epoch, logs); }(), ...);
}
template <class Ctx, class... C>
void fire_batch_begin(Ctx& ctx, std::size_t step, C&... cs) {
  ([&] {
    if constexpr (requires { cs.on_train_batch_begin(ctx, step); }) cs.on_train_batch_begin(ctx, step);
  }(), ...);
}
template <class Ctx, class... C>
void fire_batch_end(Ctx& ctx, std::size_t step, const batch_logs& logs, C&... cs) {
  ([&] {
    if constexpr (requires { cs.on_train_batch_end(ctx, step, logs); }) cs.on_train_batch_end(ctx, step, logs);
  }(), ...);
}
template <class Ctx, class... C>
void fire_test_begin(Ctx& ctx, C&... cs) {
  ([&] { if constexpr (requires { cs.on_test_begin(ctx); }) cs.on_test_begin(ctx); }(), ...);
}
template <class Ctx, class... C>
void fire_test_end(Ctx& ctx, const evaluation& r, C&... cs) {
  ([&] { if constexpr (requires { cs.on_test_end(ctx, r); }) cs.on_test_end(ctx, r); }(), ...);
}

}  // namespace detail
}  // namespace mwstrat
