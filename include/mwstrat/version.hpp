#pragma once
/// \file
/// The library's version, kept in step with `project(mwstrat VERSION ...)` by a test.

#define MWSTRAT_VERSION_MAJOR 0
#define MWSTRAT_VERSION_MINOR 1
#define MWSTRAT_VERSION_PATCH 0
#define MWSTRAT_VERSION_STRING "0.1.0"

namespace mwstrat {

/// The version of the headers in use, as major, minor and patch numbers.
struct version_info {
  int major;
  int minor;
  int patch;
};

/// The version of the headers this translation unit was compiled against.
inline constexpr version_info version{MWSTRAT_VERSION_MAJOR, MWSTRAT_VERSION_MINOR, MWSTRAT_VERSION_PATCH};

/// The version as "major.minor.patch".
inline constexpr const char* version_string = MWSTRAT_VERSION_STRING;

}  // namespace mwstrat
