// Accuracy of a network's outputs against labels.
#pragma once

#include <cstdint>
#include <vector>

#include "sw/nn/reference.h"

namespace tpu::nn {

// Fraction of rows (of k outputs each) whose largest output is at the label's index.
inline double top1(const std::vector<float>& outputs, std::size_t k,
                   const std::vector<std::uint8_t>& labels) {
  if (labels.empty()) return 0.0;
  const auto pred = argmax_rows(outputs, k);
  std::size_t ok = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) ok += pred[i] == labels[i];
  return static_cast<double>(ok) / static_cast<double>(labels.size());
}

}  // namespace tpu::nn
