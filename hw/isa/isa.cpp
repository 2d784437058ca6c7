#include "hw/isa/isa.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "hw/common/error.h"
#include "hw/isa/fields.h"

namespace tpu::isa {
namespace {

template <class T>
struct OpcodeOf;
template <>
struct OpcodeOf<Nop> {
  static constexpr Opcode value = Opcode::Nop;
};
template <>
struct OpcodeOf<ReadHost> {
  static constexpr Opcode value = Opcode::ReadHost;
};
template <>
struct OpcodeOf<WriteHost> {
  static constexpr Opcode value = Opcode::WriteHost;
};
template <>
struct OpcodeOf<ReadMem> {
  static constexpr Opcode value = Opcode::ReadMem;
};
template <>
struct OpcodeOf<WriteMem> {
  static constexpr Opcode value = Opcode::WriteMem;
};
template <>
struct OpcodeOf<ReadWeights> {
  static constexpr Opcode value = Opcode::ReadWeights;
};
template <>
struct OpcodeOf<SetWindow> {
  static constexpr Opcode value = Opcode::SetWindow;
};
template <>
struct OpcodeOf<MatMul> {
  static constexpr Opcode value = Opcode::MatMul;
};
template <>
struct OpcodeOf<Activate> {
  static constexpr Opcode value = Opcode::Activate;
};
template <>
struct OpcodeOf<Pool> {
  static constexpr Opcode value = Opcode::Pool;
};
template <>
struct OpcodeOf<Eltwise> {
  static constexpr Opcode value = Opcode::Eltwise;
};
template <>
struct OpcodeOf<Softmax> {
  static constexpr Opcode value = Opcode::Softmax;
};
template <>
struct OpcodeOf<Sync> {
  static constexpr Opcode value = Opcode::Sync;
};
template <>
struct OpcodeOf<Tag> {
  static constexpr Opcode value = Opcode::Tag;
};
template <>
struct OpcodeOf<Halt> {
  static constexpr Opcode value = Opcode::Halt;
};
template <>
struct OpcodeOf<Gather> {
  static constexpr Opcode value = Opcode::Gather;
};
template <>
struct OpcodeOf<IciWrite> {
  static constexpr Opcode value = Opcode::IciWrite;
};
template <>
struct OpcodeOf<IciWait> {
  static constexpr Opcode value = Opcode::IciWait;
};
template <>
struct OpcodeOf<Copy> {
  static constexpr Opcode value = Opcode::Copy;
};
template <>
struct OpcodeOf<Map> {
  static constexpr Opcode value = Opcode::Map;
};
template <>
struct OpcodeOf<Xent> {
  static constexpr Opcode value = Opcode::Xent;
};
template <>
struct OpcodeOf<Update> {
  static constexpr Opcode value = Opcode::Update;
};
template <>
struct OpcodeOf<Reduce> {
  static constexpr Opcode value = Opcode::Reduce;
};
template <>
struct OpcodeOf<PoolGrad> {
  static constexpr Opcode value = Opcode::PoolGrad;
};

// Little-endian field access into a 32-byte word.
class Bytes32 {
 public:
  explicit Bytes32(Word& w) : w_(w) {}
  template <class T>
  void put(std::size_t off, T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i)
      w_[off + i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i));
  }
  template <class T>
  [[nodiscard]] T get(std::size_t off) const {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= std::uint64_t{w_[off + i]} << (8 * i);
    return static_cast<T>(v);
  }

 private:
  Word& w_;
};

// Byte 0 opcode, byte 1 flags, byte 2 unit/function, byte 3 data type, bytes 4..31 operands.
// Each opcode's layout is written once, as a pair of functions over the same offsets.
struct Codec {
  Bytes32 b;
  bool write;

  template <class T>
  void field(std::size_t off, T& v) {
    if (write)
      b.put(off, v);
    else
      v = b.get<T>(off);
  }
  template <class Tag_, class Rep>
  void field(std::size_t off, Address<Tag_, Rep>& v) {
    Rep r = v.value();
    field(off, r);
    v = Address<Tag_, Rep>(r);
  }
  // An fp32 field: its IEEE-754 bits, every one kept (NaN payloads, signed zeros).
  void field(std::size_t off, float& v) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    field(off, bits);
    std::memcpy(&v, &bits, sizeof v);
  }
  // An fp32 field in two 16-bit halves where a word has no four adjacent bytes left: the low half
  // at `lo`, the high half at `hi` (xent's smoothing: 0 leaves both halves 0, as before it).
  void split_field(std::size_t lo, std::size_t hi, float& v) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    auto low = static_cast<std::uint16_t>(bits), high = static_cast<std::uint16_t>(bits >> 16);
    field(lo, low);
    field(hi, high);
    bits = std::uint32_t{high} << 16 | low;
    std::memcpy(&v, &bits, sizeof v);
  }
  template <class E>
  void enum_field(std::size_t off, E& v) {
    auto r = static_cast<std::uint8_t>(v);
    field(off, r);
    v = static_cast<E>(r);
  }
  void flag(unsigned bit, bool& v) {
    if (write) {
      if (v)
        b.put<std::uint8_t>(1, static_cast<std::uint8_t>(b.get<std::uint8_t>(1) | (1u << bit)));
    } else {
      v = (b.get<std::uint8_t>(1) >> bit) & 1u;
    }
  }

  void operands(Nop&) {}
  void operands(Halt&) {}
  void operands(ReadHost& i) {
    field(4, i.src);
    field(12, i.dst);
    field(16, i.bytes);
  }
  void operands(WriteHost& i) {
    field(4, i.src);
    field(8, i.dst);
    field(16, i.bytes);
  }
  void operands(ReadMem& i) {
    flag(0, i.ici);
    field(4, i.src);
    field(12, i.dst);
    field(16, i.bytes);
  }
  void operands(WriteMem& i) {
    flag(0, i.ici);
    field(4, i.src);
    field(8, i.dst);
    field(16, i.bytes);
  }
  void operands(ReadWeights& i) {
    field(2, i.mxu);
    bool from_ub = i.source == WeightSource::UnifiedBuffer;
    flag(0, from_ub);
    i.source = from_ub ? WeightSource::UnifiedBuffer : WeightSource::OffChip;
    field(4, i.addr);
    field(12, i.rows);
    field(14, i.cols);
    flag(1, i.transpose);
    field(16, i.stride);
  }
  void operands(SetWindow& i) {
    std::uint16_t* f[] = {&i.in_h,     &i.in_w,     &i.in_c,     &i.kernel_h,
                          &i.kernel_w, &i.stride_h, &i.stride_w, &i.pad_top,
                          &i.pad_left, &i.out_h,    &i.out_w};
    for (std::size_t k = 0; k < std::size(f); ++k) field(4 + 2 * k, *f[k]);
    field(26, i.dilation_h);
    field(28, i.dilation_w);
    field(30, i.in_dilation_h);
    field(31, i.in_dilation_w);
  }
  void operands(MatMul& i) {
    field(2, i.mxu);
    flag(0, i.accumulate);
    flag(1, i.swap_weights);
    flag(2, i.window);
    field(4, i.src);
    field(8, i.dst);
    field(12, i.rows);
    field(16, i.src_stride);
    field(20, i.first_pixel);
    field(24, i.k_first);
    flag(3, i.transpose);
  }
  void operands(Activate& i) {
    enum_field(2, i.func);
    enum_field(3, i.out_type);
    field(4, i.src);
    field(8, i.dst);
    field(12, i.params);
    field(16, i.rows);
    field(20, i.cols);
    field(22, i.dst_stride);
  }
  void operands(Pool& i) {
    enum_field(2, i.kind);
    enum_field(3, i.type);
    field(4, i.src);
    field(8, i.dst);
    std::uint16_t* f[] = {&i.in_h, &i.in_w, &i.channels, &i.kernel_h, &i.kernel_w};
    for (std::size_t k = 0; k < std::size(f); ++k) field(12 + 2 * k, *f[k]);
    // Each pad in the byte above its stride: the high byte of the 16-bit strides of programs
    // written before padding existed, zero for every stride below 256.
    field(22, i.stride_h);
    field(23, i.pad_top);
    field(24, i.stride_w);
    field(25, i.pad_left);
    field(26, i.images);
    field(28, i.out_h);
    field(30, i.out_w);
  }
  void operands(Eltwise& i) {
    enum_field(2, i.op);
    enum_field(3, i.type);
    field(4, i.a);
    field(8, i.b);
    field(12, i.dst);
    field(16, i.count);
    field(20, i.shift);
    field(24, i.multiplier);
    field(28, i.b_period);
  }
  void operands(Softmax& i) {
    field(4, i.src);
    field(8, i.dst);
    field(12, i.rows);
    field(16, i.cols);
    field(20, i.src_stride);
    field(24, i.dst_stride);
  }
  void operands(Sync& i) {
    flag(0, i.all_cores);
    field(8, i.dst);
    field(16, i.bytes);
  }
  void operands(Tag& i) { field(4, i.id); }
  void operands(IciWrite& i) {
    field(4, i.src);
    field(8, i.dst);
    field(16, i.bytes);
    field(20, i.chip);
    field(24, i.sem);
  }
  void operands(IciWait& i) {
    field(2, i.sem);
    field(4, i.count);
    field(8, i.dst);
    field(16, i.bytes);
  }
  void operands(Gather& i) {
    field(4, i.table);
    field(12, i.indices);
    field(16, i.dst);
    field(20, i.count);
    field(24, i.row_bytes);
    field(28, i.rows);
  }
  void operands(Map& i) {
    enum_field(2, i.func);
    enum_field(3, i.out_type);
    field(4, i.src);
    field(8, i.dst);
    field(12, i.params);
    field(16, i.count);
    field(20, i.channels);
    enum_field(22, i.in_type);
    field(24, i.in_scale);
    field(28, i.out_scale);
  }
  void operands(Copy& i) {
    field(4, i.src);
    field(8, i.dst);
    field(12, i.rows);
    field(16, i.row_bytes);
    field(20, i.src_stride);
    field(24, i.dst_stride);
  }
  void operands(Xent& i) {
    field(4, i.src);
    field(8, i.labels);
    field(12, i.dst);
    field(16, i.out);
    field(20, i.rows);
    field(24, i.cols);
    field(26, i.scale);
    split_field(2, 30, i.smoothing);
  }
  void operands(Update& i) {
    enum_field(2, i.kind);
    field(4, i.w);
    field(8, i.g);
    field(12, i.m);
    field(16, i.v);
    field(20, i.params);
    field(24, i.count);
  }
  void operands(Reduce& i) {
    flag(0, i.accumulate);
    enum_field(2, i.op);
    enum_field(3, i.type);
    field(4, i.src);
    field(8, i.dst);
    field(12, i.rows);
    field(16, i.cols);
    field(20, i.stride);
  }
  void operands(PoolGrad& i) {
    enum_field(2, i.kind);
    enum_field(3, i.type);
    field(4, i.x);
    field(8, i.dy);
    field(12, i.dst);
    field(16, i.images);
  }
};

template <class T>
Instruction decode_as(Word w) {
  T inst{};
  Codec c{Bytes32(w), false};
  c.operands(inst);
  return inst;
}

// An fp32 field as text: the shortest decimal that reads back to the same value ({fmt}'s default,
// also for inf and -0), or a NaN's bits in hex, which keep its payload (docs/isa.md §3.3).
std::string float_text(float v) {
  if (!std::isnan(v)) return fmt::format("{}", v);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return fmt::format("{:#010x}", bits);
}

// The element types of eltwise and map.
bool element_type(DType t) { return t == DType::Int8 || t == DType::Bf16 || t == DType::Fp32; }

bool enums_valid(const Instruction& inst) {
  auto dtype_ok = [](DType t) { return static_cast<std::uint8_t>(t) <= 3; };
  if (auto* a = std::get_if<Activate>(&inst))
    return static_cast<std::uint8_t>(a->func) <= 5 && dtype_ok(a->out_type);
  if (auto* p = std::get_if<Pool>(&inst))
    return static_cast<std::uint8_t>(p->kind) <= 1 && element_type(p->type);
  if (auto* e = std::get_if<Eltwise>(&inst))
    return static_cast<std::uint8_t>(e->op) <= 9 && element_type(e->type);
  if (auto* m = std::get_if<Map>(&inst))
    return static_cast<std::uint8_t>(m->func) <= 8 && element_type(m->in_type) &&
           element_type(m->out_type);
  if (auto* u = std::get_if<Update>(&inst)) return static_cast<std::uint8_t>(u->kind) <= 3;
  // Every data type decodes (the vector unit refuses all but fp32, naming the instruction), so
  // that a later type needs no new decoding rule.
  if (auto* r = std::get_if<Reduce>(&inst))
    return static_cast<std::uint8_t>(r->op) <= 2 && dtype_ok(r->type);
  if (auto* g = std::get_if<PoolGrad>(&inst))
    return static_cast<std::uint8_t>(g->kind) <= 1 && dtype_ok(g->type);
  return true;
}

}  // namespace

Opcode opcode_of(const Instruction& inst) {
  return std::visit([](const auto& i) { return OpcodeOf<std::decay_t<decltype(i)>>::value; }, inst);
}

std::string mnemonic(Opcode op) {
  switch (op) {
    case Opcode::Nop: return "nop";
    case Opcode::ReadHost: return "read_host";
    case Opcode::WriteHost: return "write_host";
    case Opcode::ReadMem: return "read_mem";
    case Opcode::WriteMem: return "write_mem";
    case Opcode::ReadWeights: return "read_weights";
    case Opcode::SetWindow: return "set_window";
    case Opcode::MatMul: return "matmul";
    case Opcode::Activate: return "activate";
    case Opcode::Pool: return "pool";
    case Opcode::Eltwise: return "eltwise";
    case Opcode::Softmax: return "softmax";
    case Opcode::Sync: return "sync";
    case Opcode::Tag: return "tag";
    case Opcode::Halt: return "halt";
    case Opcode::Gather: return "gather";
    case Opcode::Copy: return "copy";
    case Opcode::Map: return "map";
    case Opcode::Xent: return "xent";
    case Opcode::Update: return "update";
    case Opcode::Reduce: return "reduce";
    case Opcode::PoolGrad: return "pool_grad";
    case Opcode::IciWrite: return "ici_write";
    case Opcode::IciWait: return "ici_wait";
  }
  return fmt::format("op_{:#04x}", static_cast<unsigned>(op));
}

Word encode(const Instruction& inst) {
  Word w{};
  w[0] = static_cast<std::uint8_t>(opcode_of(inst));
  std::visit(
      [&](const auto& i) {
        auto copy = i;
        Codec c{Bytes32(w), true};
        c.operands(copy);
      },
      inst);
  return w;
}

Instruction decode(const Word& word) {
  Instruction inst;
  switch (static_cast<Opcode>(word[0])) {
    case Opcode::Nop: inst = decode_as<Nop>(word); break;
    case Opcode::ReadHost: inst = decode_as<ReadHost>(word); break;
    case Opcode::WriteHost: inst = decode_as<WriteHost>(word); break;
    case Opcode::ReadMem: inst = decode_as<ReadMem>(word); break;
    case Opcode::WriteMem: inst = decode_as<WriteMem>(word); break;
    case Opcode::ReadWeights: inst = decode_as<ReadWeights>(word); break;
    case Opcode::SetWindow: inst = decode_as<SetWindow>(word); break;
    case Opcode::MatMul: inst = decode_as<MatMul>(word); break;
    case Opcode::Activate: inst = decode_as<Activate>(word); break;
    case Opcode::Pool: inst = decode_as<Pool>(word); break;
    case Opcode::Eltwise: inst = decode_as<Eltwise>(word); break;
    case Opcode::Softmax: inst = decode_as<Softmax>(word); break;
    case Opcode::Sync: inst = decode_as<Sync>(word); break;
    case Opcode::Tag: inst = decode_as<Tag>(word); break;
    case Opcode::Halt: inst = decode_as<Halt>(word); break;
    case Opcode::Gather: inst = decode_as<Gather>(word); break;
    case Opcode::Copy: inst = decode_as<Copy>(word); break;
    case Opcode::Map: inst = decode_as<Map>(word); break;
    case Opcode::Xent: inst = decode_as<Xent>(word); break;
    case Opcode::Update: inst = decode_as<Update>(word); break;
    case Opcode::Reduce: inst = decode_as<Reduce>(word); break;
    case Opcode::PoolGrad: inst = decode_as<PoolGrad>(word); break;
    case Opcode::IciWrite: inst = decode_as<IciWrite>(word); break;
    case Opcode::IciWait: inst = decode_as<IciWait>(word); break;
    default: throw ProgramError(fmt::format("illegal opcode {:#04x}", word[0]));
  }
  if (!enums_valid(inst))
    throw ProgramError(
        fmt::format("{}: function or data type out of range (byte 2 = {}, byte 3 "
                    "= {})",
                    mnemonic(opcode_of(inst)), word[2], word[3]));
  // Every bit the layout does not define must be zero: re-encoding must give the same word.
  if (encode(inst) != word)
    throw ProgramError(fmt::format("{}: reserved bits are not zero", mnemonic(opcode_of(inst))));
  return inst;
}

std::vector<std::uint8_t> encode_all(const std::vector<Instruction>& program) {
  std::vector<std::uint8_t> out;
  out.reserve(program.size() * kInstructionBytes);
  for (const auto& i : program) {
    const Word w = encode(i);
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

std::vector<Instruction> decode_all(const std::uint8_t* data, std::size_t bytes) {
  if (bytes % kInstructionBytes != 0)
    throw ProgramError(
        fmt::format("program of {} bytes is not a whole number of {}-byte "
                    "instructions",
                    bytes, kInstructionBytes));
  std::vector<Instruction> out;
  out.reserve(bytes / kInstructionBytes);
  for (std::size_t i = 0; i < bytes / kInstructionBytes; ++i) {
    Word w;
    std::memcpy(w.data(), data + i * kInstructionBytes, kInstructionBytes);
    try {
      out.push_back(decode(w));
    } catch (const ProgramError& e) {
      throw ProgramError(fmt::format("instruction {}: {}", i, e.what()));
    }
  }
  return out;
}

std::string_view name_of(WeightSource v) { return v == WeightSource::OffChip ? "mem" : "ub"; }
std::string_view name_of(ActFunc v) {
  switch (v) {
    case ActFunc::None: return "none";
    case ActFunc::Relu: return "relu";
    case ActFunc::Relu6: return "relu6";
    case ActFunc::Sigmoid: return "sigmoid";
    case ActFunc::Tanh: return "tanh";
    case ActFunc::Softmax: return "softmax";
  }
  return "?";
}
std::string_view name_of(PoolKind v) { return v == PoolKind::Max ? "max" : "avg"; }
std::string_view name_of(EltOp v) {
  switch (v) {
    case EltOp::Add: return "add";
    case EltOp::Mul: return "mul";
    case EltOp::Max: return "max";
    case EltOp::Min: return "min";
    case EltOp::Sub: return "sub";
    case EltOp::ReluGrad: return "relu_grad";
    case EltOp::Relu6Grad: return "relu6_grad";
    case EltOp::SigmoidGrad: return "sigmoid_grad";
    case EltOp::TanhGrad: return "tanh_grad";
    case EltOp::Div: return "div";
  }
  return "?";
}
std::string_view name_of(MapFunc v) {
  switch (v) {
    case MapFunc::Identity: return "identity";
    case MapFunc::Relu: return "relu";
    case MapFunc::Relu6: return "relu6";
    case MapFunc::LeakyRelu: return "leaky_relu";
    case MapFunc::Elu: return "elu";
    case MapFunc::Sigmoid: return "sigmoid";
    case MapFunc::Tanh: return "tanh";
    case MapFunc::Prelu: return "prelu";
    case MapFunc::Rsqrt: return "rsqrt";
  }
  return "?";
}
std::string_view name_of(UpdateKind v) {
  switch (v) {
    case UpdateKind::Sgd: return "sgd";
    case UpdateKind::Momentum: return "momentum";
    case UpdateKind::Adam: return "adam";
    case UpdateKind::Lars: return "lars";
  }
  return "?";
}

std::string_view name_of(ReduceOp v) {
  switch (v) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::SumSquares: return "sum_squares";
  }
  return "?";
}

std::string to_string(const Instruction& inst) {
  std::string s = mnemonic(opcode_of(inst));
  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        auto copy = i;
        // The plain forms of sync and ici_wait (no region: dst and bytes 0) read as they did
        // before the region form, and xent without smoothing (+0) as before smoothing.
        bool plain = false, one_hot = false;
        if constexpr (std::is_same_v<T, Sync> || std::is_same_v<T, IciWait>)
          plain = i.bytes == 0 && i.dst.value() == 0;
        if constexpr (std::is_same_v<T, Xent>)
          one_hot = std::signbit(i.smoothing) == 0 && i.smoothing == 0.0f;
        visit_fields(copy, [&](std::string_view name, const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if (plain && (name == "dst" || name == "bytes")) return;
          if (one_hot && name == "smoothing") return;
          if constexpr (std::is_same_v<V, bool>) {
            if (v) s += fmt::format(" {}", name);
          } else if constexpr (std::is_enum_v<V>) {
            s += fmt::format(" {}={}", name, name_of(v));
          } else if constexpr (std::is_integral_v<V>) {
            s += fmt::format(" {}={}", name, v);
          } else if constexpr (std::is_floating_point_v<V>) {
            s += fmt::format(" {}={}", name, float_text(v));
          } else if constexpr (std::is_same_v<V, RawAddress>) {
            s += fmt::format(" {}={:#x}", name, v.value);
          } else {
            s += fmt::format(" {}={:#x}", name, v.value());
          }
        });
      },
      inst);
  return s;
}

}  // namespace tpu::isa
