// mwstrat-fault-campaign, run for real with shell workers under mwstrat-launch: its argument errors, its schedule
// (a pure function of the seed), and a short campaign against a job that resumes from a "backup" file, and
// against one that cannot recover. The campaign on real MNIST training is fault_campaign_release_test.cpp.
#include <support/process.hpp>
#include <tools/launcher_path.hpp>
#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace fault_campaign_test {

using mwstrat::test::run;

const std::string tool = MWSTRAT_FAULT_CAMPAIGN;
using mwstrat::test::launcher;

TEST(fault_campaign, argument_errors_name_the_option) {
  const std::pair<std::string, std::string> cases[] = {
      {"--model m -- true", "--faults K is required"},
      {"--faults 2 --kinds kill,bogus --model m -- true", "--kinds: 'bogus' is not one of kill, stop, term, cut, disk"},
      {"--faults 2 --model m", "no job given after --"},
      {"--faults 2 -- true", "--model FILE (the final model the job writes) is required"},
      {"--faults x --model m -- true", "--faults: 'x' is not a whole number"},
      {"--faults 2 --model m --stop-hold -1 -- true", "--stop-hold: '-1' is not a number of seconds"},
      {"--faults 2 --model m --kinds cut -- true", "--kinds cut needs --simhosts SET and --cut-hosts"},
      {"--faults 2 --model m --kinds disk -- true", "--kinds disk needs --disk DIR"},
      {"--faults 2 --model m --disk-tmpfs 8m -- true", "--disk-tmpfs needs --disk DIR"},
      {"--faults 2 --model m --reference-seconds 3 -- true", "--reference-seconds needs --reference-model"},
      {"--faults 2 --model m --reference-model r -- true", "--reference-model needs --reference-seconds"},
      {"--faults 2 --gap-min 3 --gap-max 1 --print-schedule", "--gap-min is larger than --gap-max"},
      {"--faults 2 --model m --frobnicate -- true", "unknown option '--frobnicate'"},
      {"--faults 2 --model m --elastic -- true", "--elastic: the job must be mwstrat-launch ... --min-workers K"},
      {"--faults 2 --model m --elastic -- mwstrat-launch -n 2 -- true", "--elastic: the job must be mwstrat-launch"},
      {"--faults 2 --model m --elastic --replace-lost -- mwstrat-launch --min-workers 1 -- true",
       "--elastic and --replace-lost exclude each other"},
      // The machine's own disk is never filled: a disk fault needs a small file system (or --disk-tmpfs).
      {"--faults 2 --model m --kinds disk --disk / -- true",
       "a disk fault would fill all of it"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = run(tool + " " + args, 30);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << args << "\n" << r.output;
  }
}

TEST(fault_campaign, the_schedule_is_a_pure_function_of_the_seed) {
  const auto schedule = [](const std::string& seed) {
    const auto r = run(tool + " --faults 40 --kinds kill,stop,term,disk --seed " + seed + " --print-schedule", 30);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string a = schedule("11");
  EXPECT_EQ(a, schedule("11"));
  EXPECT_NE(a, schedule("12"));
  EXPECT_NE(a.find("fault 40: "), std::string::npos) << a;
  EXPECT_EQ(a.find("fault 41: "), std::string::npos) << a;
  for (const char* k : {": kill ", ": stop ", ": term ", ": disk "}) EXPECT_NE(a.find(k), std::string::npos) << a;
  EXPECT_EQ(a.find(": cut "), std::string::npos) << a;
  // The same on every platform and in every version: the generator is splitmix64 (not a standard library's
  // distribution). These draws were checked against an independent splitmix64 in Python: seed 1's first outputs
  // give kind 1 (stop) of 4, then 0.745782 and 0.971003.
  const std::string one = schedule("1");
  EXPECT_NE(one.find("fault 1: stop gap-draw 0.745782 target-draw 0.971003\n"), std::string::npos) << one;
  EXPECT_NE(one.find("fault 2: disk gap-draw 0.444265 target-draw 0.762894\n"), std::string::npos) << one;
}

// A job of two shell workers that count to 60 steps (0.05 s each); the chief keeps its step in a "backup" file
// every 10 steps (and on SIGTERM, exiting 75 like a preempted mwstrat worker), resumes from it, and writes the
// "model" at the end. Worker 1 only waits for the chief's model.
std::string write_job(const mwstrat::test::temp_dir& dir) {
  const std::string script = (dir.path() / "worker.sh").string();
  std::ofstream(script) << "d=$1\n"
                           "case \"$TF_CONFIG\" in *'\"index\": 1'*)\n"
                           "  trap 'exit 75' TERM; n=0\n"
                           "  while [ ! -f $d/model/model ] && [ $n -lt 400 ]; do\n"
                           "    sleep 0.05; n=$((n+1))\n"
                           "  done; exit 0;;\n"
                           "esac\n"
                           "i=0; [ -f $d/backup/step ] && i=$(cat $d/backup/step)\n"
                           "save() { echo $i > $d/backup/.step.tmp && mv $d/backup/.step.tmp $d/backup/step; }\n"
                           "trap 'save; exit 75' TERM\n"
                           "while [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); [ $((i % 10)) = 0 ] && save; done\n"
                           "mkdir -p $d/model && echo \"model after $i steps\" > $d/model/model.tmp && "
                           "mv $d/model/model.tmp $d/model/model\n";
  std::filesystem::create_directories(dir.path() / "backup");
  return script;
}

TEST(fault_campaign, a_job_that_resumes_survives_every_fault_and_its_model_is_identical) {
  mwstrat::test::temp_dir dir("mwstrat-campaign");
  const std::string d = dir.path().string();
  const std::string script = write_job(dir);
  const auto r = run(tool + " --faults 4 --seed 5 --kinds kill,stop,term --stop-hold 0.5 --gap-min 0.3 --gap-max 0.6" +
                         " --model " + d + "/model/model --clean " + d + "/backup --clean " + d + "/model --work-dir " +
                         d + "/work --timeout 60 -- " + launcher + " -n 2 --max-restarts 10 --grace-ms 300 -- sh " +
                         script + " " + d,
                     150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("faults injected: 4\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("faults survived: 4\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final model byte-identical to the fault-free run: yes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; per fault: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("worker groups started: 5\n"), std::string::npos) << r.output;  // one per fault, plus one
}

TEST(fault_campaign, a_job_that_cannot_recover_is_reported_as_not_surviving) {
  mwstrat::test::temp_dir dir("mwstrat-campaign");
  const std::string d = dir.path().string();
  const std::string script = write_job(dir);
  // No restarts allowed: the first SIGKILL ends the job.
  const auto r = run(tool + " --faults 2 --seed 1 --kinds kill --gap-min 0.3 --gap-max 0.5 --model " + d +
                         "/model/model --clean " + d + "/backup --clean " + d + "/model --work-dir " + d +
                         "/work --timeout 60 -- " + launcher + " -n 2 --max-restarts 0 --grace-ms 300 -- sh " + script +
                         " " + d,
                     150);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("faults injected: 1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("faults survived: 0\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("job exit status: 137"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NOT survived"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("byte-identical to the fault-free run: yes"), std::string::npos) << r.output;
}

TEST(fault_campaign, a_job_past_its_limit_is_killed_with_its_workers) {
  mwstrat::test::temp_dir dir("mwstrat-campaign");
  const std::string d = dir.path().string();
  // Workers that would sleep for 60 s; the tool's limit is 2 s. The workers lead process groups of their own (the
  // launcher's), so killing the launcher alone would leave them: the marker file shows they are gone.
  const auto r = run(tool + " --faults 1 --model " + d + "/model --work-dir " + d + "/work --timeout 2 -- " + launcher +
                         " -n 2 -- sh -c 'sleep 60; touch " + d + "/still-alive'",
                     60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the run passed its limit of 2 s (--timeout); killing the job"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the fault-free run timed out"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30.0);
  const auto none = run("sleep 1; ls " + d, 10);
  EXPECT_EQ(none.output.find("still-alive"), std::string::npos) << none.output;
  // "[s]leep": the pattern must not match pgrep's own shell, whose command line holds it.
  EXPECT_EQ(run("pgrep -f '[s]leep 60; touch " + d + "/still-alive'", 10).exit_code, 1) << "a worker outlived it";
}

}  // namespace fault_campaign_test
