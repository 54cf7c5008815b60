// The chief writes to the real path, every other task to its own temporary folder, which it then removes.
#include <mwstrat/cluster/simple_resolver.hpp>
#include <mwstrat/cluster/tf_config.hpp>
#include <mwstrat/cluster/write_filepath.hpp>

#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace write_filepath_test {

namespace fs = std::filesystem;
using mwstrat::cluster_config;

class temp_dir : public testing::Test {
 protected:
  static void write(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  mwstrat::test::temp_dir dir_{"mwstrat-cluster"};
  fs::path root_ = dir_.path();
};

cluster_config config(const std::string& cluster, const std::string& type, int index) {
  return mwstrat::parse_tf_config(R"({"cluster": )" + cluster + R"(, "task": {"type": ")" + type +
                                  R"(", "index": )" + std::to_string(index) + "}}");
}

TEST(write_filepath, follows_the_tutorial_rule) {
  const std::string workers = R"({"worker": ["a:1", "b:1", "c:1"]})";
  EXPECT_EQ(mwstrat::write_filepath("/tmp/keras-model", config(workers, "worker", 0)), fs::path("/tmp/keras-model"));
  EXPECT_EQ(mwstrat::write_filepath("/tmp/keras-model", config(workers, "worker", 2)),
            fs::path("/tmp/workertemp_2/keras-model"));
  EXPECT_EQ(mwstrat::write_filepath("/tmp/ckpt/", config(workers, "worker", 1)), fs::path("/tmp/ckpt/workertemp_1/"));
  EXPECT_EQ(mwstrat::write_filepath("model.ckpt", config(workers, "worker", 1)), fs::path("workertemp_1/model.ckpt"));

  const std::string with_chief = R"({"chief": ["c:1"], "worker": ["a:1"], "evaluator": ["e:1"]})";
  EXPECT_EQ(mwstrat::write_filepath("/m/x", config(with_chief, "chief", 0)), fs::path("/m/x"));
  EXPECT_EQ(mwstrat::write_filepath("/m/x", config(with_chief, "worker", 0)), fs::path("/m/workertemp_0/x"));
  EXPECT_EQ(mwstrat::write_filepath("/m/x", config(with_chief, "evaluator", 0)),
            fs::path("/m/workertemp_evaluator_0/x"));
  EXPECT_EQ(mwstrat::write_filepath("/m/x", cluster_config{}), fs::path("/m/x"));
  EXPECT_EQ(mwstrat::write_filepath("/m/x", mwstrat::task_info{"worker", 3}, false), fs::path("/m/workertemp_3/x"));
  EXPECT_EQ(mwstrat::write_filepath("/m/x", mwstrat::task_info{"worker", 3}, true), fs::path("/m/x"));
}

TEST_F(temp_dir, every_task_writes_its_own_copy_and_only_the_chief_keeps_it) {
  const std::string cluster = R"({"worker": ["a:1", "b:1", "c:1"]})";
  const fs::path model = root_ / "saved" / "model.bin";
  for (int i = 0; i < 3; ++i) write(mwstrat::write_filepath(model, config(cluster, "worker", i)), "w" + std::to_string(i));
  EXPECT_TRUE(fs::exists(root_ / "saved" / "workertemp_1" / "model.bin"));
  EXPECT_TRUE(fs::exists(root_ / "saved" / "workertemp_2" / "model.bin"));
  EXPECT_EQ(mwstrat::remove_worker_temp_dir(model, config(cluster, "worker", 0)), 0U);  // the chief removes nothing
  EXPECT_EQ(mwstrat::remove_worker_temp_dir(model, config(cluster, "worker", 1)), 2U);  // folder + file
  EXPECT_EQ(mwstrat::remove_worker_temp_dir(model, config(cluster, "worker", 2)), 2U);
  EXPECT_EQ(mwstrat::remove_worker_temp_dir(model, config(cluster, "worker", 2)), 0U);  // already gone
  EXPECT_TRUE(fs::exists(model));
  std::ifstream in(model);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "w0");
  EXPECT_EQ(std::distance(fs::directory_iterator(root_ / "saved"), fs::directory_iterator{}), 1);
}

TEST_F(temp_dir, removes_a_whole_checkpoint_folder) {
  const auto worker = mwstrat::simple_resolver({"a:1", "b:1"}, 1).resolve();
  const fs::path ckpt = root_ / "ckpt";
  const fs::path mine = mwstrat::write_filepath(ckpt, worker);
  EXPECT_EQ(mine, root_ / "workertemp_1" / "ckpt");
  write(mine / "checkpoint", "x");
  write(mine / "ckpt-1.data", "y");
  EXPECT_EQ(mwstrat::remove_worker_temp_dir(ckpt, worker), 4U);
  EXPECT_FALSE(fs::exists(root_ / "workertemp_1"));
}

TEST_F(temp_dir, failure_to_remove_is_an_io_error_with_the_rank) {
  // A regular file where the temp folder's parent should be: the removal fails with "Not a directory" (this
  // also fails for root, unlike a permission trick).
  const auto worker = mwstrat::simple_resolver({"a:1", "b:1"}, 1).resolve();
  write(root_ / "plain", "x");
  const fs::path model = root_ / "plain" / "model";
  try {
    (void)mwstrat::remove_worker_temp_dir(model, worker);
    FAIL() << "removal should have failed";
  } catch (const mwstrat::io_error& e) {
    EXPECT_EQ(e.kind(), mwstrat::error_kind::io);
    EXPECT_EQ(e.component(), "cluster");
    EXPECT_EQ(e.rank(), 1);
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("[mwstrat.cluster] rank 1: cannot remove worker temp dir '", 0), 0U) << message;
    EXPECT_NE(message.find("plain/workertemp_1' of task worker:1"), std::string::npos) << message;
  }
}

}  // namespace write_filepath_test
