// Reading inputs and writing outputs so that a failed or interrupted run never leaves a file that
// looks finished: everything tpusim writes goes to a temporary file beside the target and is
// renamed over it (POSIX rename(2) is atomic within one file system).
#pragma once

#include <string>

namespace tpu::report {

// Throws InputError naming the file when it cannot be read.
std::string read_text_file(const std::string& path);

// Throws InputError naming the file when it cannot be written; leaves no temporary behind.
void write_atomically(const std::string& path, const std::string& text);

// Creates `dir` and its parents if needed; throws InputError naming it otherwise.
void make_directory(const std::string& dir);

}  // namespace tpu::report
