// Element types the datapath knows, with their sizes and names as spelled in configs and
// assembly.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tpu {

enum class DType : std::uint8_t { Int8 = 0, Int32 = 1, Bf16 = 2, Fp32 = 3 };

constexpr std::uint32_t size_of(DType t) {
  switch (t) {
    case DType::Int8: return 1;
    case DType::Bf16: return 2;
    case DType::Int32:
    case DType::Fp32: return 4;
  }
  return 0;
}

constexpr std::string_view name_of(DType t) {
  switch (t) {
    case DType::Int8: return "int8";
    case DType::Int32: return "int32";
    case DType::Bf16: return "bf16";
    case DType::Fp32: return "fp32";
  }
  return "?";
}

constexpr bool is_float(DType t) { return t == DType::Bf16 || t == DType::Fp32; }

inline std::optional<DType> dtype_from_name(std::string_view s) {
  for (DType t : {DType::Int8, DType::Int32, DType::Bf16, DType::Fp32})
    if (name_of(t) == s) return t;
  return std::nullopt;
}

}  // namespace tpu
