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

  // An activation of 16 MiB, as a step makes and frees it: taken from the heap (nothing newly mapped while it
  // lives), kept when freed, and faulted in only the first time.
  constexpr std::int64_t floats = std::int64_t{4} << 20;
  const auto mapped_before = ::mallinfo2().hblkhd;
  long first_faults = 0;
  long later_faults = 0;
  for (int step = 0; step < 10; ++step) {
    const long before = minor_faults();
    {
      torch::Tensor activation = torch::empty({floats}, torch::kFloat32);
      activation.fill_(1.0f);  // every page written, as a kernel's output is
      EXPECT_EQ(::mallinfo2().hblkhd, mapped_before) << "step " << step << ": the block was mapped, not taken from the heap";
    }
    (step == 0 ? first_faults : later_faults) += minor_faults() - before;
  }
  EXPECT_GT(first_faults, 0);
  // 16 MiB is 4096 pages; nine steps that faulted theirs in again would count 36864.
  EXPECT_LT(later_faults, 4096) << "the freed block went back to the kernel between steps";
  EXPECT_GE(::mallinfo2().keepcost, static_cast<std::size_t>(floats) * sizeof(float))
      << "the free heap top was trimmed";
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
