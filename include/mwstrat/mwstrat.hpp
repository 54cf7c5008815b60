#pragma once
/// \file
/// Everything in mwstrat, in one include. A test checks that this header reaches every public header.

#include <mwstrat/error.hpp>
#include <mwstrat/version.hpp>
