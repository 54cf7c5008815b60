#pragma once
// --step-times PREFIX (benchmarks): each worker appends "step N workers W at T" for every step it trained to
// PREFIX.wI (I: its TF_CONFIG index; T: seconds since the Unix epoch), buffered: a throughput timeline over faults
// (benchmarks/train/elastic_goodput.py), which a killed worker's lost lines do not spoil.
#include <mwstrat/error.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace examples {

// One line for the step just trained; `ctx` is fit's context (ctx.global_step(), ctx.strategy).
template <class Ctx>
void write_step_time(std::FILE* out, Ctx& ctx) {
  const std::uint64_t done = ctx.global_step() - 1;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::fprintf(out, "step %llu workers %d at %.6f\n", static_cast<unsigned long long>(done),
               ctx.strategy.num_replicas_in_sync(), std::chrono::duration<double>(now).count());
}

using step_file = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

// PREFIX.w<task>, opened for appending; `flag` names the option in the error when it cannot be opened.
inline step_file open_step_file(const std::string& prefix, int task, const std::string& program,
                                const std::string& flag) {
  const std::string path = prefix + ".w" + std::to_string(task);
  step_file file(std::fopen(path.c_str(), "a"), &std::fclose);
  if (!file) throw mwstrat::io_error({program}, flag + ": cannot open " + path);
  return file;
}

// The callback: a line per step trained, where a file is open.
struct step_times {
  static constexpr bool stops_one_worker = false;
  std::FILE* out = nullptr;
  template <class Ctx, class Logs>
  void on_train_batch_end(Ctx& ctx, std::size_t, const Logs&) {
    if (out != nullptr) write_step_time(out, ctx);
  }
};

}  // namespace examples
