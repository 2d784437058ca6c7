#include "hw/isa/assembler.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "hw/common/error.h"
#include "hw/isa/fields.h"

namespace tpu::isa {
namespace {

// Longest piece of a token quoted in an error message: a hostile line may be megabytes long.
constexpr std::size_t kShownBytes = 40;

// A token as an error message shows it: quoted, with quotes, backslashes and non-printable bytes
// escaped, so binary input gives a one-line message that says exactly which bytes were read.
std::string quoted(std::string_view tok) {
  std::string s = "\"";
  for (std::size_t i = 0; i < tok.size() && i < kShownBytes; ++i) {
    const auto c = static_cast<unsigned char>(tok[i]);
    if (c == '"' || c == '\\') {
      s += '\\';
      s += static_cast<char>(c);
    } else if (c < 0x20 || c > 0x7e) {
      s += fmt::format("\\x{:02x}", c);
    } else {
      s += static_cast<char>(c);
    }
  }
  s += '"';
  if (tok.size() > kShownBytes) s += fmt::format("... ({} bytes)", tok.size());
  return s;
}

std::string joined(const std::vector<std::string_view>& names) {
  std::string s;
  for (const std::string_view n : names) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

// Plain comparisons, not std::isspace: that depends on the locale and is undefined for bytes
// above 0x7f. '\r' is a blank so that CRLF files read like LF files.
constexpr bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

std::vector<std::string_view> tokens_of(std::string_view line) {
  line = line.substr(0, line.find_first_of("#;"));
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

enum class Number { Ok, NotANumber, TooLarge };

// Decimal (leading zeros do not make it octal) or hex after 0x / 0X; no sign, suffix or
// separators. The whole string is scanned even after an overflow, so "99...9z" is NotANumber.
Number parse_unsigned(std::string_view s, std::uint64_t& out) {
  std::uint64_t base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty()) return Number::NotANumber;
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t v = 0;
  bool overflow = false;
  for (const char ch : s) {
    std::uint64_t d = 0;
    if (ch >= '0' && ch <= '9')
      d = static_cast<std::uint64_t>(ch - '0');
    else if (base == 16 && ch >= 'a' && ch <= 'f')
      d = static_cast<std::uint64_t>(ch - 'a' + 10);
    else if (base == 16 && ch >= 'A' && ch <= 'F')
      d = static_cast<std::uint64_t>(ch - 'A' + 10);
    else
      return Number::NotANumber;
    if (v > (kMax - d) / base)
      overflow = true;
    else
      v = v * base + d;
  }
  if (overflow) return Number::TooLarge;
  out = v;
  return Number::Ok;
}

// Where a line came from, for messages "origin:line: mnemonic: what".
struct Line {
  const std::string& origin;
  std::size_t number;
  std::string_view op_name;

  [[noreturn]] void fail(const std::string& what) const {
    throw ProgramError(fmt::format("{}:{}: {}: {}", origin, number, op_name, what));
  }
};

template <class T>
struct AddressRep {
  using type = void;
};
template <class Tag_, class Rep>
struct AddressRep<Address<Tag_, Rep>> {
  using type = Rep;
};

// An unsigned field, or a signed one (eltwise shift and multiplier), whose value may then start
// with '-'.
template <class Rep>
void set_integer(const Line& line, std::string_view tok, std::string_view name,
                 std::string_view value, Rep& field) {
  constexpr bool kSigned = std::is_signed_v<Rep>;
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(std::numeric_limits<Rep>::max());
  const auto allowed = [&] {
    if constexpr (kSigned)
      return fmt::format(
          "{} is a signed {}-bit integer, {}..{}, decimal or 0x hex after an optional -", name,
          8 * sizeof(Rep), std::numeric_limits<Rep>::min(), kMax);
    else
      return fmt::format("{} is an unsigned {}-bit integer, 0..{} = {:#x}, decimal or 0x hex", name,
                         8 * sizeof(Rep), kMax, kMax);
  };
  const bool negative = kSigned && !value.empty() && value.front() == '-';
  if (negative) value.remove_prefix(1);
  std::uint64_t v = 0;
  switch (parse_unsigned(value, v)) {
    case Number::NotANumber:
      line.fail(fmt::format("{}: not a number ({})", quoted(tok), allowed()));
    case Number::TooLarge: line.fail(fmt::format("{}: out of range ({})", quoted(tok), allowed()));
    case Number::Ok: break;
  }
  // Two's complement: the most negative value's magnitude is one more than the maximum.
  if (v > kMax + (negative ? 1 : 0))
    line.fail(fmt::format("{}: out of range ({})", quoted(tok), allowed()));
  if constexpr (kSigned)
    field = negative ? static_cast<Rep>(-static_cast<std::int64_t>(v)) : static_cast<Rep>(v);
  else
    field = static_cast<Rep>(v);
}

// An fp32 field (map in_scale, out_scale): a decimal number as std::from_chars reads it (locale-
// independent: 0.05, -1e-3, inf, nan), or after 0x the value's IEEE-754 bits, as the disassembler
// prints a NaN (docs/isa.md §3.3).
void set_float(const Line& line, std::string_view tok, std::string_view name,
               std::string_view value, float& field) {
  const auto allowed = [&] {
    return fmt::format(
        "{} is an fp32 value: a decimal number such as 0.05, -1e-3 or inf, or its 32 IEEE-754 bits "
        "after 0x",
        name);
  };
  if (value.size() > 2 && value[0] == '0' && (value[1] == 'x' || value[1] == 'X')) {
    std::uint64_t bits = 0;
    if (parse_unsigned(value, bits) != Number::Ok || bits > 0xffffffffu)
      line.fail(fmt::format("{}: not 32 bits in hex ({})", quoted(tok), allowed()));
    const auto word = static_cast<std::uint32_t>(bits);
    std::memcpy(&field, &word, sizeof field);
    return;
  }
  float v = 0.0f;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec == std::errc::result_out_of_range)
    line.fail(fmt::format("{}: out of range ({})", quoted(tok), allowed()));
  if (ec != std::errc() || end != value.data() + value.size())
    line.fail(fmt::format("{}: not a number ({})", quoted(tok), allowed()));
  field = v;
}

// The codes of an enum that have names: 0, 1, 2, ... until name_of has none (isa.h and dtype.h
// number every enum densely from 0) or repeats one (WeightSource is a flag bit: every non-zero
// code prints as "ub").
template <class E>
std::vector<E> enum_values() {
  std::vector<E> out;
  for (unsigned raw = 0; raw <= std::numeric_limits<std::underlying_type_t<E>>::max(); ++raw) {
    const E e = static_cast<E>(raw);
    const std::string_view n = name_of(e);
    if (n == "?" || std::any_of(out.begin(), out.end(), [&](E x) { return name_of(x) == n; }))
      break;
    out.push_back(e);
  }
  return out;
}

// Whether field `field` of T may hold `value`: the decoder is the one authority on legal codes
// (pool and eltwise take only int8 and bf16), so ask it about an instruction that differs from
// the default only in that field.
template <class T, class E>
bool decodes_with(std::string_view field, E value) {
  T probe{};
  visit_fields(probe, [&](std::string_view n, auto&& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, E>)
      if (n == field) v = value;
  });
  try {
    T back = std::get<T>(decode(encode(probe)));
    bool same = false;
    visit_fields(back, [&](std::string_view n, auto&& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, E>)
        if (n == field) same = v == value;
    });
    return same;
  } catch (const ProgramError&) {
    return false;
  }
}

template <class T, class E>
void set_enum(const Line& line, std::string_view tok, std::string_view field,
              std::string_view value, E& out) {
  std::vector<std::string_view> allowed;
  for (const E e : enum_values<E>()) {
    if (!decodes_with<T>(field, e)) continue;
    if (name_of(e) == value) {
      out = e;
      return;
    }
    allowed.push_back(name_of(e));
  }
  line.fail(
      fmt::format("{}: unknown value for {} (allowed: {})", quoted(tok), field, joined(allowed)));
}

template <class T>
std::string field_list(std::string_view op_name) {
  T probe{};
  std::vector<std::string_view> fields, flags;
  visit_fields(probe, [&](std::string_view n, auto&& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>)
      flags.push_back(n);
    else
      fields.push_back(n);
  });
  if (fields.empty() && flags.empty()) return fmt::format("{} takes no fields", op_name);
  std::string s;
  if (!fields.empty()) s += "fields: " + joined(fields);
  if (!fields.empty() && !flags.empty()) s += "; ";
  if (!flags.empty()) s += "flags: " + joined(flags);
  return s;
}

template <class T, class V>
void set_field(const Line& line, std::string_view tok, std::string_view field, bool has_value,
               std::string_view value, V&& v) {
  using F = std::decay_t<V>;
  if constexpr (std::is_same_v<F, bool>) {
    if (has_value)
      line.fail(
          fmt::format("{}: {} is a flag and takes no value (write {} to set it, leave it "
                      "out to clear it)",
                      quoted(tok), field, field));
    v = true;
  } else {
    if (!has_value)
      line.fail(fmt::format("{}: {} needs a value ({}=...)", quoted(tok), field, field));
    if constexpr (std::is_enum_v<F>) {
      set_enum<T>(line, tok, field, value, v);
    } else if constexpr (std::is_same_v<F, RawAddress>) {
      set_integer(line, tok, field, value, v.value);
    } else if constexpr (std::is_integral_v<F>) {
      set_integer(line, tok, field, value, v);
    } else if constexpr (std::is_floating_point_v<F>) {
      set_float(line, tok, field, value, v);
    } else {
      static_assert(!std::is_void_v<typename AddressRep<F>::type>,
                    "fields.h names a field of a type the assembler cannot read");
      typename AddressRep<F>::type r{};
      set_integer(line, tok, field, value, r);
      v = F(r);
    }
  }
}

// Fields absent from the line keep T's default member initialisers (docs/isa.md §3.3).
template <class T>
Instruction parse_as(const Line& line, const std::vector<std::string_view>& tokens) {
  T inst{};
  std::vector<std::string_view> given;
  for (std::size_t t = 1; t < tokens.size(); ++t) {
    const std::string_view tok = tokens[t];
    const std::size_t eq = tok.find('=');
    const bool has_value = eq != std::string_view::npos;
    const std::string_view name = tok.substr(0, eq);
    const std::string_view value = has_value ? tok.substr(eq + 1) : std::string_view{};
    bool known = false;
    visit_fields(inst, [&](std::string_view field, auto&& v) {
      if (field != name) return;
      known = true;
      if (std::find(given.begin(), given.end(), name) != given.end())
        line.fail(fmt::format("{}: {} given twice", quoted(tok), field));
      given.push_back(name);
      set_field<T>(line, tok, field, has_value, value, std::forward<decltype(v)>(v));
    });
    if (known) continue;
    if (name.empty()) line.fail(fmt::format("{}: no field name before '='", quoted(tok)));
    line.fail(fmt::format("unknown field {} ({})", quoted(name), field_list<T>(line.op_name)));
  }
  // Each field was checked on its own; the decoder has the last word on the whole instruction,
  // so that everything assemble() returns is a legal program.
  try {
    (void)decode(encode(inst));
  } catch (const ProgramError& e) {
    line.fail(fmt::format("not a legal instruction: {}", e.what()));
  }
  return inst;
}

using Parser = Instruction (*)(const Line&, const std::vector<std::string_view>&);
struct MnemonicEntry {
  std::string name;
  Parser parse;
};

template <std::size_t... I>
std::vector<MnemonicEntry> make_mnemonics(std::index_sequence<I...>) {
  return {MnemonicEntry{mnemonic(opcode_of(Instruction(std::in_place_index<I>))),
                        &parse_as<std::variant_alternative_t<I, Instruction>>}...};
}

// One entry per alternative of Instruction, in opcode order.
const std::vector<MnemonicEntry>& mnemonics() {
  static const std::vector<MnemonicEntry> table =
      make_mnemonics(std::make_index_sequence<std::variant_size_v<Instruction>>{});
  return table;
}

}  // namespace

std::vector<Instruction> assemble(const std::string& text, const std::string& origin) {
  const std::string_view all(text);
  std::vector<Instruction> program;
  std::size_t number = 1;
  for (std::size_t pos = 0; pos <= all.size(); ++number) {
    const std::size_t end = std::min(all.find('\n', pos), all.size());
    const std::vector<std::string_view> tokens = tokens_of(all.substr(pos, end - pos));
    pos = end + 1;
    if (tokens.empty()) continue;
    const auto& table = mnemonics();
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const MnemonicEntry& m) { return m.name == tokens[0]; });
    if (it == table.end()) {
      std::vector<std::string_view> names;
      for (const auto& m : table) names.push_back(m.name);
      throw ProgramError(fmt::format("{}:{}: unknown mnemonic {} (mnemonics: {})", origin, number,
                                     quoted(tokens[0]), joined(names)));
    }
    program.push_back(it->parse(Line{origin, number, it->name}, tokens));
  }
  return program;
}

std::string disassemble(const std::vector<Instruction>& program) {
  std::string s;
  for (const Instruction& inst : program) {
    s += to_string(inst);
    s += '\n';
  }
  return s;
}

std::vector<std::uint8_t> to_binary(const std::vector<Instruction>& program) {
  return encode_all(program);
}

std::vector<Instruction> from_binary(const std::vector<std::uint8_t>& bytes,
                                     const std::string& origin) {
  try {
    return decode_all(bytes.data(), bytes.size());
  } catch (const ProgramError& e) {
    throw ProgramError(fmt::format("{}: {}", origin, e.what()));
  }
}

}  // namespace tpu::isa
