// The IDX reader (sw/data): the real Fashion-MNIST test split as Debian ships it, and hand-made
// files for every way a file can be wrong. Each error must name the file and the problem
// (STYLE "Errors").
#include "sw/data/idx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "hw/common/error.h"

namespace tpu::data {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Xiao, Rasul & Vollgraf 2017 (Fashion-MNIST): 10,000 test images of 28 x 28 grey pixels, ten
// classes of 1,000 images each.
constexpr std::uint32_t kTestImages = 10000;
constexpr std::uint32_t kSide = 28;
constexpr std::uint32_t kClasses = 10;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("tpusim_idx_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void put_be32(std::vector<std::uint8_t>& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}

std::vector<std::uint8_t> idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols,
                                     const std::vector<std::uint8_t>& pixels) {
  std::vector<std::uint8_t> b;
  put_be32(b, 0x00000803);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

std::vector<std::uint8_t> idx_labels(const std::vector<std::uint8_t>& labels) {
  std::vector<std::uint8_t> b;
  put_be32(b, 0x00000801);
  put_be32(b, static_cast<std::uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::uint8_t> sequence(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(FashionMnistIdx, DebianTestSplitHoldsTenThousandBalancedImages) {
  const Dataset d = load_fashion_mnist(kDefaultFashionMnistDir, "t10k");
  EXPECT_EQ(d.images.count, kTestImages);
  EXPECT_EQ(d.images.rows, kSide);
  EXPECT_EQ(d.images.cols, kSide);
  EXPECT_EQ(d.images.pixels.size(), std::size_t{kTestImages} * kSide * kSide);
  ASSERT_EQ(d.labels.size(), kTestImages);
  std::array<std::uint32_t, kClasses> per_class{};
  for (std::uint8_t l : d.labels) {
    ASSERT_LT(l, kClasses);
    ++per_class[l];
  }
  for (std::uint32_t c = 0; c < kClasses; ++c) EXPECT_EQ(per_class[c], kTestImages / kClasses) << c;
}

TEST(IdxReader, ReadsBigEndianDimensionsAndRowMajorPixels) {
  TempDir dir;
  const std::uint32_t count = 3, rows = 2, cols = 5;
  const auto pixels = sequence(std::size_t{count} * rows * cols);
  write_gz(dir.file("img.gz"), idx_images(count, rows, cols, pixels));
  const Images img = read_idx_images(dir.file("img.gz"));
  EXPECT_EQ(img.count, count);
  EXPECT_EQ(img.rows, rows);
  EXPECT_EQ(img.cols, cols);
  EXPECT_EQ(img.pixels, pixels);

  const auto labels = std::vector<std::uint8_t>{4, 0, 9};
  write_gz(dir.file("lab.gz"), idx_labels(labels));
  EXPECT_EQ(read_idx_labels(dir.file("lab.gz")), labels);
}

TEST(IdxReader, MissingFileIsNamed) {
  TempDir dir;
  const std::string path = dir.file("absent.gz");
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("no such file")));
}

TEST(IdxReader, UncompressedFileIsRefusedAsNotGzip) {
  TempDir dir;
  const std::string path = dir.file("plain.idx");
  write_raw(path, idx_images(1, 1, 1, {7}));
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("not a gzip file")));
}

TEST(IdxReader, EmptyFileIsRefusedAsNotGzip) {
  TempDir dir;
  const std::string path = dir.file("empty.gz");
  write_raw(path, {});
  EXPECT_THAT(error_of([&] { read_idx_labels(path); }),
              AllOf(HasSubstr(path), HasSubstr("not a gzip file")));
}

TEST(IdxReader, TruncatedGzipStreamIsReported) {
  TempDir dir;
  const std::string whole = dir.file("whole.gz"), cut = dir.file("cut.gz");
  write_gz(whole, idx_images(20, 8, 8, sequence(20 * 8 * 8)));
  auto bytes = read_raw(whole);
  bytes.resize(bytes.size() / 2);
  write_raw(cut, bytes);
  EXPECT_THAT(error_of([&] { read_idx_images(cut); }),
              AllOf(HasSubstr(cut), HasSubstr("truncated")));
}

TEST(IdxReader, MissingGzipTrailerIsReported) {
  TempDir dir;
  const std::string whole = dir.file("whole.gz"), cut = dir.file("cut.gz");
  write_gz(whole, idx_labels({1, 2, 3}));
  auto bytes = read_raw(whole);
  bytes.resize(bytes.size() - 4);  // RFC 1952: the last 4 bytes are ISIZE
  write_raw(cut, bytes);
  EXPECT_THAT(error_of([&] { read_idx_labels(cut); }),
              AllOf(HasSubstr(cut), HasSubstr("truncated")));
}

TEST(IdxReader, CorruptDeflateDataIsReported) {
  TempDir dir;
  const std::string whole = dir.file("whole.gz"), bad = dir.file("bad.gz");
  write_gz(whole, idx_images(20, 8, 8, sequence(20 * 8 * 8)));
  auto bytes = read_raw(whole);
  // RFC 1952: a 10-byte header, then deflate data; the CRC-32 in the trailer catches any change
  // the inflater itself does not.
  for (std::size_t i = 12; i < bytes.size() - 8; i += 3) bytes[i] ^= 0x5a;
  write_raw(bad, bytes);
  EXPECT_THAT(error_of([&] { read_idx_images(bad); }),
              AllOf(HasSubstr(bad), HasSubstr("corrupt gzip stream")));
}

TEST(IdxReader, LabelFileReadAsImagesIsABadMagic) {
  TempDir dir;
  const std::string path = dir.file("labels.gz");
  write_gz(path, idx_labels({1, 2}));
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("bad magic 0x00000801"), HasSubstr("0x00000803")));
  const std::string images = dir.file("images.gz");
  write_gz(images, idx_images(1, 1, 1, {0}));
  EXPECT_THAT(error_of([&] { read_idx_labels(images); }),
              AllOf(HasSubstr(images), HasSubstr("bad magic 0x00000803"), HasSubstr("0x00000801")));
}

TEST(IdxReader, FewerPixelsThanTheHeaderAnnouncesIsTruncated) {
  TempDir dir;
  const std::string path = dir.file("short.gz");
  write_gz(path, idx_images(4, 3, 3, sequence(3 * 3 * 3)));
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("36")));
}

TEST(IdxReader, HugeCountInAHostileHeaderFailsWithoutAllocatingIt) {
  TempDir dir;
  const std::string path = dir.file("hostile.gz");
  write_gz(path, idx_images(0xffffffffu, 0xffffu, 0xffffu, sequence(100)));
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("truncated")));
}

TEST(IdxReader, MoreDataThanTheDimensionsIsReported) {
  TempDir dir;
  const std::string path = dir.file("long.gz");
  write_gz(path, idx_images(1, 2, 2, sequence(6)));
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("2 bytes after")));
}

TEST(IdxReader, ZeroSizedImagesAreRefused) {
  TempDir dir;
  const std::string path = dir.file("zero.gz");
  write_gz(path, idx_images(1, 0, 28, {}));
  EXPECT_THAT(error_of([&] { read_idx_images(path); }),
              AllOf(HasSubstr(path), HasSubstr("rows and columns must be >= 1")));
}

TEST(FashionMnistLoader, ImageAndLabelCountsMustAgree) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_images(3, 2, 2, sequence(12)));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels({1, 2}));
  EXPECT_THAT(
      error_of([&] { load_fashion_mnist(dir.file(""), "train"); }),
      AllOf(HasSubstr("train-labels-idx1-ubyte.gz"), HasSubstr("train-images-idx3-ubyte.gz"),
            HasSubstr("2 labels"), HasSubstr("3 images")));
}

TEST(FashionMnistLoader, LabelsBeyondTheTenClassesAreRefused) {
  TempDir dir;
  write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_images(2, 2, 2, sequence(8)));
  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_labels({3, kClasses}));
  EXPECT_THAT(error_of([&] { load_fashion_mnist(dir.file(""), "t10k"); }),
              AllOf(HasSubstr("t10k-labels-idx1-ubyte.gz"), HasSubstr("label 1 = 10")));
}

TEST(FashionMnistLoader, UnknownSplitIsRefused) {
  EXPECT_THAT(error_of([] { load_fashion_mnist(kDefaultFashionMnistDir, "validation"); }),
              AllOf(HasSubstr("validation"), HasSubstr("\"train\" or \"t10k\"")));
}

}  // namespace
}  // namespace tpu::data
