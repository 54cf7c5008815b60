// libtorch/tensor_memory.hpp: the first module_model pins glibc's malloc thresholds, so that a step's activations
// come from the heap and stay with the process, and the environment can leave glibc's defaults.

#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/libtorch/module_model.hpp>
#include <mwstrat/libtorch/tensor_memory.hpp>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <malloc.h>

#include <cstdint>
#include <memory>
#include <string>

namespace tensor_memory_release_test {

using namespace mwstrat;

struct tiny : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  tiny() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
};

TEST(tensor_memory, a_module_models_process_takes_a_steps_activations_from_the_heap) {
  const libtorch::module_model model(std::make_shared<tiny>(), [](tiny&, const data::image_batch&) {
    return libtorch::classified{};
  });
  const auto& setting = mwstrat::detail::keep_tensor_memory_once();
  ASSERT_TRUE(setting.pinned) << setting.why;

  // A step's activation of 24 MiB, made and written. Pinned, it comes from the heap, where a freed block stays for
  // the next step; with glibc's defaults (MWSTRAT_LIBTORCH_MALLOC=default, the first such block of a process) it is
  // mapped apart and unmapped again when freed (checked by hand, AMD EPYC, 2026-12-07). Page faults are not
  // counted: what a fresh block costs depends on transparent huge pages and on glibc's memalign placement (which
  // grows the heap over the first steps of many blocks), so it differs between machines and thread counts; an
  // earlier version of this test that counted them failed on CI's machine. Nor is trimming checked: freeing one
  // block did not trim the heap here even with glibc's own trim threshold, so such a check could not fail.
  constexpr std::int64_t floats = std::int64_t{6} << 20;
  const std::size_t mapped_apart = ::mallinfo2().hblkhd;
  torch::Tensor activation = torch::empty({floats}, torch::kFloat32);
  activation.fill_(1.0f);  // every page written, as a kernel's output is
  EXPECT_EQ(::mallinfo2().hblkhd, mapped_apart) << "the activation was mapped apart from the heap";
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
