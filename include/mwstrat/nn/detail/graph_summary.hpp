#pragma once
// Keras's `model.summary()` table of a functional model (Layer (type), Output Shape, Param #, Connected to;
// totals), column for column as Keras prints it, so the two can be compared by eye or by diff.

#include <mwstrat/nn/detail/graph_layer_info.hpp>
#include <mwstrat/nn/layer_specs.hpp>

#include <cstddef>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace mwstrat::detail {

// 860874 -> "860,874", as Keras prints counts.
inline std::string grouped(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s.push_back(',');
    s.push_back(digits[i]);
  }
  return s;
}

// `trained` and `state` are the parameter and model-state counts of the whole model.
inline void print_graph_summary(std::ostream& out, const nn::shape_t& input_shape,
                                const std::vector<graph_layer_info>& info, std::size_t trained, std::size_t state) {
  constexpr std::size_t width = 98;
  const std::size_t stops[] = {32, 53, 65, width};
  auto row = [&](std::ostringstream& o, const std::vector<std::string>& fields) {
    std::string line;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i > 0 && !line.empty()) line.back() = ' ';  // Keras: the previous column's last character gives way
      line += fields[i];
      if (i + 1 < fields.size() && line.size() > stops[i]) line.resize(stops[i]);
      if (line.size() < stops[i]) line.append(stops[i] - line.size(), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    o << line << "\n";
  };
  auto shape = [](const nn::shape_t& s) {
    std::string r = "(None";
    for (auto e : s) r += ", " + std::to_string(e);
    return r + ")";
  };
  std::ostringstream o;
  o << "Model: \"model\"\n" << std::string(width, '_') << "\n";
  row(o, {" Layer (type)", "Output Shape", "Param #", "Connected to"});
  o << std::string(width, '=') << "\n";
  row(o, {" input_1 (InputLayer)", "[" + shape(input_shape) + "]", "0", "[]"});
  for (std::size_t i = 0; i < info.size(); ++i) {
    o << "\n";
    std::string connected = "[";
    for (std::size_t k = 0; k < info[i].inbound.size(); ++k)
      connected += (k ? ", '" : "'") + info[i].inbound[k] + "[0][0]'";
    connected += "]";
    row(o, {" " + info[i].name + " (" + info[i].type + ")", shape(info[i].output_shape),
            grouped(info[i].count + info[i].state_count), connected});
  }
  o << std::string(width, '=') << "\n";
  o << "Total params: " << grouped(trained + state) << "\nTrainable params: " << grouped(trained)
    << "\nNon-trainable params: " << grouped(state) << "\n"
    << std::string(width, '_') << "\n";
  out << o.str();
}

}  // namespace mwstrat::detail
