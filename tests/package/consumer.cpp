// A consumer program shared by the package tests: it uses real parts of mwstrat and checks what they do,
// so a package that compiles but links or behaves wrongly fails the test. Exit code 0 means it worked.
#include <mwstrat/mwstrat.hpp>

#include <cstdio>
#include <string>

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "consumer: FAILED: %s\n", what);
      ++failures;
    }
  };

  const mwstrat::config_error e({"cluster", 3}, "task.index: 9 is out of range");
  check(std::string(e.what()) == "[mwstrat.cluster] rank 3: task.index: 9 is out of range", "error message format");
  check(std::string(mwstrat::version_string) == "0.1.0", "version");

  std::printf("mwstrat %s consumer: %s\n", mwstrat::version_string, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
