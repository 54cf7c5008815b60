// Records written by TensorFlow's code, not ours, read back feature for feature: the `tensorboard` package's
// RecordWriter (TensorFlow's TFRecord framing and masked CRC32C) writes tf.train.Example messages serialized by
// Google's protobuf library (the Python venv of scripts/test, python_test_venv in scripts/lib/common.sh), raw,
// gzip and zlib, with packed and with unpacked repeated fields (feature.proto's messages are declared in the
// script: tensorboard carries the framing but not example.proto); and the same records read by number
// (indexed_tfrecord_file, what record_batches streams with). Skipped, saying so, without the venv.
#include <mwstrat/data/example.hpp>
#include <mwstrat/data/feature_spec.hpp>
#include <mwstrat/data/indexed_tfrecord_file.hpp>
#include <mwstrat/data/tfrecord.hpp>

#include <support/process.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace tfrecord_interop_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;

const std::string python = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/.cache/py-venv/bin/python";
constexpr int records = 5;

// argv[1]: the folder to write to. Prints the masked CRC32C of "123456789" and each record's offset.
constexpr const char* writer_script = R"PY(
import gzip, sys, zlib
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

FD = descriptor_pb2.FieldDescriptorProto
def example_class(pkg, packed):
    # tensorflow/core/example/{feature,example}.proto, with the repeated numbers packed or not
    f = descriptor_pb2.FileDescriptorProto(name=pkg + "/feature.proto", package=pkg, syntax="proto3")
    m = f.message_type.add(name="BytesList")
    m.field.add(name="value", number=1, type=FD.TYPE_BYTES, label=FD.LABEL_REPEATED)
    for name, t in (("FloatList", FD.TYPE_FLOAT), ("Int64List", FD.TYPE_INT64)):
        m = f.message_type.add(name=name)
        m.field.add(name="value", number=1, type=t, label=FD.LABEL_REPEATED).options.packed = packed
    m = f.message_type.add(name="Feature")
    m.oneof_decl.add(name="kind")
    for i, (n, t) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List"))):
        m.field.add(name=n, number=i + 1, type=FD.TYPE_MESSAGE, type_name="." + pkg + "." + t,
                    label=FD.LABEL_OPTIONAL, oneof_index=0)
    m = f.message_type.add(name="Features")
    e = m.nested_type.add(name="FeatureEntry")
    e.options.map_entry = True
    e.field.add(name="key", number=1, type=FD.TYPE_STRING, label=FD.LABEL_OPTIONAL)
    e.field.add(name="value", number=2, type=FD.TYPE_MESSAGE, type_name="." + pkg + ".Feature", label=FD.LABEL_OPTIONAL)
    m.field.add(name="feature", number=1, type=FD.TYPE_MESSAGE, type_name="." + pkg + ".Features.FeatureEntry",
                label=FD.LABEL_REPEATED)
    m = f.message_type.add(name="Example")
    m.field.add(name="features", number=1, type=FD.TYPE_MESSAGE, type_name="." + pkg + ".Features", label=FD.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(pkg + ".Example"))

def record(cls, i):
    ex = cls()
    fs = ex.features.feature
    fs["id"].int64_list.value.append(i)
    fs["ints"].int64_list.value.extend([-i, 2**63 - 1, -2**63, i * 1000003, 0])
    fs["floats"].float_list.value.extend([i * 0.5, -1.25, 0.1, 3.0e38, 1e-45, float("inf")])
    fs["bytes"].bytes_list.value.extend([bytes(range(256)), b"", ("record %d" % i).encode()])
    fs["empty"].int64_list.SetInParent()
    return ex.SerializeToString(deterministic=True)

class zlib_file:  # what TFRecordWriter(options="ZLIB") writes: one zlib stream
    def __init__(self, path): self.f, self.z = open(path, "wb"), zlib.compressobj()
    def write(self, b): self.f.write(self.z.compress(b))
    def flush(self): pass
    def close(self): self.f.write(self.z.flush()); self.f.close()

out = sys.argv[1]
print("crc", masked_crc32c(b"123456789"))
for name, packed, opener in (("packed.tfrecord", True, lambda p: open(p, "wb")),
                             ("unpacked.tfrecord", False, lambda p: open(p, "wb")),
                             ("packed.gz", True, lambda p: gzip.open(p, "wb")),
                             ("unpacked.zlib", False, zlib_file)):
    cls = example_class("tf_" + name.replace(".", "_"), packed)
    w = RecordWriter(opener(out + "/" + name))
    offset = 0
    for i in range(int(sys.argv[2])):
        data = record(cls, i)
        w.write(data)
        print("offset", name, i, offset)
        offset += len(data) + 16
    w.close()
)PY";

example expected(int i) {
  example ex;
  ex.features["id"] = int64_list{{i}};
  ex.features["ints"] = int64_list{{-i, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min(),
                                    std::int64_t{i} * 1000003, 0}};
  ex.features["floats"] = float_list{{static_cast<float>(i * 0.5), -1.25f, static_cast<float>(0.1),
                                      static_cast<float>(3.0e38), static_cast<float>(1e-45),
                                      std::numeric_limits<float>::infinity()}};
  std::string all(256, '\0');
  for (int b = 0; b < 256; ++b) all[static_cast<std::size_t>(b)] = static_cast<char>(b);
  ex.features["bytes"] = bytes_list{{all, "", "record " + std::to_string(i)}};
  ex.features["empty"] = int64_list{};
  return ex;
}

struct written {
  std::string output;  // what the script printed
  bool ok = false;
};

written write_with_tensorflows_writer(const fs::path& dir) {
  const fs::path script = dir / "write.py";
  std::ofstream(script) << writer_script;
  const auto r = test::run(python + " " + script.string() + " " + dir.string() + " " + std::to_string(records), 120);
  return {r.output, r.exit_code == 0};
}

bool have_python() {
  return test::run(python + " -c 'import tensorboard, google.protobuf'", 60).exit_code == 0;
}

TEST(tfrecord_interop, records_from_tensorflows_writer_read_back_feature_for_feature) {
  if (!have_python()) GTEST_SKIP() << "SKIPPED: no tensorboard/protobuf in " << python << " (scripts/test makes it)";
  test::temp_dir dir("tfrecord-interop");
  const auto w = write_with_tensorflows_writer(dir.path());
  ASSERT_TRUE(w.ok) << w.output;

  std::istringstream lines(w.output);
  std::string word, name;
  std::uint32_t crc = 0;
  std::map<std::string, std::vector<std::uint64_t>> offsets;
  while (lines >> word) {
    if (word == "crc") {
      lines >> crc;
    } else if (word == "offset") {
      int i = 0;
      std::uint64_t at = 0;
      lines >> name >> i >> at;
      offsets[name].push_back(at);
    }
  }
  const std::string text = "123456789";
  EXPECT_EQ(crc, masked_crc32c(std::as_bytes(std::span(text.data(), text.size()))));

  const std::vector<std::pair<std::string, tfrecord_compression>> files = {
      {"packed.tfrecord", tfrecord_compression::none},
      {"unpacked.tfrecord", tfrecord_compression::none},
      {"packed.gz", tfrecord_compression::gzip},
      {"unpacked.zlib", tfrecord_compression::zlib}};
  const example_parser parser({{.name = "ints", .type = feature_type::int64, .shape = {5}},
                               {.name = "floats", .type = feature_type::float32, .shape = {2, 3}},
                               {.name = "bytes", .type = feature_type::bytes, .shape = {3}},
                               {.name = "empty", .type = feature_type::int64, .shape = {0}}});
  for (const auto& [file, compression] : files) {
    ASSERT_EQ(offsets[file].size(), std::size_t{records}) << w.output;
    for (const auto given : {tfrecord_compression::automatic, compression}) {
      tfrecord_reader reader(dir / file, {.compression = given});
      EXPECT_EQ(reader.compression(), compression) << file;
      parsed_example parsed;
      for (int i = 0; i < records; ++i) {
        const auto rec = reader.next();
        ASSERT_TRUE(rec) << file << " record " << i;
        EXPECT_EQ(rec->offset, offsets[file][static_cast<std::size_t>(i)]) << file;
        const record_location at{(dir / file).string(), rec->offset};
        const example ex = decode_example(rec->data, at);
        EXPECT_EQ(ex, expected(i)) << file << " record " << i;
        if (file.starts_with("packed")) {  // protobuf's deterministic bytes are what encode_example writes
          const auto again = encode_example(ex);
          EXPECT_TRUE(std::equal(again.begin(), again.end(), rec->data.begin(), rec->data.end())) << file << " " << i;
        }
        parser.parse(rec->data, at, parsed);
        EXPECT_EQ(parsed.int64s(0)[3], std::int64_t{i} * 1000003);
        EXPECT_EQ(parsed.floats(1)[0], static_cast<float>(i * 0.5));
        EXPECT_EQ(parsed.text(2, 2), "record " + std::to_string(i));
        EXPECT_EQ(parsed.bytes(2, 0).size(), 256u);
        EXPECT_TRUE(parsed.int64s(3).empty());
      }
      EXPECT_FALSE(reader.next()) << file;
    }
    // Read by record number, as record_batches streams them (a compressed file through its inflated copy): the
    // same records at the same offsets.
    const indexed_tfrecord_file indexed(dir / file);
    ASSERT_EQ(indexed.size(), std::size_t{records}) << file;
    std::vector<std::byte> buffer;
    for (int i = records - 1; i >= 0; --i) {
      const auto k = static_cast<std::size_t>(i);
      EXPECT_EQ(indexed.location(k).offset, offsets[file][k]) << file;
      EXPECT_EQ(decode_example(indexed.read(k, buffer), indexed.location(k)), expected(i)) << file << " record " << i;
    }
  }
}

}  // namespace tfrecord_interop_test
