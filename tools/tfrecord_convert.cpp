// tfrecord_convert: writes MNIST, Fashion-MNIST or CIFAR-10 as N shards of tf.train.Example records, the way TFDS
// stores them, so that tests and benchmarks (and users trying the TFRecord path) make their own shards.
//
//   tfrecord_convert <mnist|fashion_mnist|cifar10> <input dir> <output dir>
//                    [--split train|test] [--shards N] [--image png|raw] [--compression none|gzip|zlib]
//
// Each example has two features, as TFDS writes these data sets:
//   image  bytes_list, one value: the image as a PNG (8-bit grey for MNIST, RGB for CIFAR-10; lossless), or with
//          --image raw its rows × cols × channels bytes, HWC;
//   label  int64_list, one value: the class, 0..9.
// Shards are <output dir>/<set>-<split>.tfrecord-<k>-of-<N> (TFDS's names, k from 00000), each a contiguous run of
// examples in the data set's order (shard k holds examples [k·C/N, (k+1)·C/N)), so reading the shards in order
// gives the set's order. Each shard is written to <name>.part and renamed when complete. Errors name the file;
// the exit status is 0 on success, 1 on a data or I/O error, 2 on bad arguments.

#include <mwstrat/data/cifar10.hpp>
#include <mwstrat/data/example.hpp>
#include <mwstrat/data/images/png.hpp>
#include <mwstrat/data/mnist.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace tfrecord_convert {

namespace data = mwstrat::data;

struct arguments {
  std::string set;
  std::filesystem::path input;
  std::filesystem::path output;
  std::string split = "train";
  std::size_t shards = 1;
  bool png = true;
  data::tfrecord_compression compression = data::tfrecord_compression::none;
};

constexpr const char* usage =
    "usage: tfrecord_convert <mnist|fashion_mnist|cifar10> <input dir> <output dir>\n"
    "                        [--split train|test] [--shards N] [--image png|raw] [--compression none|gzip|zlib]\n";

struct usage_error {
  std::string what;
};

arguments parse(int argc, char** argv) {
  arguments a;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error{std::string(arg) + " needs a value"};
      return argv[++i];
    };
    if (arg == "--split") {
      a.split = value();
      if (a.split != "train" && a.split != "test") throw usage_error{"--split is train or test, not " + a.split};
    } else if (arg == "--shards") {
      const std::string v = value();
      std::size_t used = 0;
      unsigned long n = 0;
      try {
        n = std::stoul(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || n == 0 || n > 100000) throw usage_error{"--shards is a number from 1 to 100000, not " + v};
      a.shards = n;
    } else if (arg == "--image") {
      const std::string v = value();
      if (v != "png" && v != "raw") throw usage_error{"--image is png or raw, not " + v};
      a.png = v == "png";
    } else if (arg == "--compression") {
      const std::string v = value();
      if (v == "none") a.compression = data::tfrecord_compression::none;
      else if (v == "gzip") a.compression = data::tfrecord_compression::gzip;
      else if (v == "zlib") a.compression = data::tfrecord_compression::zlib;
      else throw usage_error{"--compression is none, gzip or zlib, not " + v};
    } else if (arg.starts_with("--")) {
      throw usage_error{"unknown option " + std::string(arg)};
    } else {
      positional.emplace_back(arg);
    }
  }
  if (positional.size() != 3) throw usage_error{"expected 3 arguments, got " + std::to_string(positional.size())};
  a.set = positional[0];
  if (a.set != "mnist" && a.set != "fashion_mnist" && a.set != "cifar10") {
    throw usage_error{"the data set is mnist, fashion_mnist or cifar10, not " + a.set};
  }
  a.input = positional[1];
  a.output = positional[2];
  return a;
}

data::labeled_images load(const arguments& a) {
  if (a.set == "cifar10") {
    return data::load_cifar10(a.input, a.split == "train" ? data::cifar10_split::train : data::cifar10_split::test);
  }
  const auto split = a.split == "train" ? data::mnist_split::train : data::mnist_split::test;
  return a.set == "mnist" ? data::load_mnist(a.input, split) : data::load_fashion_mnist(split, a.input);
}

std::string shard_name(const arguments& a, std::size_t k) {
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu", k, a.shards);
  return a.set + "-" + a.split + ".tfrecord" + suffix;
}

int run(const arguments& a) {
  const data::labeled_images set = load(a);
  const std::size_t count = set.count();
  if (a.shards > count) {
    std::cerr << "tfrecord_convert: " << a.shards << " shards for " << count
              << " examples would leave a shard empty\n";
    return 2;
  }
  std::filesystem::create_directories(a.output);
  data::example ex;
  ex.features["image"] = data::bytes_list{{std::string()}};
  ex.features["label"] = data::int64_list{{0}};
  auto& image = std::get<data::bytes_list>(ex.features["image"]).value[0];
  auto& label = std::get<data::int64_list>(ex.features["label"]).value[0];
  for (std::size_t k = 0; k < a.shards; ++k) {
    data::tfrecord_writer out(a.output / shard_name(a, k), {.compression = a.compression});
    for (std::size_t i = k * count / a.shards; i < (k + 1) * count / a.shards; ++i) {
      const auto pixels = set.image(i);
      if (a.png) {
        const auto png = data::encode_png(pixels, set.rows(), set.cols(), set.channels());
        image.assign(reinterpret_cast<const char*>(png.data()), png.size());
      } else {
        image.assign(reinterpret_cast<const char*>(pixels.data()), pixels.size());
      }
      label = set.label(i);
      const auto record = data::encode_example(ex);
      out.write(std::span<const std::byte>(record));
    }
    out.close();
  }
  std::cout << "tfrecord_convert: wrote " << count << " examples of " << a.set << " " << a.split << " to "
            << a.shards << " shard" << (a.shards == 1 ? "" : "s") << " in " << a.output.string() << " (image "
            << (a.png ? "png" : "raw") << ", compression " << data::to_string(a.compression) << ")\n";
  return 0;
}

}  // namespace tfrecord_convert

int main(int argc, char** argv) {
  try {
    return tfrecord_convert::run(tfrecord_convert::parse(argc, argv));
  } catch (const tfrecord_convert::usage_error& e) {
    std::cerr << "tfrecord_convert: " << e.what << "\n" << tfrecord_convert::usage;
    return 2;
  } catch (const mwstrat::error& e) {
    std::cerr << "tfrecord_convert: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tfrecord_convert: " << e.what() << "\n";
    return 1;
  }
}
