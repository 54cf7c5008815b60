#pragma once
// What went wrong in a ring operation, as the rank that reports it sees it: the data path, the liveness monitor and
// the abort protocol pass it around; the ring turns it into an exception (abort.hpp: ring_error).

#include <mwstrat/error.hpp>

#include <string>

namespace mwstrat::detail {

struct ring_failure {
  error_kind kind;
  int culprit;
  std::string text;
};

}  // namespace mwstrat::detail
