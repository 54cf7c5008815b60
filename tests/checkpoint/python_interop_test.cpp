// Python reads our files: plain numpy (header parsed by hand, np.frombuffer), and Python's `safetensors` package
// when it is installed. Skipped, saying so, when python3 or numpy is missing.
#include "checkpoint_test_util.hpp"

#include <mwstrat/checkpoint/safetensors.hpp>
#include <mwstrat/checkpoint/training_state.hpp>

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace python_interop_test {

using namespace mwstrat;
using mwstrat::test::temp_dir;

constexpr const char* script = R"PY(
import json, struct, sys
import numpy as np

def crc32c(data):
    table = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ table[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF

def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
    meta = header.pop("__metadata__", {})
    assert int(meta["mwstrat.crc32c"], 16) == crc32c(data), "CRC32C differs from Python's"
    names = {"F64": "<f8", "F32": "<f4", "I64": "<i8", "I32": "<i4", "U8": "u1"}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=names[info["dtype"]]).reshape(info["shape"])
    return tensors, meta

tensors, meta = read(sys.argv[1])
assert meta["run"] == "interop", meta
assert np.array_equal(tensors["a"], (np.arange(6, dtype=np.float32) * 0.25 - 1).reshape(2, 3)), tensors["a"]
assert np.array_equal(tensors["b"], np.array([1e-300, -2.5, 3e300])), tensors["b"]
assert np.array_equal(tensors["c"], np.array([-(2 ** 62), 7], dtype=np.int64)), tensors["c"]
assert np.array_equal(tensors["d"], np.array([[-5], [6]], dtype=np.int32)), tensors["d"]
assert np.array_equal(tensors["e"], np.array([0, 1, 255], dtype=np.uint8)), tensors["e"]
assert tensors["z"].shape == (0, 3)

state, smeta = read(sys.argv[2])
assert smeta["mwstrat.format"] == "training_state/1"
assert smeta["mwstrat.epoch"] == "4" and smeta["mwstrat.step"] == "1234", smeta
assert smeta["mwstrat.cursor.epoch"] == "4" and smeta["mwstrat.cursor.step"] == "17"
assert smeta["mwstrat.cursor.seed"] == "18446744073709551615"
assert smeta["mwstrat.world_size"] == "2" and smeta["mwstrat.model_fingerprint"] == "fp"
assert smeta["mwstrat.optimizer_iterations"] == "1234" and smeta["mwstrat.rng"] == "1 2 3"
assert np.array_equal(state["kernel"], np.arange(12, dtype=np.float32).reshape(3, 4))
assert np.array_equal(state["optimizer/m/kernel"], np.full((3, 4), 0.5, dtype=np.float32))

used = "plain numpy"
try:
    from safetensors.numpy import load_file
    from safetensors import safe_open
except ImportError:
    pass
else:
    loaded = load_file(sys.argv[1])
    for name, value in tensors.items():
        assert np.array_equal(loaded[name], value) and loaded[name].dtype == value.dtype, name
    with safe_open(sys.argv[2], framework="numpy") as f:
        assert f.metadata()["mwstrat.step"] == "1234"
        assert np.array_equal(f.get_tensor("kernel"), state["kernel"])
    used = "numpy and the safetensors package"
print("read with " + used)
)PY";

std::string run(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    status = -1;
    return output;
  }
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  status = ::pclose(pipe);
  return output;
}

TEST(python_interop, numpy_and_safetensors_read_our_files) {
  // Debian's interpreter first: scripts/test installs python3-numpy for it (a pyenv python3 on PATH may lack it).
  int status = 0;
  std::string python;
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    run(std::string(candidate) + " -c 'import numpy' 2>/dev/null", status);
    if (status == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "SKIPPED: no python3 with numpy (apt-get install python3-numpy)";

  temp_dir dir;
  std::vector<float> a(6);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.25f - 1.0f;
  const std::vector<double> b{1e-300, -2.5, 3e300};
  const std::vector<std::int64_t> c{-(std::int64_t{1} << 62), 7};
  const std::vector<std::int32_t> d{-5, 6};
  const std::vector<std::uint8_t> e{0, 1, 255};
  const std::vector<float> z;
  save_safetensors(dir / "mixed.safetensors",
                   std::vector{make_tensor_entry<float>("a", a, {2, 3}), make_tensor_entry<double>("b", b),
                               make_tensor_entry<std::int64_t>("c", c), make_tensor_entry<std::int32_t>("d", d, {2, 1}),
                               make_tensor_entry<std::uint8_t>("e", e), make_tensor_entry<float>("z", z, {0, 3})},
                   {{"run", "interop"}});

  training_state state;
  state.epoch = 4;
  state.step = 1234;
  state.cursor = {4, 17, 18446744073709551615ull};
  state.rng_state = "1 2 3";
  state.world_size = 2;
  state.model_fingerprint = "fp";
  state.optimizer_iterations = 1234;
  std::vector<float> kernel(12);
  for (std::size_t i = 0; i < kernel.size(); ++i) kernel[i] = static_cast<float>(i);
  state.weights.push_back({"kernel", {3, 4}, kernel});
  state.optimizer_slots.push_back({"m/kernel", {3, 4}, std::vector<float>(12, 0.5f)});
  save_training_state(dir / "state.safetensors", state);

  std::ofstream(dir / "check.py") << script;
  const std::string output = run(python + " " + (dir / "check.py").string() + " " +
                                     (dir / "mixed.safetensors").string() + " " + (dir / "state.safetensors").string(),
                                 status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("read with"), std::string::npos) << output;
  std::printf("python: %s", output.c_str());
}

}  // namespace python_interop_test
