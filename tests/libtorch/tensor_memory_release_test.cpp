// libtorch/tensor_memory.hpp: the first module_model pins glibc's malloc thresholds, so that a step's freed tensors
// stay with the process (no page faults for them next step), and the environment can leave glibc's defaults.

#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/libtorch/module_model.hpp>
#include <mwstrat/libtorch/tensor_memory.hpp>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <malloc.h>
#include <sys/resource.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tensor_memory_release_test {

using namespace mwstrat;

struct tiny : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  tiny() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
};

long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

TEST(tensor_memory, a_module_model_keeps_a_steps_freed_tensors_for_the_next_step) {
  const libtorch::module_model model(std::make_shared<tiny>(), [](tiny&, const data::image_batch&) {
    return libtorch::classified{};
  });
  const auto& setting = mwstrat::detail::keep_tensor_memory_once();
  ASSERT_TRUE(setting.pinned) << setting.why;

  // A step's two activations of 8 MiB (a layer's output and its gradient), made and freed as a step does. Past
  // the first steps (the heap grows to the step's size), nothing is newly mapped and nothing is faulted in again.
  // With glibc's defaults the freed blocks can leave more free heap top than the trim threshold that the first
  // large free sets (twice the block), and the heap is trimmed: here 2048 faults over the ten steps measured
  // (MWSTRAT_LIBTORCH_MALLOC=default, AMD EPYC, 2026-12-07; 0 with the thresholds pinned), and about 38 600 in a C
  // program that allocates and frees the same two blocks with posix_memalign.
  constexpr std::int64_t floats = std::int64_t{2} << 20;
  long measured_faults = 0;
  std::size_t mapped_before = 0;
  for (int step = 0; step < 20; ++step) {
    if (step == 10) mapped_before = ::mallinfo2().hblkhd;
    const long before = minor_faults();
    {
      torch::Tensor output = torch::empty({floats}, torch::kFloat32);
      torch::Tensor gradient = torch::empty({floats}, torch::kFloat32);
      output.fill_(1.0f);  // every page written, as a kernel's output is
      gradient.fill_(2.0f);
      if (step >= 10) {
        EXPECT_EQ(::mallinfo2().hblkhd, mapped_before) << "step " << step << ": a block was mapped";
      }
    }
    if (step >= 10) measured_faults += minor_faults() - before;
  }
  EXPECT_LT(measured_faults, 512) << "freed blocks went back to the kernel between steps (an 8 MiB block is 2048 pages)";
}

TEST(tensor_memory, the_environment_can_leave_glibcs_own_thresholds) {
  const auto left = [](environment env) { return libtorch::keep_tensor_memory(env); };
  auto s = left(environment{{"MWSTRAT_LIBTORCH_MALLOC", "default"}});
  EXPECT_FALSE(s.pinned);
  EXPECT_EQ(s.why, "MWSTRAT_LIBTORCH_MALLOC=default");
  s = left(environment{{"MALLOC_TRIM_THRESHOLD_", "1048576"}});
  EXPECT_FALSE(s.pinned);
  EXPECT_EQ(s.why, "MALLOC_TRIM_THRESHOLD_ is set");
  s = left(environment{{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536"}});
  EXPECT_FALSE(s.pinned);
  EXPECT_EQ(s.why, "GLIBC_TUNABLES sets a malloc threshold");
  s = left(environment{{"GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F"}, {"MWSTRAT_LIBTORCH_MALLOC", "keep"}});
  EXPECT_TRUE(s.pinned) << "another tunable, and an explicit keep: " << s.why;
  try {
    (void)left(environment{{"MWSTRAT_LIBTORCH_MALLOC", "jemalloc"}});
    ADD_FAILURE() << "an unknown value was taken";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("MWSTRAT_LIBTORCH_MALLOC is 'jemalloc', expected 'keep'"), std::string::npos)
        << e.what();
  }
}

}  // namespace tensor_memory_release_test
