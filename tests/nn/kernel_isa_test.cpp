// The choice of kernels at run time (nn/kernels/isa.hpp, nn/detail/kernel_isas.hpp): what each request gives on
// CPUs with and without the wide ISAs, the refusals and their messages, and that the layers a model makes are the
// chosen pass's. (The whole nn suite also runs once per ISA this CPU has: tests/nn/CMakeLists.txt.)
#include <mwstrat/nn.hpp>
#include <mwstrat/nn/kernels/isa.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <typeinfo>

namespace kernel_isa_test {

namespace d = mwstrat::detail;
using mwstrat::nn::kernel_isa;

d::cpu_isa_support cpu(bool avx2, bool avx512) {
  d::cpu_isa_support c;
  c.avx2_fma = avx2 || avx512;
  c.avx512 = avx512;
  c.features = avx512 ? "avx2 fma avx512f avx512bw avx512dq avx512vl" : avx2 ? "avx2 fma" : "none";
  return c;
}

std::string refusal(std::string_view request, const d::cpu_isa_support& c, bool dispatch = true) {
  try {
    (void)d::choose_kernel_isa(request, c, "Test CPU 9000", dispatch);
  } catch (const mwstrat::config_error& e) {
    return e.what();
  }
  return "";
}

TEST(kernel_isa, unset_takes_the_best_the_cpu_runs) {
  if (d::build_isa_level >= 2) GTEST_SKIP() << "built for AVX-512: the program's own flags are the best";
  EXPECT_EQ(d::choose_kernel_isa("", cpu(true, true), "x").isa, kernel_isa::avx512);
  EXPECT_EQ(d::choose_kernel_isa("", cpu(true, true), "x").name, "avx512");
  if (d::build_isa_level < 1) {
    EXPECT_EQ(d::choose_kernel_isa("", cpu(true, false), "x").isa, kernel_isa::avx2);
    EXPECT_EQ(d::choose_kernel_isa("", cpu(true, false), "x").name, "avx2+fma");
    EXPECT_EQ(d::choose_kernel_isa("", cpu(false, false), "x").isa, kernel_isa::build);
    EXPECT_EQ(d::choose_kernel_isa("", cpu(false, false), "x").name, "baseline (sse2)");
  }
}

TEST(kernel_isa, without_dispatch_the_program_s_own_flags_run) {
  const auto r = d::choose_kernel_isa("", cpu(true, true), "x", false);
  EXPECT_EQ(r.isa, kernel_isa::build);
  if (d::build_isa_level < 2) {  // a request wider than the build's own flags cannot run
    EXPECT_NE(refusal("avx512", cpu(true, true), false).find("this build has only its own flags' kernels"),
              std::string::npos);
  }
}

TEST(kernel_isa, a_request_is_taken_where_the_cpu_runs_it) {
  if (d::build_isa_level >= 1) GTEST_SKIP() << "built with -march: narrower requests are refused (tested below)";
  EXPECT_EQ(d::choose_kernel_isa("avx2", cpu(true, true), "x").isa, kernel_isa::avx2);
  EXPECT_EQ(d::choose_kernel_isa("avx512", cpu(true, true), "x").isa, kernel_isa::avx512);
  EXPECT_EQ(d::choose_kernel_isa("baseline", cpu(true, true), "x").isa, kernel_isa::build);
  EXPECT_EQ(d::choose_kernel_isa("baseline", cpu(true, true), "x").name, "baseline (sse2)");
}

TEST(kernel_isa, a_request_the_cpu_cannot_run_names_the_cpu_and_its_features) {
  const std::string m = refusal("avx512", cpu(true, false));
  EXPECT_NE(m.find("[mwstrat.nn] MWSTRAT_KERNEL_ISA=avx512: this CPU cannot run it"), std::string::npos) << m;
  EXPECT_NE(m.find("CPU: Test CPU 9000; features: avx2 fma"), std::string::npos) << m;
  EXPECT_NE(refusal("avx2", cpu(false, false)).find("this CPU cannot run it"), std::string::npos);
}

TEST(kernel_isa, an_unknown_request_says_what_is_accepted) {
  for (const char* bad : {"avx", "AVX2", "sse", " avx2", "avx512f"}) {
    EXPECT_NE(refusal(bad, cpu(true, true)).find("expected avx512, avx2, baseline or native"), std::string::npos)
        << bad;
  }
}

TEST(kernel_isa, native_is_refused_where_it_would_be_slower_than_the_choice) {
  if (d::build_isa_level >= 2) GTEST_SKIP() << "built for AVX-512";
  EXPECT_NE(refusal("native", cpu(true, true)).find("below what this CPU runs"), std::string::npos);
}

TEST(kernel_isa, a_program_built_wider_cannot_run_narrower_kernels) {
  if (d::build_isa_level < 2) GTEST_SKIP() << "needs a -march=native AVX-512 build";
  EXPECT_NE(refusal("avx2", cpu(true, true)).find("cannot run narrower kernels"), std::string::npos);
  EXPECT_EQ(d::choose_kernel_isa("native", cpu(true, true), "x").name, "native (avx512)");
}

// The process's own choice: what MWSTRAT_KERNEL_ISA asked for (the per-ISA runs of the suite set it), else the best.
TEST(kernel_isa, the_process_runs_what_was_asked_and_says_so) {
  const auto& r = mwstrat::nn::kernel_isa_in_use();
  const char* asked = std::getenv("MWSTRAT_KERNEL_ISA");
  const std::string request = asked ? asked : "";
  const d::cpu_isa_support here = d::detect_cpu_isa();
  EXPECT_EQ(r.name, d::choose_kernel_isa(request, here, d::cpu_brand()).name);
  EXPECT_EQ(r.line(), "kernels: " + r.name + " (" + d::cpu_brand() + ")");
  if (request == "avx2") {
    EXPECT_EQ(r.name, d::build_isa_level < 1 ? "avx2+fma" : r.name);
  }
  if (request.empty() && d::build_isa_level == 0 && MWSTRAT_KERNEL_DISPATCH) {
    EXPECT_EQ(r.isa, here.avx512 ? kernel_isa::avx512 : here.avx2_fma ? kernel_isa::avx2 : kernel_isa::build);
  }
}

// The layers a factory makes are the chosen pass's classes, and a model says which.
TEST(kernel_isa, layers_are_made_of_the_chosen_isa) {
  const auto& r = mwstrat::nn::kernel_isa_in_use();
  const std::string made =
      d::with_running_pass([]<class Pass>(Pass) { return std::string(typeid(typename Pass::template dense<float>).name()); });
  if (r.isa == kernel_isa::avx512) {
    EXPECT_NE(made.find("isa_avx512"), std::string::npos) << made;
  } else if (r.isa == kernel_isa::avx2) {
    EXPECT_NE(made.find("isa_avx2"), std::string::npos) << made;
  } else {
    EXPECT_EQ(made.find("isa_avx"), std::string::npos) << made;
  }
  mwstrat::nn::model_options mo;
  mo.max_batch = 4;
  EXPECT_EQ(mwstrat::nn::reference_cnn(mo).kernel_report(), r.line());
}

}  // namespace kernel_isa_test
