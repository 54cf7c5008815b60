#pragma once
/// \file
/// The checkpoint family: CRC32C, the safetensors format, atomic file replacement, training states, the
/// checkpoint manager and the `checkpointer` concept. See docs/checkpointing.md.

#include <mwstrat/checkpoint/atomic_file.hpp>
#include <mwstrat/checkpoint/background_writer.hpp>
#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/checkpoint/crc32c.hpp>
#include <mwstrat/checkpoint/dtype.hpp>
#include <mwstrat/checkpoint/manager.hpp>
#include <mwstrat/checkpoint/named_tensors.hpp>
#include <mwstrat/checkpoint/safetensors.hpp>
#include <mwstrat/checkpoint/training_state.hpp>
