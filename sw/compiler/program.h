// A compiled program: what the driver needs to run a network on a chip. Per core an instruction
// stream; the off-chip memory image (weight tiles, parameter records); the host-memory layout of
// inputs and outputs; and the layer names that Tag ids stand for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/common/dtype.h"
#include "hw/isa/isa.h"

namespace tpu::compiler {

struct MemorySegment {
  std::uint64_t addr = 0;
  std::vector<std::uint8_t> bytes;
};

struct LayerInfo {
  std::string name;  // "setup" for tag 0
  std::string type;  // Keras class name
  std::uint64_t macs_per_image = 0;
};

struct Program {
  std::vector<std::vector<isa::Instruction>> cores;
  std::vector<MemorySegment> memory_image;
  std::vector<LayerInfo> layers;  // index = Tag id; 0 is setup and host I/O

  std::uint64_t images = 0;
  std::uint64_t host_bytes = 0;
  std::uint64_t input_addr = 0;  // host address of image 0
  std::uint64_t input_bytes_per_image = 0;
  std::uint64_t output_addr = 0;
  std::uint64_t output_bytes_per_image = 0;
  std::uint64_t output_elements = 0;  // per image
  DType output_type = DType::Fp32;
  float output_scale = 1.0f;  // int8 outputs: real = q * scale

  std::uint32_t micro_batch = 0;  // images per core per pass through the network
  std::uint64_t ub_bytes_used = 0;
  bool weights_in_ub = false;
  // Whether layer tensors live in off-chip memory between layers (docs/compiler.md), and the
  // bytes their homes take there.
  bool activations_off_chip = false;
  std::uint64_t off_chip_activation_bytes = 0;

  [[nodiscard]] std::size_t instruction_count() const {
    std::size_t n = 0;
    for (const auto& c : cores) n += c.size();
    return n;
  }
};

}  // namespace tpu::compiler
