#pragma once
/// \file
/// Everything in mwstrat, in one include. A test checks that this header reaches every public header.

#include <mwstrat/checkpoint.hpp>
#include <mwstrat/cluster.hpp>
#include <mwstrat/collective.hpp>
#include <mwstrat/data.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/strategy.hpp>
#include <mwstrat/tensor.hpp>
#include <mwstrat/train.hpp>
#include <mwstrat/version.hpp>
