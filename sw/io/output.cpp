#include "sw/io/output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <system_error>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "sw/io/signals.h"

namespace tpu::io {

namespace {

// How an output is named in messages: what the caller said ("--json output"), or "output".
std::string label(const std::string& option) { return option.empty() ? "output" : option; }

// Symlinks followed before giving up, as the kernel's own limit (path_resolution(7)).
constexpr int kMaxSymlinkHops = 40;

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string real_dir(const std::string& dir) {
  char buf[PATH_MAX];
  if (::realpath(dir.c_str(), buf) == nullptr) return dir;
  return buf;
}

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::system_error(errno, std::generic_category());
    if (n == 0) throw std::system_error(EIO, std::generic_category());
    done += static_cast<std::size_t>(n);
  }
}

mode_t current_umask() {
  const mode_t m = ::umask(0);
  ::umask(m);
  return m;
}

}  // namespace

struct OutputSet::Target {
  enum class Kind {
    Descriptor,  // `-` or one of this process's descriptors: written to that descriptor
    Direct,      // a device, a FIFO, another process's descriptor: opened and written
    Replace,     // an existing regular file: a temporary renamed over it
    Create,      // a new file: a temporary renamed to it
  };
  std::string path, option;
  Kind kind = Kind::Create;
  std::string real;   // Direct, Replace, Create: the file itself (symlinks followed)
  int fd = -1;        // Descriptor
  struct stat st {};  // Replace
  std::string temp;
  int temp_fd = -1;
  CleanupPath cleanup;
  std::string content;
  bool has_content = false;

  [[nodiscard]] bool renamed() const { return kind == Kind::Replace || kind == Kind::Create; }
  [[noreturn]] void fail(const std::string& why) const {
    throw InputError(fmt::format("{}: cannot write the {} ({})", path, label(option), why));
  }
};

struct OutputSet::Dir {
  std::string path, option;
  std::vector<std::string> made;  // outermost first
  std::vector<CleanupPath> cleanup;
};

OutputSet::OutputSet() = default;

OutputSet::~OutputSet() {
  if (!committed_) discard();
}

std::size_t OutputSet::add(const std::string& path, const std::string& option) {
  auto t = std::make_unique<Target>();
  t->path = path;
  t->option = option;
  targets_.push_back(std::move(t));
  return targets_.size() - 1;
}

void OutputSet::add_directory(const std::string& dir, const std::string& option) {
  auto d = std::make_unique<Dir>();
  d->path = dir;
  d->option = option;
  dirs_.push_back(std::move(d));
}

std::size_t OutputSet::size() const { return targets_.size(); }

bool OutputSet::uses_stdout() const {
  for (const auto& t : targets_)
    if (t->kind == Target::Kind::Descriptor && t->fd == STDOUT_FILENO) return true;
  return false;
}

void OutputSet::check(const std::vector<NamedInput>& inputs) {
  if (checked_) throw std::logic_error("OutputSet::check called twice");
  checked_ = true;

  // 1. Directories the outputs go into, made now (and removed again if nothing is committed).
  for (auto& d : dirs_) {
    refuse_stdout_for_directory(d->path, d->option);
    std::vector<std::string> parts;
    std::string p = d->path;
    while (!p.empty() && p != "/" && p != ".") {
      parts.push_back(p);
      const std::string up = parent_of(p);
      if (up == p) break;
      p = up;
    }
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
      struct stat st {};
      if (::stat(it->c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
          throw InputError(
              fmt::format("{}: cannot make the directory for the {} ({} is not a "
                          "directory)",
                          d->path, label(d->option), *it));
        continue;
      }
      if (errno != ENOENT)
        throw InputError(fmt::format("{}: cannot make the directory for the {} ({}: {})", d->path,
                                     label(d->option), *it, path_error_reason(errno)));
      SignalBlock block;
      if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST)
        throw InputError(fmt::format("{}: cannot make the directory for the {} ({}: {})", d->path,
                                     label(d->option), *it, path_error_reason(errno)));
      d->made.push_back(*it);
      d->cleanup.emplace_back(*it, CleanupPath::Kind::Directory);
    }
  }

  // 2. Each target resolved: a descriptor, a device, or a file (symlinks followed).
  const mode_t umask = current_umask();
  for (auto& tp : targets_) {
    Target& t = *tp;
    if (t.path.empty()) t.fail("an empty file name");
    std::string cur = t.path == "-" ? "/dev/stdout" : t.path;
    bool resolved = false;
    for (int hop = 0; hop <= kMaxSymlinkHops && !resolved; ++hop) {
      int fd = -1;
      if (is_descriptor_path(cur, &fd)) {
        if (fd >= 0) {
          const int flags = ::fcntl(fd, F_GETFL);
          if (flags < 0) t.fail(fmt::format("descriptor {} is not open", fd));
          if ((flags & O_ACCMODE) == O_RDONLY)
            t.fail(fmt::format("descriptor {} is open for reading only", fd));
          t.kind = Target::Kind::Descriptor;
          t.fd = fd;
        } else {
          if (::faccessat(AT_FDCWD, cur.c_str(), W_OK, AT_EACCESS) != 0)
            t.fail(path_error_reason(errno));
          t.kind = Target::Kind::Direct;
          t.real = cur;
        }
        resolved = true;
        break;
      }
      struct stat st {};
      if (::lstat(cur.c_str(), &st) != 0) {
        if (errno != ENOENT) t.fail(path_error_reason(errno));
        struct stat dst {};
        const std::string dir = parent_of(cur);
        if (::stat(dir.c_str(), &dst) != 0)
          t.fail(fmt::format("its directory {}: {}", dir,
                             errno == ENOENT ? "no such directory" : path_error_reason(errno)));
        if (!S_ISDIR(dst.st_mode)) t.fail(fmt::format("{} is not a directory", dir));
        t.kind = Target::Kind::Create;
        t.real = cur;
        resolved = true;
        break;
      }
      if (S_ISLNK(st.st_mode)) {
        std::string link(PATH_MAX, '\0');
        const ssize_t n = ::readlink(cur.c_str(), link.data(), link.size());
        if (n < 0) t.fail(path_error_reason(errno));
        link.resize(static_cast<std::size_t>(n));
        cur = link.rfind('/', 0) == 0 ? link : parent_of(cur) + "/" + link;
        continue;
      }
      if (S_ISDIR(st.st_mode)) t.fail("is a directory");
      t.real = cur;
      if (S_ISREG(st.st_mode)) {
        if (::faccessat(AT_FDCWD, cur.c_str(), W_OK, AT_EACCESS) != 0)
          t.fail(errno == EACCES ? "the file is read-only for this user"
                                 : path_error_reason(errno));
        t.kind = Target::Kind::Replace;
        t.st = st;
      } else {
        if (::faccessat(AT_FDCWD, cur.c_str(), W_OK, AT_EACCESS) != 0)
          t.fail(path_error_reason(errno));
        t.kind = Target::Kind::Direct;
      }
      resolved = true;
    }
    if (!resolved) t.fail(path_error_reason(ELOOP));
  }

  // 3. No output may be an input of the run, or another output.
  for (const auto& p : inputs) {
    struct stat st {};
    if (!p.path.empty() && ::stat(p.path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      named_inputs_.push_back(InputIdentity{st.st_dev, st.st_ino, p.path, p.what});
  }
  check_inputs();
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const Target& t = *targets_[i];
    for (std::size_t j = 0; j < i; ++j) {
      const Target& u = *targets_[j];
      bool same = false;
      if (t.kind == Target::Kind::Descriptor && u.kind == Target::Kind::Descriptor)
        same = t.fd == u.fd;
      else if (t.kind == Target::Kind::Replace && u.kind == Target::Kind::Replace)
        same = t.st.st_dev == u.st.st_dev && t.st.st_ino == u.st.st_ino;
      if (!same && t.renamed() && u.renamed())
        same = real_dir(parent_of(t.real)) + "/" + base_of(t.real) ==
               real_dir(parent_of(u.real)) + "/" + base_of(u.real);
      if (same)
        throw InputError(
            fmt::format("{}: named for both the {} and the {}; give each output its own file",
                        t.path, label(u.option), label(t.option)));
    }
  }

  // 4. The temporaries, created now: a directory that cannot take a new file is found before
  //    the work starts. Registered before they exist (with the signals held back), so no signal
  //    can leave one behind.
  static unsigned counter = 0;
  for (auto& tp : targets_) {
    Target& t = *tp;
    if (!t.renamed()) continue;
    const std::string dir = parent_of(t.real);
    std::string base = base_of(t.real);
    // NAME_MAX: room for the dot, the process id, the counter and the suffix.
    if (base.size() > 200) base.resize(200);
    for (;;) {
      t.temp = fmt::format("{}/.{}.{}-{}{}", dir, base, ::getpid(), counter++, kTempSuffix);
      SignalBlock block;
      t.cleanup = CleanupPath(t.temp, CleanupPath::Kind::File);
      t.temp_fd = ::open(t.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (t.temp_fd >= 0) break;
      const int err = errno;
      t.cleanup.release();
      if (err == EEXIST) continue;
      t.fail(fmt::format("cannot create a file in {}: {}", dir, path_error_reason(err)));
    }
    const mode_t mode = t.kind == Target::Kind::Replace ? (t.st.st_mode & 07777) : (0666 & ~umask);
    if (::fchmod(t.temp_fd, mode) != 0) t.fail(path_error_reason(errno));
    // Root keeps the file's owner; anyone else cannot give a file away, and needs not.
    if (t.kind == Target::Kind::Replace && ::geteuid() == 0 &&
        ::fchown(t.temp_fd, t.st.st_uid, t.st.st_gid) != 0) {
      // Best effort (a file system without owners): the content and the mode still hold.
    }
  }
}

void OutputSet::check_inputs() const {
  std::vector<InputIdentity> in = inputs_read();
  in.insert(in.end(), named_inputs_.begin(), named_inputs_.end());
  for (const auto& tp : targets_) {
    const Target& t = *tp;
    if (t.kind != Target::Kind::Replace) continue;
    for (const auto& f : in)
      if (f.dev == t.st.st_dev && f.ino == t.st.st_ino)
        throw InputError(fmt::format(
            "{}: the {} would overwrite the {} this command reads ({}); choose another file",
            t.path, label(t.option), f.what, f.path));
  }
}

void OutputSet::set(std::size_t i, std::string content) {
  Target& t = *targets_.at(i);
  t.content = std::move(content);
  t.has_content = true;
}

void OutputSet::commit() {
  if (!checked_) check();
  for (const auto& t : targets_)
    if (!t->has_content)
      throw std::logic_error(fmt::format("OutputSet: no content for {}", t->path));
  // Inputs opened since check() (a data file, weights found beside the model) count too.
  check_inputs();

  // 1. Every file's content into its temporary. Nothing the user sees has changed yet.
  for (auto& tp : targets_) {
    Target& t = *tp;
    if (!t.renamed()) continue;
    try {
      write_all(t.temp_fd, t.content);
    } catch (const std::system_error& e) {
      t.fail(path_error_reason(e.code().value()));
    }
    const int fd = t.temp_fd;
    t.temp_fd = -1;
    // close() reports what a network file system found when writing back.
    if (::close(fd) != 0) t.fail(path_error_reason(errno));
  }
  // 2. Streams: standard output, devices, FIFOs. A failure here still leaves every file as it
  //    was (the temporaries are removed).
  std::cout.flush();
  for (auto& tp : targets_) {
    Target& t = *tp;
    if (t.renamed()) continue;
    int fd = t.fd;
    if (t.kind == Target::Kind::Direct) {
      fd = ::open(t.real.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd < 0) t.fail(path_error_reason(errno));
    }
    int err = 0;
    try {
      write_all(fd, t.content);
    } catch (const std::system_error& e) {
      err = e.code().value();
    }
    if (t.kind == Target::Kind::Direct && ::close(fd) != 0 && err == 0) err = errno;
    if (err != 0) t.fail(path_error_reason(err));
  }
  // 3. The renames, with the termination signals held back so that a signal finds either no
  //    file replaced or all of them (it is taken when the block ends).
  {
    SignalBlock block;
    for (auto& tp : targets_) {
      Target& t = *tp;
      if (!t.renamed()) continue;
      if (::rename(t.temp.c_str(), t.real.c_str()) != 0)
        t.fail(fmt::format("cannot rename {} over it: {}", t.temp, path_error_reason(errno)));
      t.temp.clear();
      t.cleanup.release();
    }
    for (auto& d : dirs_) d->cleanup.clear();
    committed_ = true;
  }
}

void OutputSet::discard() noexcept {
  SignalBlock block;
  for (auto& tp : targets_) {
    Target& t = *tp;
    if (t.temp_fd >= 0) ::close(t.temp_fd);
    t.temp_fd = -1;
    if (!t.temp.empty()) ::unlink(t.temp.c_str());
    t.temp.clear();
    t.cleanup.release();
  }
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    Dir& d = **it;
    for (auto m = d.made.rbegin(); m != d.made.rend(); ++m) ::rmdir(m->c_str());
    d.made.clear();
    d.cleanup.clear();
  }
}

void write_file(const std::string& path, const std::string& content, const std::string& option) {
  OutputSet out;
  const std::size_t i = out.add(path, option);
  out.check();
  out.set(i, content);
  out.commit();
}

void refuse_stdout_for_directory(const std::string& dir, const std::string& option) {
  if (dir == "-")
    throw InputError(
        fmt::format("-: the {} is a directory of several files, not one stream", label(option)));
}

void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw InputError(
        fmt::format("{}: cannot create the directory ({})", dir, path_error_reason(ec.value())));
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(
        fmt::format("{}: cannot create the directory (a file of that name exists)", dir));
}

}  // namespace tpu::io
