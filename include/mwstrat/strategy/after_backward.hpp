#pragma once
/// \file
/// `after_backward`: the `on_ready` a strategy gives `train_batch` when it reduces the gradients only once backward
/// has finished. It ignores every report. A model may recognise it (`reports_wanted<OnReady>` is false) and skip
/// work it does only so that a reduction can start early — the sequential model then computes a large dense
/// kernel's gradient in one product instead of two. It lives with the strategies that pass it; a model (nn/, on top of
/// core) reads it from here.

#include <cstddef>
#include <type_traits>

namespace mwstrat {

/// An `on_ready` for a step whose reduction waits for the end of backward: reports are not wanted.
struct after_backward {
  void operator()(std::size_t, std::size_t) const noexcept {}
};

/// Whether a model's backward should report gradients as they become final (false only for `after_backward`).
template <class OnReady>
inline constexpr bool reports_wanted = !std::is_same_v<std::remove_cvref_t<OnReady>, after_backward>;

}  // namespace mwstrat
