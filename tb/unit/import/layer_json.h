// A Keras layer object for model documents in tests: {"class_name", "config"} and, when inputs
// are named, Keras 2's inbound_nodes ([[["name", 0, 0, {}], ...]]).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tpu::nn::test {

inline nlohmann::json layer(const std::string& cls, nlohmann::json config,
                            std::vector<std::string> inputs = {}) {
  nlohmann::json l{{"class_name", cls}, {"config", std::move(config)}};
  if (!inputs.empty()) {
    nlohmann::json node = nlohmann::json::array();
    for (const auto& n : inputs)
      node.push_back(nlohmann::json::array({n, 0, 0, nlohmann::json::object()}));
    l["inbound_nodes"] = nlohmann::json::array({node});
  }
  return l;
}

}  // namespace tpu::nn::test
