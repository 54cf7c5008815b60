#pragma once
/// \file
/// `record_batches`: this worker's part of every global batch of an image set stored as TFRecord files of
/// `tf.train.Example`s — the files' records are streamed, never loaded whole, and walked by exactly the rules of
/// `distributed_batches` (docs/sharding.md), so the same files give the same batches as the same examples in
/// memory, bit for bit, and a `data_cursor` resumes either exactly.
///
/// How (docs/data.md, "Streaming"):
///   - **Which files are opened.** The sharding policy is asked first with the number of files only
///     (`shard_request::counts_known` false). File sharding then opens and indexes only this worker's files; data
///     sharding and OFF open all of them. A worker never opens another worker's file: in file mode the workers'
///     per-file counts, which fix the steps per pass, are exchanged (`record_batch_options::exchange_counts`;
///     `distributed_input` does it with the strategy's collective).
///   - **Order and exact resume.** Each opened file is indexed (`indexed_tfrecord_file`: 12 bytes per record,
///     read from the records' headers); example k of the set is record k of the files taken in order. A pass's
///     order is the seeded permutation of the in-memory path (`detail::shard_walk`), a function of (seed, pass)
///     only: there is no shuffle buffer whose state would have to be saved, and any (pass, step) can be read
///     directly — the cursor alone resumes the stream, with any number of workers under data sharding.
///   - **Memory.** The index, 12 bytes per record of the opened files, plus one batch of records and their
///     decoded pixels: independent of how large the records are or how many bytes the files hold.
///   - **Parallel decode.** A batch's records are read (`pread`), parsed, decoded (PNG/JPEG through
///     `record_image_format::decode`) and transformed on `decode_threads` threads, each example into its own
///     slot of the output: the result does not depend on the thread count. `distributed_input` adds a prefetch
///     of the next step on a thread of its own.
/// A record that lacks the image or label feature, holds another type or size, or fails to decode is a
/// `data_error` naming the file, the record's offset and the feature; `fill` then throws and delivers nothing.

#include <mwstrat/data/concepts.hpp>
#include <mwstrat/data/cursor.hpp>
#include <mwstrat/data/detail/shard_walk.hpp>
#include <mwstrat/data/detail/worker_pool.hpp>
#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/feature_spec.hpp>
#include <mwstrat/data/file_list.hpp>
#include <mwstrat/data/image_record_format.hpp>
#include <mwstrat/data/indexed_tfrecord_file.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// How `record_batches` reads.
struct record_batch_options {
  /// Threads that read and decode one batch, the calling thread included (0: one per hardware thread).
  std::size_t decode_threads = 0;
  indexed_tfrecord_options files;  ///< how each file is opened (compression, record size limit, inflate folder)
  /// File sharding with N > 1: given this worker's per-file record counts (0 for files it did not open), returns
  /// every file's count, the element-wise maximum over the workers (`distributed_input` does it with an
  /// all_gather). Called by every worker of such a job, once, at construction. Without it, file sharding of
  /// several workers is refused: the steps per pass depend on every worker's files.
  std::function<std::vector<std::size_t>(std::span<const std::size_t> mine)> exchange_counts;
};

/// This worker's batches of an image set in TFRecord files (see the file comment).
class record_batches {
 public:
  /// Opens the files this worker reads under `options.policy` and indexes them. Throws config_error for
  /// impossible options, data_error for unreadable or malformed files (naming them) and io_error when a file
  /// cannot be opened.
  record_batches(std::vector<std::filesystem::path> files, record_image_format format,
                 distribution_options options, record_batch_options reading = {})
      : state_(std::make_unique<state>(std::move(files), std::move(format), std::move(options), std::move(reading))) {}

  /// Files given as paths or glob patterns (`list_files`).
  record_batches(std::span<const std::string> patterns, record_image_format format, distribution_options options,
                 record_batch_options reading = {})
      : record_batches(list_files(patterns), std::move(format), std::move(options), std::move(reading)) {}

  /// The in-order pass an evaluation needs (no shuffle, the partial last batch kept; see distributed_batches).
  [[nodiscard]] static record_batches for_evaluation(std::vector<std::filesystem::path> files,
                                                     record_image_format format, std::size_t global_batch,
                                                     int num_workers, int worker_index,
                                                     any_shard_policy policy = data_shard{},
                                                     example_transform transform = {},
                                                     record_batch_options reading = {}) {
    return {std::move(files), std::move(format),
            evaluation_options(global_batch, num_workers, worker_index, std::move(policy), std::move(transform)),
            std::move(reading)};
  }

  /// Global steps per pass; the same on every worker.
  [[nodiscard]] std::size_t steps_per_epoch() const noexcept { return state_->walk.steps_per_pass(); }
  /// B = G / N.
  [[nodiscard]] std::size_t per_worker_batch() const noexcept { return state_->walk.per_worker_batch(); }
  /// G.
  [[nodiscard]] std::size_t global_batch() const noexcept { return state_->options.global_batch; }
  /// Floats per example.
  [[nodiscard]] std::size_t example_size() const noexcept {
    const auto& s = state_->format.shape;
    return s.rows * s.cols * s.channels;
  }
  /// What the sharding policy resolved to.
  [[nodiscard]] shard_mode mode() const noexcept { return state_->walk.mode(); }
  /// The options it was built with.
  [[nodiscard]] const distribution_options& options() const noexcept { return state_->options; }
  /// All files of the set, in order.
  [[nodiscard]] std::span<const std::filesystem::path> files() const noexcept { return state_->paths; }
  /// The files this worker opened (indices into files()).
  [[nodiscard]] std::vector<std::size_t> opened_files() const {
    std::vector<std::size_t> out;
    for (std::size_t f = 0; f < state_->open.size(); ++f) {
      if (state_->open[f]) out.push_back(f);
    }
    return out;
  }
  /// Records of each file (those of files this worker did not open come from the exchange).
  [[nodiscard]] std::span<const std::size_t> file_counts() const noexcept { return state_->counts; }
  /// Records of all files.
  [[nodiscard]] std::size_t count() const noexcept { return state_->total; }
  /// Threads that decode a batch.
  [[nodiscard]] std::size_t decode_threads() const noexcept { return state_->pool.threads(); }

  /// `at` with a step beyond the end of a pass carried into the following passes.
  [[nodiscard]] data_cursor normalised(const data_cursor& at) const noexcept { return state_->walk.normalised(at); }
  /// How many examples all workers together read at `at`'s step.
  [[nodiscard]] std::size_t global_count(const data_cursor& at) const { return state_->walk.global_count(at); }

  /// Writes the global indices of this worker's examples at `at` into `out` (at least B long); returns how many.
  std::size_t indices(const data_cursor& at, std::span<std::size_t> out) {
    check_room(out.size(), per_worker_batch(), "index");
    const auto examples = state_->walk.slice(at);
    std::copy(examples.begin(), examples.end(), out.begin());
    return examples.size();
  }

  /// Fills this worker's part of the step at `at` exactly as `distributed_batches::fill` does for the same
  /// examples in memory; returns the count. Throws (delivering nothing) on a bad record.
  std::size_t fill(const data_cursor& at, std::span<float> images, std::span<std::int64_t> labels) {
    const std::size_t per = example_size();
    check_room(images.size(), per_worker_batch() * per, "image");
    check_room(labels.size(), per_worker_batch(), "label");
    state& s = *state_;
    const auto examples = s.walk.slice(at);
    const std::uint64_t epoch = s.walk.normalised(at).epoch;
    if (s.slots.size() < examples.size()) s.slots.resize(examples.size());
    s.pool.for_each(examples.size(), [&](std::size_t i) {
      s.read_example(examples[i], epoch, s.slots[i], images.subspan(i * per, per), labels[i]);
    });
    return examples.size();
  }

 private:
  // One example's scratch, reused from batch to batch (one per position in the batch, so threads never share).
  struct slot {
    std::vector<std::byte> record;
    parsed_example parsed;
    std::vector<std::uint8_t> pixels;
  };

  struct state {
    state(std::vector<std::filesystem::path> files, record_image_format f, distribution_options o,
          record_batch_options r)
        : paths(std::move(files)),
          format(std::move(f)),
          options(std::move(o)),
          reading(std::move(r)),
          parser({{format.image_feature, feature_type::bytes, {}, false},
                  {format.label_feature, feature_type::int64, {}, false}}),
          walk(open_and_plan()),
          pool(reading.decode_threads == 0 ? std::max(1U, std::thread::hardware_concurrency())
                                           : reading.decode_threads) {}

    // Resolves the policy, opens this worker's files, learns every file's count and builds the walk.
    detail::walk_shape open_and_plan() {
      const int n = options.num_workers;
      const int w = options.worker_index;
      (void)detail::checked_per_worker_batch(options.global_batch, n, w);
      const auto& sh = format.shape;
      if (sh.rows == 0 || sh.cols == 0 || sh.channels == 0) {
        throw config_error({"data", w}, "record_batches: record_image_format::shape " + std::to_string(sh.rows) +
                                            " x " + std::to_string(sh.cols) + " x " + std::to_string(sh.channels) +
                                            " has a zero extent (every image's shape is required)");
      }
      if (paths.empty()) throw data_error({"data", w}, "", "record_batches: no input file");
      const std::vector<std::size_t> unknown(paths.size(), 0);
      shard_request first{0, unknown, n, w, options.global_batch};
      first.counts_known = false;
      const shard_plan mine = options.policy.resolve(first);

      open.resize(paths.size());
      counts.assign(paths.size(), 0);
      if (mine.mode == shard_mode::file) {
        for (const std::size_t f : mine.files) {
          if (f >= paths.size()) {
            throw config_error({"data", w}, "sharding policy '" + std::string(options.policy.name()) +
                                                "' chose file " + std::to_string(f) + " of " +
                                                std::to_string(paths.size()));
          }
          open_file(f);
        }
        if (n > 1) {  // every worker of a file-sharded job exchanges, so none waits in the collective alone
          if (!reading.exchange_counts) {
            throw config_error({"data", w}, "record_batches: file sharding over " + std::to_string(n) +
                                                " workers needs every worker's record counts; build it through "
                                                "distributed_input (which exchanges them) or set "
                                                "record_batch_options::exchange_counts");
          }
          counts = reading.exchange_counts(counts);
          if (counts.size() != paths.size()) {
            throw config_error({"data", w}, "record_batches: exchange_counts returned " +
                                                std::to_string(counts.size()) + " counts for " +
                                                std::to_string(paths.size()) + " files");
          }
        }
      } else {
        for (std::size_t f = 0; f < paths.size(); ++f) open_file(f);
      }
      offsets.assign(paths.size() + 1, 0);
      for (std::size_t f = 0; f < paths.size(); ++f) offsets[f + 1] = offsets[f] + counts[f];
      total = offsets.back();

      detail::walk_shape shape = detail::plan_walk(options.policy, counts, options.global_batch, n, w);
      shard_request again{total, counts, n, w, options.global_batch};
      if (options.policy.resolve(again) != mine) {
        throw config_error({"data", w}, "sharding policy '" + std::string(options.policy.name()) +
                                            "' chose other files for worker " + std::to_string(w) +
                                            " once the record counts were known (it must choose by the number of "
                                            "files alone)");
      }
      shape.shuffle = options.shuffle;
      shape.drop_remainder = options.drop_remainder;
      shape.reshuffle_each_epoch = options.reshuffle_each_epoch;
      return shape;
    }

    void open_file(std::size_t f) {
      open[f].emplace(paths[f], reading.files);
      counts[f] = open[f]->size();
    }

    // Example `example` (a global index) read, checked, decoded and transformed into `out`.
    void read_example(std::size_t example, std::uint64_t epoch, slot& sl, std::span<float> out,
                      std::int64_t& label) const {
      const auto file = static_cast<std::size_t>(
          std::upper_bound(offsets.begin(), offsets.end(), example) - offsets.begin() - 1);
      const std::size_t record = example - offsets[file];
      const indexed_tfrecord_file& in = *open[file];
      const auto bytes = in.read(record, sl.record);
      const record_location at = in.location(record);
      parser.parse(bytes, at, sl.parsed);
      const auto image = sl.parsed.bytes(0);
      const auto& sh = format.shape;
      const std::size_t n = sh.rows * sh.cols * sh.channels;
      sl.pixels.resize(n);
      if (format.decode) {
        format.decode(image, sh, sl.pixels, at, format.image_feature);
      } else {
        if (image.size() != n) {
          throw feature_error(at, format.image_feature,
                              "holds " + std::to_string(image.size()) + " bytes, raw " + std::to_string(sh.rows) +
                                  " x " + std::to_string(sh.cols) + " x " + std::to_string(sh.channels) +
                                  " pixels are " + std::to_string(n) +
                                  " (an encoded image needs record_image_format::decode)");
        }
        std::memcpy(sl.pixels.data(), image.data(), n);
      }
      if (options.transform) {
        options.transform(sl.pixels, sh, example, epoch, out);
      } else {
        for (std::size_t k = 0; k < n; ++k) out[k] = static_cast<float>(sl.pixels[k]) * (1.0F / 255.0F);
      }
      label = sl.parsed.int64s(1)[0];
    }

    std::vector<std::filesystem::path> paths;
    record_image_format format;
    distribution_options options;
    record_batch_options reading;
    example_parser parser;
    std::vector<std::optional<indexed_tfrecord_file>> open;  // the opened files, by index into paths
    std::vector<std::size_t> counts;                          // records per file
    std::vector<std::size_t> offsets;                         // first global index of each file; total at the end
    std::size_t total = 0;
    detail::shard_walk walk;
    detail::worker_pool pool;
    std::vector<slot> slots;
  };

  void check_room(std::size_t have, std::size_t need, const char* what) const {
    if (have < need) {
      throw config_error({"data", state_->options.worker_index},
                         std::string(what) + " buffer of " + std::to_string(have) + " elements is smaller than the " +
                             std::to_string(need) + " one batch of " + std::to_string(per_worker_batch()) +
                             " needs");
    }
  }

  std::unique_ptr<state> state_;  // on the heap: the pool's threads and the files stay put when this moves
};

}  // namespace mwstrat::data
