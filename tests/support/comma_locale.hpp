#pragma once
// A locale whose decimal point is a comma, set for the life of the object: what a program that calls
// setlocale(LC_ALL, "") gets on a German system. The tests use it to show that what the library writes under one
// locale reads back under another. The locale (de_DE.UTF-8) is compiled once per test process by localedef, from
// the sources of Debian's `locales` (scripts/test installs it), into a folder of the process's own found through
// LOCPATH, so nothing outside the test changes.

#include <support/process.hpp>
#include <support/temp_dir.hpp>

#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <locale>
#include <stdexcept>
#include <string>

namespace mwstrat::test {

class comma_locale {
 public:
  static constexpr const char* name = "de_DE.UTF-8";

  comma_locale() {
    const std::filesystem::path& folder = compiled();
    ::setenv("LOCPATH", folder.c_str(), 1);
    if (std::setlocale(LC_ALL, name) == nullptr) {
      throw std::runtime_error(std::string("setlocale(LC_ALL, \"") + name + "\") failed with LOCPATH " +
                               folder.string());
    }
    std::locale::global(std::locale(name));
    // The point of the object: printf now writes a comma. Were it not so, a test would pass without testing.
    char text[16];
    std::snprintf(text, sizeof text, "%.1f", 0.5);
    if (std::string(text) != "0,5") throw std::runtime_error(std::string("the comma locale prints ") + text);
  }
  comma_locale(const comma_locale&) = delete;
  comma_locale& operator=(const comma_locale&) = delete;
  ~comma_locale() {
    std::setlocale(LC_ALL, "C");
    std::locale::global(std::locale::classic());
    ::unsetenv("LOCPATH");
  }

 private:
  // The folder holding the compiled locale, made at the first call and removed when the process ends.
  static const std::filesystem::path& compiled() {
    static const temp_dir dir("mwstrat-locale");
    static const bool done = compile(dir.path() / name);
    (void)done;
    return dir.path();
  }

  static bool compile(const std::filesystem::path& out) {
    const process_result r = run("localedef -i de_DE -f UTF-8 '" + out.string() + "'", 120);
    // localedef exits 1 for mere warnings: the compiled folder is the test of success.
    if (!std::filesystem::exists(out / "LC_NUMERIC")) {
      throw std::runtime_error("localedef could not compile " + std::string(name) +
                               " (Debian's locales package has its sources): " + r.output);
    }
    return true;
  }
};

}  // namespace mwstrat::test
