#pragma once
// Where one layer of a graph model sits: its Keras name, class and inbound layers, and its slices of the
// parameter and model-state arenas (what `nn::basic_graph_model::layers()` lists and the summary prints).

#include <mwstrat/nn/layer_specs.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace mwstrat::detail {

// One layer's place in the arenas (nn::basic_graph_model::layer_info).
struct graph_layer_info {
  std::string name;                 ///< Keras's unique name
  std::string type;                 ///< Keras class name
  nn::shape_t output_shape;         ///< per sample
  std::vector<std::string> inbound; ///< names of the layers it is applied to
  std::size_t offset;               ///< first parameter in the arena
  std::size_t count;                ///< trained parameters
  std::size_t state_offset;         ///< first value in `model_state()`
  std::size_t state_count;          ///< non-trained values (moving statistics)
};

}  // namespace mwstrat::detail
