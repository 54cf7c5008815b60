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
/// nothing), which `callback_for` rejects. Each hook is a named capability (`has_on_train_begin<C, Ctx>`, ...).

#include <mwstrat/train/logs.hpp>

#include <cstddef>
#include <type_traits>

namespace mwstrat {

// One named capability per hook (a callback has any subset of them).

/// Hook capability: `c.on_train_begin(ctx)`.
template <class C, class Ctx>
concept has_on_train_begin = requires(C& c, Ctx& ctx) { c.on_train_begin(ctx); };
/// Hook capability: `c.on_train_end(ctx, history)`.
template <class C, class Ctx>
concept has_on_train_end = requires(C& c, Ctx& ctx, const history& h) { c.on_train_end(ctx, h); };
/// Hook capability: `c.on_epoch_begin(ctx, epoch)`.
template <class C, class Ctx>
concept has_on_epoch_begin = requires(C& c, Ctx& ctx, int e) { c.on_epoch_begin(ctx, e); };
/// Hook capability: `c.on_epoch_end(ctx, epoch, epoch_logs)`.
template <class C, class Ctx>
concept has_on_epoch_end = requires(C& c, Ctx& ctx, int e, const epoch_logs& l) { c.on_epoch_end(ctx, e, l); };
/// Hook capability: `c.on_train_batch_begin(ctx, step)`.
template <class C, class Ctx>
concept has_on_train_batch_begin = requires(C& c, Ctx& ctx, std::size_t s) { c.on_train_batch_begin(ctx, s); };
/// Hook capability: `c.on_train_batch_end(ctx, step, batch_logs)`.
template <class C, class Ctx>
concept has_on_train_batch_end = requires(C& c, Ctx& ctx, std::size_t s, const batch_logs& l) {
  c.on_train_batch_end(ctx, s, l);
};
/// Hook capability: `c.on_test_begin(ctx)`.
template <class C, class Ctx>
concept has_on_test_begin = requires(C& c, Ctx& ctx) { c.on_test_begin(ctx); };
/// Hook capability: `c.on_test_end(ctx, evaluation)`.
template <class C, class Ctx>
concept has_on_test_end = requires(C& c, Ctx& ctx, const evaluation& r) { c.on_test_end(ctx, r); };

/// `C` has at least one of the hooks, callable with a context of type `Ctx`.
template <class C, class Ctx>
concept callback_for = has_on_train_begin<C, Ctx> || has_on_train_end<C, Ctx> || has_on_epoch_begin<C, Ctx> ||
                       has_on_epoch_end<C, Ctx> || has_on_train_batch_begin<C, Ctx> ||
                       has_on_train_batch_end<C, Ctx> || has_on_test_begin<C, Ctx> || has_on_test_end<C, Ctx>;

namespace detail {
// True only for a static bool member set to true: a data member of that name (or one of another type) is a "no",
// not a hard error in the middle of fit's overload resolution.
template <class C, class = void>
inline constexpr bool declares_saves_training_state = false;
template <class C>
inline constexpr bool declares_saves_training_state<
    C, std::enable_if_t<std::is_same_v<decltype(&C::saves_training_state), const bool*>>> = C::saves_training_state;
}  // namespace detail

/// A callback that saves the training state (`backup_and_restore`) declares
/// `static constexpr bool saves_training_state = true;`. Its `on_epoch_end` then runs after every other callback's,
/// wherever it is listed, so an epoch's backup holds what the others changed at the epoch's end (Keras's callbacks
/// change the training there: a learning rate cut on a plateau), and a resume from it goes on as the uninterrupted
/// run did. Batch hooks keep the list's order (a callback that fails at a step, or waits for that step's backup,
/// sees the order it was given); one that changes the training state in `on_train_batch_end` goes before the backup.
template <class C>
concept saves_training_state = detail::declares_saves_training_state<std::remove_cvref_t<C>>;

namespace detail {

// One function per hook: calls it on every callback that has it, in the order given (on_epoch_end: those that save
// the training state last).
template <class Ctx, class... C>
void fire_train_begin(Ctx& ctx, C&... cs) {
  ([&] { if constexpr (has_on_train_begin<C, Ctx>) cs.on_train_begin(ctx); }(), ...);
}
template <class Ctx, class... C>
void fire_train_end(Ctx& ctx, const history& h, C&... cs) {
  ([&] { if constexpr (has_on_train_end<C, Ctx>) cs.on_train_end(ctx, h); }(), ...);
}
template <class Ctx, class... C>
void fire_epoch_begin(Ctx& ctx, [[maybe_unused]] int epoch, C&... cs) {
  ([&] { if constexpr (has_on_epoch_begin<C, Ctx>) cs.on_epoch_begin(ctx, epoch); }(), ...);
}
template <class Ctx, class... C>
void fire_epoch_end(Ctx& ctx, [[maybe_unused]] int epoch, const epoch_logs& logs, C&... cs) {
  ([&] {
    if constexpr (has_on_epoch_end<C, Ctx> && !saves_training_state<C>) cs.on_epoch_end(ctx, epoch, logs);
  }(), ...);
  ([&] {
    if constexpr (has_on_epoch_end<C, Ctx> && saves_training_state<C>) cs.on_epoch_end(ctx, epoch, logs);
  }(), ...);
}
template <class Ctx, class... C>
void fire_batch_begin(Ctx& ctx, [[maybe_unused]] std::size_t step, C&... cs) {
  ([&] {
    if constexpr (has_on_train_batch_begin<C, Ctx>) cs.on_train_batch_begin(ctx, step);
  }(), ...);
}
template <class Ctx, class... C>
void fire_batch_end(Ctx& ctx, [[maybe_unused]] std::size_t step, const batch_logs& logs, C&... cs) {
  ([&] {
    if constexpr (has_on_train_batch_end<C, Ctx>) cs.on_train_batch_end(ctx, step, logs);
  }(), ...);
}
template <class Ctx, class... C>
void fire_test_begin(Ctx& ctx, C&... cs) {
  ([&] { if constexpr (has_on_test_begin<C, Ctx>) cs.on_test_begin(ctx); }(), ...);
}
template <class Ctx, class... C>
void fire_test_end(Ctx& ctx, const evaluation& r, C&... cs) {
  ([&] { if constexpr (has_on_test_end<C, Ctx>) cs.on_test_end(ctx, r); }(), ...);
}

}  // namespace detail
}  // namespace mwstrat
