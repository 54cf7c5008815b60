#pragma once
/// \file
/// The tensor family: the `tensor_like` concept, its hooks, and the reference tensor.

#include <mwstrat/tensor/concepts.hpp>
#include <mwstrat/tensor/tensor.hpp>
