// Pins `octopipe plan` end to end (flags -> tuner -> JSON, tables and plan files): every
// documented JSON field, a plan file that `octopipe simulate --plan` re-evaluates to the same
// iteration time, the help text, exit code 2 with the flag named for bad usage, and exit code 3
// with the memory each device needs for a model that cannot fit.
#include "cli/plan_command.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "cli/simulate_command.h"
#include "core/cluster.h"
#include "core/convert.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "core/schedule.h"
#include "gtest/gtest.h"

namespace octopipe::cli {
namespace {

struct CliRun {
  int code;
  std::string out, err;
};

CliRun PlanCli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = RunPlan(args, out, err);
  return {code, out.str(), err.str()};
}

CliRun SimulateCli(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = RunSimulate(args, out, err);
  return {code, out.str(), err.str()};
}

// The output parsed (members in document order); null when it is not JSON.
Json JsonOf(const CliRun& r) {
  Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j.is_discarded() ? Json() : j;
}

const Json& Get(const Json& j, const char* key) {
  static const Json kNull;
  const bool found = j.is_object() && j.contains(key);
  EXPECT_TRUE(found) << "missing " << key;
  return found ? j.at(key) : kNull;
}

double Num(const Json& j) { return j.is_number() ? j.get<double>() : -1; }

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// A small real model on 4 H100s; the search converges well inside a 2 s budget.
std::vector<std::string> Llama4(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--model=zoo:llama3-8b", "--cluster=preset:h100-1node",
                                   "--devices=4", "--microbatches=16", "--time_budget=2",
                                   "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const std::vector<std::string> kBaselines = {"gpipe",          "1f1b",  "1f1b-balanced",
                                             "interleaved-v2", "interleaved-v4", "zb-h1",
                                             "zb-h2",          "zb-v",  "dualpipev"};

TEST(PlanCommandTest, JsonCarriesThePlanThePredictionAndEveryBaseline) {
  CliRun r = PlanCli(Llama4({"--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = JsonOf(r);
  EXPECT_EQ(Get(j, "feasible"), true);

  // plan.partition covers the 66 layers contiguously; plan.placement has a device per stage.
  const Json& plan = Get(j, "plan");
  const Json& partition = Get(plan, "partition");
  const Json& placement = Get(plan, "placement");
  ASSERT_FALSE(partition.empty());
  ASSERT_EQ(placement.size(), partition.size());
  int next = 0;
  for (size_t s = 0; s < partition.size(); ++s) {
    EXPECT_EQ(Num(Get(partition[s], "first_layer")), next) << "stage " << s;
    next = static_cast<int>(Num(Get(partition[s], "last_layer"))) + 1;
    const double device = Num(placement[s]);
    EXPECT_TRUE(device >= 0 && device < 4) << "stage " << s << " on device " << device;
  }
  EXPECT_EQ(next, 66);

  // plan.schedule: one list per device of op strings such as "F3.7", every op exactly once.
  const Json& schedule = Get(plan, "schedule");
  ASSERT_EQ(schedule.size(), 4u);
  std::set<std::string> seen;
  size_t forwards = 0;
  for (const Json& device : schedule) {
    for (const Json& op_json : device) {
      const std::string op = op_json.get<std::string>();
      absl::StatusOr<Op> parsed = ParseOp(op);
      ASSERT_TRUE(parsed.ok()) << "'" << op << "': " << parsed.status();
      EXPECT_EQ(OpToString(*parsed), op);
      EXPECT_TRUE(seen.insert(op).second) << op << " twice";
      if (parsed->kind == OpKind::kF) ++forwards;
    }
  }
  EXPECT_EQ(forwards, partition.size() * 16);

  const Json& predicted = Get(j, "predicted");
  const double time = Num(Get(predicted, "iteration_time_s"));
  EXPECT_GT(time, 0);
  const double bubble = Num(Get(predicted, "bubble_ratio"));
  EXPECT_TRUE(bubble >= 0 && bubble < 1) << bubble;
  ASSERT_EQ(Get(predicted, "peak_memory_bytes").size(), 4u);
  for (const Json& peak : Get(predicted, "peak_memory_bytes")) {
    EXPECT_GT(Num(peak), 0);
    EXPECT_LE(Num(peak), 80e9 - 4e9);  // an H100 less the preset's reserve
  }

  // baselines: name -> figures; the best fitting one is no faster than the plan.
  const Json& baselines = Get(j, "baselines");
  std::vector<std::string> names;
  for (const auto& member : baselines.items()) names.push_back(member.key());
  EXPECT_EQ(names, kBaselines);
  double best_fitting = 1e300;
  for (const std::string& name : kBaselines) {
    ASSERT_TRUE(baselines.contains(name)) << name;
    const Json& b = baselines.at(name);
    EXPECT_GT(Num(Get(b, "iteration_time_s")), 0) << name;
    EXPECT_TRUE(b.contains("bubble_ratio")) << name;
    ASSERT_TRUE(Get(b, "fits").is_boolean()) << name;
    if (Get(b, "fits").get<bool>()) {
      best_fitting = std::min(best_fitting, Num(Get(b, "iteration_time_s")));
    }
  }
  EXPECT_LE(time, best_fitting * (1 + 1e-12));
  EXPECT_NEAR(Num(Get(j, "speedup_vs_best_baseline")), best_fitting / time, 1e-9);
  // The lower bound is a bound on every plan shown (ours and each baseline), and the gap is
  // ours relative to it.
  const Json& lb = Get(j, "lower_bound");
  const double bound = Num(Get(lb, "seconds"));
  EXPECT_GT(bound, 0);
  EXPECT_LE(bound, time * (1 + 1e-12));
  EXPECT_LE(bound, best_fitting * (1 + 1e-12));
  EXPECT_NEAR(Num(Get(lb, "gap")), (time - bound) / time, 1e-9);
  EXPECT_DOUBLE_EQ(bound, std::max({Num(Get(lb, "work_s")), Num(Get(lb, "chain_s")),
                                    Num(Get(lb, "layer_s")), Num(Get(lb, "assignment_s"))}));
  // The tuning time covers every phase of the search log (each stamped since the start).
  ASSERT_FALSE(Get(j, "log").empty());
  for (const Json& e : Get(j, "log")) {
    EXPECT_LE(Num(Get(e, "wall_s")), Num(Get(j, "tuning_wall_s")));
  }
  EXPECT_TRUE(r.err.empty()) << "--json prints no progress: " << r.err;
}

TEST(PlanCommandTest, PlanFileReSimulatesToTheSameIterationTime) {
  struct Case {
    std::string label;
    std::vector<std::string> inputs;
  };
  const std::vector<Case> cases = {
      {"llama3-8b", {"--model=zoo:llama3-8b", "--cluster=preset:h100-1node", "--devices=4",
                     "--microbatches=16"}},
      {"synthetic", {"--model=synthetic:layers=10,f=1,b=2,w=1.5",
                     "--cluster=synthetic:devices=4", "--devices=4", "--microbatches=8"}},
  };
  for (const Case& c : cases) {
    const std::string file = TmpPath(c.label + ".plan.json");
    std::vector<std::string> args = c.inputs;
    for (const char* a : {"--time_budget=2", "--json", "--quiet"}) args.push_back(a);
    args.push_back("--out=" + file);
    CliRun planned = PlanCli(args);
    ASSERT_EQ(planned.code, 0) << c.label << ": " << planned.err;
    const double want = Num(Get(Get(JsonOf(planned), "predicted"), "iteration_time_s"));

    std::vector<std::string> sim_args = c.inputs;
    sim_args.push_back("--plan=" + file);
    sim_args.push_back("--json");
    CliRun simulated = SimulateCli(sim_args);
    ASSERT_EQ(simulated.code, 0) << c.label << ": " << simulated.err;
    const double got = Num(Get(JsonOf(simulated), "iteration_time_s"));
    EXPECT_NEAR(got, want, 1e-9 * want) << c.label;
    // The file's recorded iteration is this one: no warning.
    EXPECT_NEAR(Num(Get(JsonOf(simulated), "plan_file_iteration_time_s")), want, 1e-9 * want);
    EXPECT_EQ(simulated.err.find("warning"), std::string::npos) << simulated.err;
  }
}

// `plan --ep_overlap --recompute=selective --contention` plans for a model and a simulation
// other than the files say. The plan file records the three with its prediction, and `simulate
// --plan` applies them: the same iteration, without a warning, and says so. A flag given to
// simulate wins over the file. Each recorded option matters: removed from the file, the
// prediction moves its own way and simulate warns.
TEST(PlanCommandTest, PlanFileRecordsWhatPlanChangedAndSimulateAppliesIt) {
  const std::vector<std::string> inputs = {"--model=zoo:mixtral-8x7b",
                                           "--cluster=preset:h100-4nodes"};
  const std::string file = TmpPath("ep-overlap.plan.json");
  std::vector<std::string> args = inputs;
  for (const char* a : {"--pp=2", "--dp=16", "--ep=8", "--microbatches=32", "--time_budget=1",
                        "--json", "--quiet", "--ep_overlap", "--recompute=selective",
                        "--contention"}) {
    args.push_back(a);
  }
  args.push_back("--out=" + file);
  CliRun planned = PlanCli(args);
  ASSERT_EQ(planned.code, 0) << planned.err;
  const double want =
      Num(Get(Get(Get(JsonOf(planned), "layout"), "simulated"), "iteration_time_s"));
  // The file records what the flags changed, with the prediction.
  absl::StatusOr<std::string> text = ReadFileToString(file);
  ASSERT_TRUE(text.ok()) << text.status();
  const Json recorded = Get(Json::parse(*text), "predicted");
  EXPECT_EQ(Get(recorded, "ep_comm_overlap"), Json(true)) << recorded;
  EXPECT_EQ(Get(recorded, "recompute"), Json("selective")) << recorded;
  EXPECT_EQ(Get(recorded, "contention"), Json(true)) << recorded;

  // simulate --plan applies them without being told, and says so.
  std::vector<std::string> sim_args = inputs;
  sim_args.push_back("--plan=" + file);
  std::vector<std::string> as_json = sim_args;
  as_json.push_back("--json");
  CliRun same = SimulateCli(as_json);
  ASSERT_EQ(same.code, 0) << same.err;
  EXPECT_NEAR(Num(Get(JsonOf(same), "iteration_time_s")), want, 1e-9 * want);
  EXPECT_NEAR(Num(Get(JsonOf(same), "plan_file_iteration_time_s")), want, 1e-9 * want);
  EXPECT_EQ(Get(JsonOf(same), "plan_file_options_applied"),
            Json::parse(R"(["--ep_overlap", "--recompute=selective", "--contention"])"));
  EXPECT_EQ(same.err.find("warning"), std::string::npos) << same.err;
  CliRun tables = SimulateCli(sim_args);
  ASSERT_EQ(tables.code, 0) << tables.err;
  EXPECT_NE(tables.err.find("as the plan was made (recorded in " + file +
                            "): --ep_overlap --recompute=selective --contention"),
            std::string::npos)
      << tables.err;
  // Given the same flags, nothing is left to apply: the same iteration.
  std::vector<std::string> flagged = as_json;
  flagged.push_back("--ep_overlap");
  flagged.push_back("--contention");
  CliRun given = SimulateCli(flagged);
  ASSERT_EQ(given.code, 0) << given.err;
  EXPECT_NEAR(Num(Get(JsonOf(given), "iteration_time_s")), want, 1e-9 * want);
  EXPECT_EQ(Get(JsonOf(given), "plan_file_options_applied"),
            Json::parse(R"(["--recompute=selective"])"));
  // A flag set to false here wins over the file: predicted without the overlap (slower).
  std::vector<std::string> without = as_json;
  without.push_back("--ep_overlap=false");
  CliRun overridden = SimulateCli(without);
  ASSERT_EQ(overridden.code, 0) << overridden.err;
  EXPECT_GT(Num(Get(JsonOf(overridden), "iteration_time_s")), want * 1.005);

  // Each recorded field removed (as in a file written before them): the prediction moves its
  // own way, and simulate warns.
  std::vector<std::string> old_args = inputs;
  const std::string old_file = TmpPath("ep-overlap.old.plan.json");
  old_args.push_back("--plan=" + old_file);
  old_args.push_back("--json");
  auto without_field = [&](const std::string& field) {
    Json old = Json::parse(*text);
    old["predicted"].erase(field);
    EXPECT_TRUE(WriteStringToFile(old_file, old.dump()).ok());
    CliRun run = SimulateCli(old_args);
    EXPECT_EQ(run.code, 0) << run.err;
    EXPECT_NE(run.err.find("warning: the plan file recorded a"), std::string::npos) << run.err;
    return Num(Get(JsonOf(run), "iteration_time_s"));
  };
  EXPECT_GT(without_field("ep_comm_overlap"), want * 1.005);  // the all-to-alls not hidden
  EXPECT_LT(without_field("recompute"), want / 1.005);  // the attention core not recomputed

  // A recorded recompute that is not a policy is refused, naming the field.
  Json bad_file = Json::parse(*text);
  bad_file["predicted"]["recompute"] = "sometimes";
  ASSERT_TRUE(WriteStringToFile(old_file, bad_file.dump()).ok());
  CliRun bad = SimulateCli(old_args);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("predicted.recompute"), std::string::npos) << bad.err;

  // --recompute=auto changes nothing, so nothing is recorded.
  args.back() = "--out=" + old_file;
  std::replace(args.begin(), args.end(), std::string("--recompute=selective"),
               std::string("--recompute=auto"));
  ASSERT_EQ(PlanCli(args).code, 0);
  absl::StatusOr<std::string> auto_text = ReadFileToString(old_file);
  ASSERT_TRUE(auto_text.ok()) << auto_text.status();
  EXPECT_FALSE(Get(Json::parse(*auto_text), "predicted").contains("recompute")) << *auto_text;
}

// A deep pipeline is head-bound (Nemotron-H 8B's 131k-token head on one of 32 devices): with
// the output layer split, the plan file carries the S/T passes and re-simulates to the same
// time, and the JSON and the tables say the split is used.
TEST(PlanCommandTest, VocabParallelPlanRoundTripsThroughThePlanFile) {
  const std::vector<std::string> inputs = {"--model=zoo:nemotron-h-8b",
                                           "--cluster=preset:h100-4nodes", "--devices=32",
                                           "--microbatches=32"};
  const std::string file = TmpPath("vocab.plan.json");
  std::vector<std::string> args = inputs;
  for (const char* a : {"--time_budget=4", "--json", "--quiet", "--vocab_parallel=on"}) {
    args.push_back(a);
  }
  args.push_back("--out=" + file);
  CliRun planned = PlanCli(args);
  ASSERT_EQ(planned.code, 0) << planned.err;
  const Json j = JsonOf(planned);
  EXPECT_EQ(Get(Get(j, "vocab_parallel"), "used"), Json(true));
  EXPECT_EQ(Get(Get(j, "plan"), "vocab_parallel"), Json(true));
  // One shard per device, covering Nemotron-H's vocabulary of 131072 (identical devices: equal).
  const Json columns = Get(Get(j, "plan"), "vocab_shard_columns");
  ASSERT_EQ(columns.size(), 32u) << columns;
  for (const Json& c : columns) EXPECT_EQ(c, Json(131072 / 32)) << columns;
  EXPECT_GT(Num(Get(j, "speedup_vs_best_baseline")), 1.3);
  const double want = Num(Get(Get(j, "predicted"), "iteration_time_s"));

  std::vector<std::string> sim_args = inputs;
  sim_args.push_back("--plan=" + file);
  sim_args.push_back("--json");
  CliRun simulated = SimulateCli(sim_args);
  ASSERT_EQ(simulated.code, 0) << simulated.err;
  EXPECT_NEAR(Num(Get(JsonOf(simulated), "iteration_time_s")), want, 1e-9 * want);
  EXPECT_EQ(Get(JsonOf(simulated), "vocab_parallel"), Json(true));
}

TEST(PlanCommandTest, TablesSayWhereTheOutputLayerRuns) {
  CliRun r = PlanCli(Llama4({"--vocab_parallel=off"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("output layer: on the last stage\n"), std::string::npos) << r.out;
}

TEST(PlanCommandTest, TablesNameThePlanAndEveryBaseline) {
  CliRun r = PlanCli(Llama4());
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& name : kBaselines) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " not in:\n" << r.out;
  }
  for (const char* text : {"llama3-8b", "predicted iteration", "speed-up over the best fitting",
                           "search log"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " not in:\n" << r.out;
  }
  EXPECT_TRUE(r.err.empty()) << "--quiet prints no progress: " << r.err;
}

TEST(PlanCommandTest, WithoutDevicesThePlannerChoosesAndReportsTheLayout) {
  // The mixed H100/A100 cluster (32 GPUs) for an 8B model: not one 32-stage pipeline.
  CliRun r = PlanCli({"--model=zoo:nemotron-h-8b", "--cluster=preset:mixed-h100-a100",
                      "--time_budget=3", "--json", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = JsonOf(r);
  const Json& layout = Get(j, "layout");
  const int pp = layout.value("pp", 0), tp = layout.value("tp", 0), dp = layout.value("dp", 0);
  EXPECT_LT(pp, 32);
  EXPECT_EQ(32, pp * tp * dp);
  EXPECT_EQ(32, layout.value("global_microbatches", 0));
  EXPECT_EQ(32 / dp, layout.value("microbatches_per_pipeline", 0));
  ASSERT_FALSE(Get(layout, "pipelines").empty());
  EXPECT_EQ(static_cast<size_t>(pp), Get(Get(layout, "pipelines")[0], "device_gpus").size());
  EXPECT_EQ(pp, Get(j, "plan").value("num_devices", 0));
  EXPECT_FALSE(Get(layout, "considered").empty());
  // As the executor runs it: the gradient all-reduces overlapped with the backward, never
  // slower than after it, and never faster than the slowest pipeline alone.
  const Json& simulated = Get(layout, "simulated");
  const double overlapped = simulated.value("iteration_time_s", 0.0);
  EXPECT_GT(overlapped, 0) << simulated.dump();
  EXPECT_LE(overlapped, layout.value("iteration_time_s", 0.0) * (1 + 1e-9));
  EXPECT_GE(overlapped, simulated.value("pipeline_time_s", 0.0));
  EXPECT_NEAR(overlapped - simulated.value("pipeline_time_s", 0.0),
              simulated.value("dp_sync_exposed_s", -1.0), 1e-9);
}

// A cluster of one executor's ranks (`octopipe profile` writes executor_ranks) is planned like
// any other: the executor runs layouts, so without --devices the layout search chooses; a layout
// flag fixes a degree; --devices asks for one pipeline.
TEST(PlanCommandTest, ExecutorRanksGetTheLayoutSearchUnlessDevicesAsksForOnePipeline) {
  Cluster ranks = SyntheticCluster(4);
  ranks.executor_ranks = true;
  const std::string file = TmpPath("executor-ranks.cluster.json");
  ASSERT_TRUE(WriteClusterFile(file, ranks).ok());
  const std::vector<std::string> base = {"--model=synthetic:layers=8,f=1,b=1,w=1",
                                         "--cluster=" + file, "--microbatches=8",
                                         "--time_budget=0.5", "--json", "--quiet"};
  CliRun chosen = PlanCli(base);
  ASSERT_EQ(chosen.code, 0) << chosen.err;
  const Json c = JsonOf(chosen);
  ASSERT_TRUE(c.contains("layout")) << chosen.out;
  EXPECT_EQ(4, Get(c, "layout").value("gpus", 0));

  std::vector<std::string> with_devices = base;
  with_devices.push_back("--devices=4");
  CliRun one = PlanCli(with_devices);
  ASSERT_EQ(one.code, 0) << one.err;
  const Json j = JsonOf(one);
  EXPECT_FALSE(j.contains("layout")) << one.out;
  EXPECT_EQ(4, Get(j, "plan").value("num_devices", 0));

  std::vector<std::string> with_dp = base;
  with_dp.push_back("--dp=2");
  CliRun layout = PlanCli(with_dp);
  ASSERT_EQ(layout.code, 0) << layout.err;
  const Json l = JsonOf(layout);
  EXPECT_EQ(2, Get(l, "layout").value("dp", 0));
  EXPECT_EQ(2, Get(l, "layout").value("pp", 0) * Get(l, "layout").value("tp", 0));
  EXPECT_EQ(Get(l, "layout").value("pp", 0), Get(l, "plan").value("num_devices", 0));
}

// --recompute=full: every stage recomputes (the free plan of this model recomputes nothing);
// none/selective/auto are accepted; a contradiction or an unknown value exits 2 naming the flag.
TEST(PlanCommandTest, RecomputeFullRecomputesEveryStage) {
  const std::vector<std::string> base = {"--model=synthetic:layers=8,f=1,b=1,w=1",
                                         "--cluster=synthetic:devices=4", "--devices=4",
                                         "--microbatches=8", "--time_budget=0.5", "--json",
                                         "--quiet"};
  auto recomputing = [](const Json& j) {
    int n = 0;
    for (const Json& st : Get(Get(j, "plan"), "partition")) n += st.value("recompute", false) ? 1 : 0;
    return n;
  };
  CliRun free = PlanCli(base);
  ASSERT_EQ(free.code, 0) << free.err;
  EXPECT_EQ(recomputing(JsonOf(free)), 0);
  std::vector<std::string> full = base;
  full.push_back("--recompute=full");
  CliRun r = PlanCli(full);
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = JsonOf(r);
  EXPECT_GT(Get(Get(j, "plan"), "partition").size(), 0u);
  EXPECT_EQ(recomputing(j), static_cast<int>(Get(Get(j, "plan"), "partition").size()));
  for (const char* ok : {"--recompute=none", "--recompute=selective", "--recompute=auto"}) {
    std::vector<std::string> args = base;
    args.push_back(ok);
    CliRun run = PlanCli(args);
    EXPECT_EQ(run.code, 0) << ok << ": " << run.err;
    if (run.code == 0) {
      EXPECT_EQ(recomputing(JsonOf(run)), 0) << ok;
    }
  }
  std::vector<std::string> both = full;
  both.push_back("--no_recompute");
  CliRun contradiction = PlanCli(both);
  EXPECT_EQ(contradiction.code, 2);
  EXPECT_NE(contradiction.err.find("--recompute: full contradicts no_recompute"), std::string::npos)
      << contradiction.err;
  std::vector<std::string> bad = base;
  bad.push_back("--recompute=sometimes");
  CliRun unknown = PlanCli(bad);
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--recompute must be auto, none, selective or full"), std::string::npos)
      << unknown.err;
}

TEST(PlanCommandTest, ConstraintFlagsReachTheTuner) {
  const std::vector<std::string> base = {"--model=synthetic:layers=8,f=1,b=1,w=1",
                                         "--cluster=synthetic:devices=4", "--devices=4",
                                         "--microbatches=8", "--time_budget=2", "--json",
                                         "--quiet"};
  auto kinds = [](const Json& j) {
    std::string all;
    for (const Json& d : Get(Get(j, "plan"), "schedule")) {
      for (const Json& op : d) all += " " + op.get<std::string>();  // " F0.1 BW2.3 W1.0"
    }
    return all;
  };
  CliRun free = PlanCli(base);
  ASSERT_EQ(free.code, 0) << free.err;
  ASSERT_NE(kinds(JsonOf(free)).find(" W"), std::string::npos);  // W ops when allowed
  std::vector<std::string> args = base;
  args.push_back("--no_bw_split");
  args.push_back("--fixed_partition=0-1,2-3,4-5,6-7");
  CliRun r = PlanCli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = JsonOf(r);
  EXPECT_EQ(kinds(j).find(" W"), std::string::npos) << kinds(j);
  const Json& partition = Get(Get(j, "plan"), "partition");
  ASSERT_EQ(4u, partition.size());
  for (int s = 0; s < 4; ++s) EXPECT_EQ(2 * s, partition[s].value("first_layer", -1));
}

// --budget_clock=reads: the budget is counted in the search's clock reads, so a search that
// runs out of it (a layout search of 8 GPUs on a few hundredths of a "second") gives the same
// answer, byte for byte, every time; bad values name the flag.
TEST(PlanCommandTest, ABudgetCountedInReadsGivesTheSameAnswerEveryTime) {
  const std::vector<std::string> args = {
      "--model=zoo:llama3-8b", "--cluster=preset:h100-1node", "--microbatches=32",
      "--time_budget=0.05",    "--budget_clock=reads",        "--json",
      "--quiet"};
  const CliRun first = PlanCli(args);
  ASSERT_EQ(first.code, 0) << first.err;
  const CliRun second = PlanCli(args);
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(first.out, second.out);
  EXPECT_TRUE(Get(JsonOf(first), "layout").is_object());

  std::vector<std::string> bad = args;
  bad.push_back("--budget_clock=fast");
  const CliRun unknown = PlanCli(bad);
  EXPECT_NE(unknown.code, 0);
  EXPECT_NE(unknown.err.find("--budget_clock must be wall or reads, got 'fast'"),
            std::string::npos)
      << unknown.err;
  std::vector<std::string> threaded = args;
  threaded.push_back("--threads=2");
  const CliRun two = PlanCli(threaded);
  EXPECT_NE(two.code, 0);
  EXPECT_NE(two.err.find("--budget_clock=reads needs one evaluation thread"), std::string::npos)
      << two.err;
}

TEST(PlanCommandTest, TraceHasOneComputeEventPerOp) {
  const std::string trace = TmpPath("plan-trace.json");
  CliRun r = PlanCli({"--model=synthetic:layers=8,f=1,b=1,w=1", "--cluster=synthetic:devices=2",
                   "--devices=2", "--microbatches=4", "--time_budget=2", "--json", "--quiet",
                   "--trace=" + trace});
  ASSERT_EQ(r.code, 0) << r.err;
  size_t ops = 0;
  const Json planned = JsonOf(r);
  for (const Json& d : Get(Get(planned, "plan"), "schedule")) ops += d.size();
  std::ifstream in(trace);
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "trace is not JSON";
  size_t compute = 0;
  for (const Json& e : Get(j, "traceEvents")) {
    if (e.value("ph", "") == "X" && e.value("cat", "") != "transfer") ++compute;
  }
  EXPECT_GT(ops, 0u);
  EXPECT_EQ(compute, ops);
}

TEST(PlanCommandTest, HelpListsEveryFlag) {
  CliRun r = PlanCli({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--model", "--cluster", "--devices", "--microbatches", "--time_budget",
                           "--seed", "--threads", "--objective", "--out", "--trace", "--json",
                           "--contention", "--quiet", "--vocab_parallel", "--pp", "--tp", "--ep", "--dp",
                           "--no_bw_split", "--max_stages_per_device", "--no_recompute",
                           "--fixed_partition", "--fixed_placement"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " not in:\n" << r.out;
  }
}

// A layout's micro-batch limit holds per replica: 5000 micro-batches over DP2 are 2500 each.
TEST(PlanCommandTest, TheMicroBatchLimitHoldsPerReplicaOfALayout) {
  CliRun r = PlanCli({"--model=synthetic:layers=4,f=1,b=1,w=1", "--cluster=synthetic:devices=2",
                      "--dp=2", "--microbatches=5000", "--time-budget=0.5", "--quiet"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2500 micro-batches per pipeline (5000 per iteration over 2 replicas)"),
            std::string::npos)
      << r.out;
}

// --ep_overlap: the runtime overlaps MoE all-to-alls with other micro-batches' compute, so an
// EP layout of Mixtral over 4 nodes is predicted faster with it than with the all-to-alls
// inside F and B (the same layout, budget and seed).
TEST(PlanCommandTest, EpOverlapPredictsExpertParallelLayoutsWithTheirAllToAllsOverlapped) {
  auto iteration = [](bool overlap) {
    std::vector<std::string> args = {"--model=zoo:mixtral-8x7b", "--cluster=preset:h100-4nodes",
                                     "--pp=4", "--dp=8", "--ep=8", "--microbatches=64",
                                     "--time-budget=0.5", "--seed=1", "--json", "--quiet"};
    if (overlap) args.push_back("--ep_overlap");
    CliRun r = PlanCli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    const Json j = JsonOf(r);
    return j.contains("layout") ? j["layout"].value("iteration_time_s", 0.0) : 0.0;
  };
  const double inline_comm = iteration(false), overlapped = iteration(true);
  EXPECT_GT(inline_comm, 0);
  EXPECT_GT(overlapped, 0);
  EXPECT_LT(overlapped, inline_comm);
}

TEST(PlanCommandTest, BadFlagsAndValuesExitTwoNamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::string four_layers = "--model=synthetic:layers=4,f=1,b=1,w=1";
  const std::vector<Case> cases = {
      {{"--devcies=4"}, "unknown flag --devcies"},
      {{"--devices=x"}, "--devices: expected an integer, got 'x'"},
      {{"--time_budget=soon"}, "--time_budget: expected a finite number, got 'soon'"},
      {{"--time-budget=soon"}, "--time_budget: expected a finite number, got 'soon'"},  // old spelling
      {{"--json=maybe"}, "--json: expected true or false"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"--microbatches=0"}, "--microbatches must be >= 1, got 0"},
      {{"--devices=0"}, "--devices must be >= 1, got 0"},
      {{"--devices=9"}, "--devices: 9 requested"},  // the preset has 8
      {{four_layers, "--cluster=synthetic:devices=8", "--devices=8"}, "--devices: 8 devices"},
      {{"--time_budget=0"}, "--time_budget must be > 0, got 0"},
      {{"--objective=fastest"}, "--objective must be synchronous or steady-state, got 'fastest'"},
      {{"--threads=-1"}, "--threads must be >= 0 (0: one per core), got -1"},
      // The micro-batch limit holds per pipeline: 5000 over one replica is too many.
      {{four_layers, "--cluster=synthetic:devices=2", "--dp=1", "--microbatches=5000"},
       "--microbatches: 5000 exceeds the limit of 4096"},
      {{"--vocab_parallel=maybe"}, "--vocab_parallel must be auto, on or off, got 'maybe'"},
      {{"--model=zoo:gpt5"}, "--model"},
      {{"--cluster=preset:b200"}, "--cluster: unknown cluster preset 'b200'"},
      {{"--model=/no/such/model.json"}, "--model"},
      {{"--pp=2", "--devices=4"}, "--pp: --devices asks for one pipeline"},
      {{"--pp=3"}, "--pp: 3 does not divide 8 GPUs"},
      {{"--fixed_placement=0,1"}, "--fixed_placement needs --fixed_partition"},
      {{"--fixed_partition=0-x"}, "--fixed_partition: expected FIRST-LAST layer ranges"},
      {{"--max_stages_per_device=-1"}, "--max_stages_per_device must be in [0, 16], got -1"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.push_back("--quiet");
    CliRun r = PlanCli(args);
    EXPECT_EQ(r.code, 2) << c.expect << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos)
        << "expected '" << c.expect << "' in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.expect << ": " << r.out;
  }
}

TEST(PlanCommandTest, InfeasibleModelExitsThreeWithTheMemoryEachDeviceNeeds) {
  // llama3-70b's weights and Adam state alone are ~1.1 TB: two 80 GB H100s cannot hold them.
  const std::vector<std::string> args = {"--model=zoo:llama3-70b", "--devices=2",
                                         "--microbatches=8", "--time_budget=2", "--quiet"};
  CliRun tables = PlanCli(args);
  EXPECT_EQ(tables.code, 3) << tables.err;
  EXPECT_NE(tables.out.find("INFEASIBLE"), std::string::npos) << tables.out;
  EXPECT_NE(tables.out.find("does not fit"), std::string::npos) << tables.out;
  const size_t at = tables.out.find("memory needed per device:");
  ASSERT_NE(at, std::string::npos) << tables.out;
  const std::string line = tables.out.substr(at, tables.out.find('\n', at) - at);
  // "memory needed per device: 585.3 GB 590.1 GB": one figure per device, each over 80 GB.
  std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
  int figures = 0;
  for (size_t i = 1; i < words.size(); ++i) {
    if (words[i] != "GB") continue;
    ++figures;
    EXPECT_GT(std::stod(words[i - 1]), 80.0) << line;
  }
  EXPECT_EQ(figures, 2) << line;

  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  CliRun json = PlanCli(json_args);
  EXPECT_EQ(json.code, 3) << json.err;
  const Json j = JsonOf(json);
  EXPECT_EQ(Get(j, "feasible"), false);
  EXPECT_NE(Get(j, "infeasible_reason").get<std::string>().find("does not fit"),
            std::string::npos);
  ASSERT_EQ(Get(j, "required_memory_bytes").size(), 2u);
  for (const Json& b : Get(j, "required_memory_bytes")) EXPECT_GT(Num(b), 80e9);
  EXPECT_TRUE(Get(j, "speedup_vs_best_baseline").is_null());
}

}  // namespace
}  // namespace octopipe::cli
