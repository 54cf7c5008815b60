#pragma once
// The launcher under test, for every tools test file (one definition: the files share unity translation units).

#include <string>

namespace mwstrat::test {
inline const std::string launcher = MWSTRAT_LAUNCH;
}  // namespace mwstrat::test
