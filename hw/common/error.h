// Errors that carry where the bad input is. Library code throws; the CLI prints what() on one
// line and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace tpu {

// A bad input file: the message names the file, the location inside it (JSON pointer, line,
// instruction index) and what is allowed.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config that parses but describes an impossible chip.
class ConfigError : public InputError {
 public:
  using InputError::InputError;
};

// A program that asks the chip for something it cannot do (illegal opcode, address out of range).
class ProgramError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace tpu
