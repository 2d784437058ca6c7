// Bad-input rows for IDX data (sw/data/idx.cpp), fed to `tpusim run --data-dir` as the
// Fashion-MNIST test set.
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

const EntryPoint kIdx{"IDX data", "report.json", [](const Paths& p) {
                        return run_tpusim({"run", "--chip", source_path("configs/chips/v1.json"),
                                           "--data-dir", (p.dir / "data").string(), "--images", "1",
                                           "--no-check", "--json", p.out.string()});
                      }};

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr std::uint32_t kSide = 28;                 // Fashion-MNIST's 28 x 28 pixels

std::string images_idx(std::uint32_t count, std::uint32_t rows = kSide,
                       std::uint32_t cols = kSide) {
  return be32({kImagesMagic, count, rows, cols}) +
         std::string(std::size_t{count} * rows * cols, '\x40');
}
std::string labels_idx(std::uint32_t count, char label = 3) {
  return be32({kLabelsMagic, count}) + std::string(count, label);
}

const char* const kImages = "t10k-images-idx3-ubyte.gz";
const char* const kLabels = "t10k-labels-idx1-ubyte.gz";

// A data directory of two files as they would be on disk (already compressed, or not); the
// message must name `named` (the images or the labels file, or the directory).
enum class Named { Images, Labels, Directory };
Case data(std::string name, std::string images_file, std::string labels_file, Named named,
          std::string expect) {
  return Case{&kIdx,
              std::move(name),
              [images_file, labels_file, named](const fs::path& d) {
                const fs::path dir = d / "data";
                fs::create_directory(dir);
                write_bytes(dir / kImages, images_file);
                write_bytes(dir / kLabels, labels_file);
                return named == Named::Images   ? dir / kImages
                       : named == Named::Labels ? dir / kLabels
                                                : dir;
              },
              {std::move(expect)}};
}
Case images(std::string name, std::string file_bytes, std::string expect) {
  return data(std::move(name), std::move(file_bytes), gzip(labels_idx(2)), Named::Images,
              std::move(expect));
}
Case labels(std::string name, std::string file_bytes, std::string expect) {
  return data(std::move(name), gzip(images_idx(2)), std::move(file_bytes), Named::Labels,
              std::move(expect));
}

std::vector<Case> cases() {
  const std::string good = gzip(images_idx(2));
  std::string bad_crc = good;
  bad_crc[bad_crc.size() - 6] = static_cast<char>(bad_crc[bad_crc.size() - 6] ^ 0x5a);
  std::string bad_deflate = good;
  for (std::size_t i = 12; i < 40; ++i) bad_deflate[i] = static_cast<char>(0xff);
  return {
      Case{&kIdx,
           "no_such_directory",
           [](const fs::path& d) { return d / "data" / kImages; },
           {"no such file"}},
      Case{&kIdx,
           "images_missing",
           [](const fs::path& d) {
             fs::create_directory(d / "data");
             write_bytes(d / "data" / kLabels, gzip(labels_idx(2)));
             return d / "data" / kImages;
           },
           {"no such file"}},
      Case{&kIdx,
           "images_a_directory",
           [](const fs::path& d) {
             fs::create_directories(d / "data" / kImages);
             write_bytes(d / "data" / kLabels, gzip(labels_idx(2)));
             return d / "data" / kImages;
           },
           {"is a directory"}},
      images("images_not_compressed", images_idx(2), "not a gzip file"),
      images("images_empty_file", "", "not a gzip file"),
      images("images_empty_gzip", gzip(""), "truncated"),
      images("images_gzip_of_garbage", gzip(garbage(4096, 5)), "bad magic"),
      images("images_labels_magic", gzip(labels_idx(2)), "bad magic"),
      images("images_truncated_header", gzip(be32({kImagesMagic, 2, 28})), "truncated"),
      images("images_zero_rows", gzip(images_idx(2, 0, 28)), "must be >= 1"),
      images("images_not_28_by_28", gzip(images_idx(2, 27, 28)), "28 x 28"),
      images("images_dimensions_overflowing_64_bits",
             gzip(be32({kImagesMagic, 0xffffffffu, 0xffffffffu, 0xffffffffu}) +
                  std::string(4096, '\0')),
             "4294967295"),
      images("images_count_far_beyond_the_data",
             gzip(be32({kImagesMagic, 0xffffffffu, 28, 28}) + std::string(3 * 784, '\0')),
             "truncated"),
      images("images_trailing_bytes", gzip(images_idx(2) + "xyz"), "3 bytes after"),
      images("images_crc_mismatch", bad_crc, "gzip"),
      images("images_corrupt_deflate_stream", bad_deflate, "gzip"),
      images("images_gzip_cut_short", good.substr(0, good.size() / 2), "gzip"),
      // 64 MiB of zeros behind a one-image header: compresses to 64 KiB; must be refused by
      // reading, not by holding, the whole expansion.
      images("images_decompression_bomb", gzip(images_idx(1) + std::string(64 << 20, '\0')),
             "bytes after"),
      labels("labels_not_compressed", labels_idx(2), "not a gzip file"),
      labels("labels_images_magic", gzip(images_idx(2)), "bad magic"),
      labels("labels_count_mismatch", gzip(labels_idx(3)), "counts must match"),
      labels("label_past_the_ten_classes", gzip(labels_idx(2, 10)), "labels are 0..9"),
      labels("label_255", gzip(labels_idx(2, static_cast<char>(0xff))), "labels are 0..9"),
      labels("labels_truncated", gzip(be32({kLabelsMagic, 2}) + "\x01"), "truncated"),
      data("no_images_for_the_run", gzip(images_idx(0)), gzip(labels_idx(0)), Named::Directory,
           "--images 1"),
  };
}

INSTANTIATE_TEST_SUITE_P(Idx, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
