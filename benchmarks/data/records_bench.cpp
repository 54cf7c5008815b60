// One full pass over an image set in TFRecord shards, read + decoded + augmented as a CIFAR-10 trainer takes it:
// data::record_batches, one worker, data sharding, global batch 128, PNG/JPEG decode (png_jpeg_decoder) and the
// tutorial's augmentation (pad 4, random crop, flip, per-image standardization; examples/cifar10_resnet's), each
// configuration's decode_threads in turn (benchmarks/run.py's `records` family runs one per process, so each
// peak RSS is its own).
//
//   mwstrat_bench_records --decode-threads 1[,2...] [--batch 128] [--rows 32 --cols 32 --channels 3] FILE|GLOB...
//
// Prints one JSON line per configuration: records read, wall and CPU seconds (getrusage of the whole process,
// every thread) from the construction of record_batches (opening and indexing the files) to the end of the pass,
// the same for the pass alone, records per second and per CPU second, VmHWM (peak RSS) after the pass and, as
// start_rss_mib, VmHWM before the first configuration (the program alone).

#include <mwstrat/data/image_augmentation.hpp>
#include <mwstrat/data/images/image_decode.hpp>
#include <mwstrat/data/record_batches.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace data = mwstrat::data;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

long status_kib(std::string_view field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
  }
  return -1;
}

std::vector<std::size_t> parse_list(const std::string& s) {
  std::vector<std::size_t> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = s.find(',', at);
    const std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    out.push_back(std::stoul(item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::size_t> threads{1};
    std::size_t batch = 128;
    data::image_shape shape{32, 32, 3};
    std::vector<std::string> patterns;
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      const auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(std::string(arg) + " needs a value");
        return argv[++i];
      };
      if (arg == "--decode-threads") threads = parse_list(value());
      else if (arg == "--batch") batch = std::stoul(value());
      else if (arg == "--rows") shape.rows = std::stoul(value());
      else if (arg == "--cols") shape.cols = std::stoul(value());
      else if (arg == "--channels") shape.channels = std::stoul(value());
      else if (arg.starts_with("--")) throw std::runtime_error("unknown option " + std::string(arg));
      else patterns.emplace_back(arg);
    }
    if (patterns.empty()) throw std::runtime_error("no TFRecord file given");

    // The process before any pipeline: what the program itself costs (the C++ runtime, libpng, libjpeg).
    const double start_peak_mib = static_cast<double>(status_kib("VmHWM:")) / 1024.0;
    for (const std::size_t t : threads) {
      const double wall0 = wall_seconds();
      const double cpu0 = cpu_seconds();
      data::record_image_format format;
      format.shape = shape;
      format.decode = data::png_jpeg_decoder();
      data::augmentation_options aug;  // pad 4 + random crop + flip, per-image standardization
      aug.seed = 1;
      data::distribution_options o;
      o.global_batch = batch;
      o.seed = 1;
      o.policy = data::data_shard{};
      o.transform = data::image_augmentation(aug).transform();
      data::record_batch_options reading;
      reading.decode_threads = t;
      data::record_batches batches(std::span<const std::string>(patterns), format, o, reading);
      const double wall1 = wall_seconds();
      const double cpu1 = cpu_seconds();

      std::vector<float> images(batches.per_worker_batch() * batches.example_size());
      std::vector<std::int64_t> labels(batches.per_worker_batch());
      std::size_t records = 0;
      double checksum = 0;
      for (std::size_t s = 0; s < batches.steps_per_epoch(); ++s) {
        records += batches.fill({0, s, o.seed}, images, labels);
        checksum += static_cast<double>(images[0]) + static_cast<double>(labels[0]);
      }
      const double wall2 = wall_seconds();
      const double cpu2 = cpu_seconds();
      const double wall = wall2 - wall0;
      const double cpu = cpu2 - cpu0;
      std::printf("{\"impl\": \"mwstrat\", \"threads\": %zu, \"decode_threads\": %zu, \"batch\": %zu, "
                  "\"files\": %zu, \"records\": %zu, \"steps\": %zu, \"wall_s\": %.4f, \"cpu_s\": %.4f, "
                  "\"open_wall_s\": %.4f, \"open_cpu_s\": %.4f, \"pass_wall_s\": %.4f, \"pass_cpu_s\": %.4f, "
                  "\"records_per_s\": %.1f, \"records_per_cpu_s\": %.1f, \"peak_rss_mib\": %.1f, "
                  "\"start_rss_mib\": %.1f, \"checksum\": %.4f}\n",
                  t, batches.decode_threads(), batch, batches.files().size(), records, batches.steps_per_epoch(),
                  wall, cpu, wall1 - wall0, cpu1 - cpu0, wall2 - wall1, cpu2 - cpu1,
                  static_cast<double>(records) / wall, static_cast<double>(records) / cpu,
                  static_cast<double>(status_kib("VmHWM:")) / 1024.0, start_peak_mib, checksum);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mwstrat_bench_records: %s\n", e.what());
    return 1;
  }
}
