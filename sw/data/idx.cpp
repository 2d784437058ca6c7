#include "sw/data/idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <memory>

#include "hw/common/error.h"
#include "hw/common/input_file.h"

namespace tpu::data {
namespace {

// LeCun's IDX format (yann.lecun.com/exdb/mnist): a big-endian magic whose third byte is the
// element type (0x08 = unsigned byte) and fourth the number of dimensions, then one big-endian
// uint32 per dimension, then the elements in row-major order.
constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;
constexpr std::uint32_t kFashionMnistClasses = 10;
constexpr std::uint32_t kFashionMnistSide = 28;
// Bytes read per gzread call: a hostile header announcing billions of elements is caught as
// "truncated" once the stream ends, before more memory than the stream holds is allocated.
constexpr std::size_t kChunk = std::size_t{1} << 20;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    InputFd in = open_input(path, "Fashion-MNIST file");
    errno = 0;
    file_.reset(gzdopen(in.fd(), "rb"));
    if (!file_)
      throw InputError(fmt::format("{}: cannot read the Fashion-MNIST file ({})", path,
                                   errno != 0 ? path_error_reason(errno) : "out of memory"));
    in.release();  // gzclose closes it
    // zlib reads a file without a gzip header "transparently" as plain bytes; the IDX files are
    // always shipped compressed, so a plain (or empty) file is most likely the wrong file.
    if (gzdirect(file_.get()) != 0)
      throw InputError(
          fmt::format("{}: not a gzip file (expected a gzip-compressed IDX file)", path));
  }

  // Reads exactly `n` bytes; `what` names the part of the file for the message.
  void read_exact(std::uint8_t* dst, std::size_t n, const char* what) {
    std::size_t done = 0;
    while (done < n) {
      const std::size_t want = std::min(n - done, kChunk);
      const int got = gzread(file_.get(), dst + done, static_cast<unsigned>(want));
      check_stream(got);
      if (got == 0)
        throw InputError(fmt::format("{}: truncated: the file ends after {} of the {} bytes of {}",
                                     path_, done, n, what));
      done += static_cast<std::size_t>(got);
    }
  }

  // Reads `n` bytes into `out`, growing it as the data arrives.
  void read_into(std::vector<std::uint8_t>& out, std::uint64_t n, const char* what) {
    out.clear();
    out.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, 64 * kChunk)));
    std::uint64_t done = 0;
    while (done < n) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n - done, kChunk));
      out.resize(static_cast<std::size_t>(done) + want);
      const int got = gzread(file_.get(), out.data() + done, static_cast<unsigned>(want));
      check_stream(got);
      if (got == 0)
        throw InputError(
            fmt::format("{}: truncated: the header announces {} bytes of {}, the file "
                        "holds {}",
                        path_, n, what, done));
      done += static_cast<std::uint64_t>(got);
    }
    out.resize(static_cast<std::size_t>(n));
  }

  std::uint32_t read_be32(const char* what) {
    std::array<std::uint8_t, 4> b{};
    read_exact(b.data(), b.size(), what);
    return std::uint32_t{b[0]} << 24 | std::uint32_t{b[1]} << 16 | std::uint32_t{b[2]} << 8 |
           std::uint32_t{b[3]};
  }

  // Reading past the data also makes zlib check the gzip trailer (CRC-32 and length).
  void require_end(std::uint64_t data_bytes) {
    std::array<std::uint8_t, 4096> extra{};
    std::uint64_t more = 0;
    for (;;) {
      const int got = gzread(file_.get(), extra.data(), static_cast<unsigned>(extra.size()));
      check_stream(got);
      if (got == 0) break;
      more += static_cast<std::uint64_t>(got);
    }
    if (more != 0)
      throw InputError(
          fmt::format("{}: {} bytes after the {} data bytes the header's dimensions "
                      "announce",
                      path_, more, data_bytes));
  }

 private:
  void check_stream(int got) {
    int code = Z_OK;
    const char* msg = gzerror(file_.get(), &code);
    if (got >= 0 && (code == Z_OK || code == Z_STREAM_END)) return;
    if (code == Z_BUF_ERROR)
      throw InputError(fmt::format("{}: truncated gzip stream ({})", path_, msg));
    if (code == Z_ERRNO)
      throw InputError(fmt::format("{}: read error ({})", path_, std::strerror(errno)));
    throw InputError(fmt::format("{}: corrupt gzip stream ({})", path_, msg));
  }

  std::string path_;
  GzHandle file_;
};

void read_magic(GzReader& in, const std::string& path, std::uint32_t expected, const char* kind) {
  const std::uint32_t magic = in.read_be32("the IDX magic number");
  if (magic != expected)
    throw InputError(fmt::format("{}: bad magic 0x{:08x} (expected 0x{:08x}, an IDX file of {})",
                                 path, magic, expected, kind));
}

}  // namespace

Images read_idx_images(const std::string& path) {
  GzReader in(path);
  read_magic(in, path, kImagesMagic, "unsigned bytes with 3 dimensions: images");
  Images img;
  img.count = in.read_be32("the image count");
  img.rows = in.read_be32("the row count");
  img.cols = in.read_be32("the column count");
  if (img.rows == 0 || img.cols == 0)
    throw InputError(fmt::format("{}: images of {} x {} pixels (rows and columns must be >= 1)",
                                 path, img.rows, img.cols));
  // rows x cols fits 64 bits; times the count it may not (three 32-bit factors), so the product
  // is checked before it is formed.
  const std::uint64_t per_image = std::uint64_t{img.rows} * img.cols;
  if (img.count != 0 && per_image > SIZE_MAX / img.count)
    throw InputError(fmt::format("{}: {} images of {} x {} pixels do not fit in memory", path,
                                 img.count, img.rows, img.cols));
  const std::uint64_t bytes = per_image * img.count;
  in.read_into(img.pixels, bytes, "pixels");
  in.require_end(bytes);
  return img;
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path) {
  GzReader in(path);
  read_magic(in, path, kLabelsMagic, "unsigned bytes with 1 dimension: labels");
  const std::uint32_t count = in.read_be32("the label count");
  std::vector<std::uint8_t> labels;
  in.read_into(labels, count, "labels");
  in.require_end(count);
  return labels;
}

Dataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  if (split != "train" && split != "t10k")
    throw InputError(
        fmt::format("Fashion-MNIST split \"{}\" (must be \"train\" or \"t10k\")", split));
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte.gz";
  Dataset d;
  d.images = read_idx_images(images_path);
  d.labels = read_idx_labels(labels_path);
  if (d.labels.size() != d.images.count)
    throw InputError(fmt::format("{}: {} labels, but {} holds {} images (counts must match)",
                                 labels_path, d.labels.size(), images_path, d.images.count));
  // Fashion-MNIST has ten classes (Xiao et al. 2017, Table 1); a larger label is a wrong file and
  // would index past a classifier's outputs.
  for (std::size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] >= kFashionMnistClasses)
      throw InputError(fmt::format("{}: label {} = {} (Fashion-MNIST labels are 0..{})",
                                   labels_path, i, d.labels[i], kFashionMnistClasses - 1));
  // Xiao et al. 2017: every Fashion-MNIST image is 28 x 28; models and the trainer index the
  // pixels as such.
  if (d.images.rows != kFashionMnistSide || d.images.cols != kFashionMnistSide)
    throw InputError(fmt::format("{}: images of {} x {} pixels (Fashion-MNIST's are {} x {})",
                                 images_path, d.images.rows, d.images.cols, kFashionMnistSide,
                                 kFashionMnistSide));
  return d;
}

}  // namespace tpu::data
