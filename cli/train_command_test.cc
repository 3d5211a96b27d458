// `octopipe train --schedule=KIND --profile=PREFIX` runs the very order `octopipe simulate`
// predicts for the profile (the ZB family built for the measured costs), not the unit-cost one.
#include "cli/train_command.h"

#include <cstdlib>
#include <map>
#include <utility>
#include <vector>
#include <sstream>
#include <set>
#include <string>

#include "cli/inputs.h"
#include "cli/jobs_command.h"
#include "cli/plan_command.h"
#include "cli/simulate_command.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/file_io.h"
#include "core/test_dirs.h"
#include "executor/host_probe.h"
#include "executor/model_spec.h"
#include "gtest/gtest.h"
#include "tuner/layout_simulation.h"
#include "nlohmann/json.hpp"
#include "calibration/layer_calibration.h"
#include "planner_service/server.h"
#include "simulator/classic_pipeline.h"
#include "simulator/problem_builder.h"

namespace octopipe::cli {
namespace {

using ::octopipe::testing::TestPath;

constexpr char kSpec[] =
    "ref:pattern=M*E-M*,hidden=16,heads=2,ffn=32,experts=4,top_k=2,moe_ffn=16,state=4,seq=8,"
    "vocab=32,microbatches=6";

// A measured profile of kSpec's layers whose later layers are much slower (B and W too), so a
// cost-aware ZB order differs from the unit-cost one.
ModelGraph SkewedProfile(const ModelGraph& graph) {
  ModelGraph m = graph;
  for (int l = 0; l < m.num_layers(); ++l) {
    MeasuredCosts& x = m.layers[l].measured;
    const double t = l < m.num_layers() / 2 ? 1e-3 : 6e-3;
    x.forward_s = t;
    x.backward_input_s = 1.5 * t;
    x.weight_grad_s = 2.5 * t;
    x.recompute_s = t;
    x.activation_bytes = 1000;
    x.activation_bytes_w = 400;
    x.input_bytes = x.output_bytes = 512;
    x.param_bytes = 100;
  }
  return m;
}

Cluster MeasuredCluster() {
  Cluster c;
  c.name = "measured";
  c.hardware.push_back(HardwareSpec{"cpu", 1e10, 1e9, 1e10, /*op_overhead_s=*/1e-4});
  c.nodes.push_back(Node{"n", "cpu", 2, LinkSpec{1e8, 2e-4}});
  c.inter_node_link = LinkSpec{1e8, 2e-4};
  return c;
}

TEST(TrainCommandTest, ScheduleWithAProfileRunsTheOrderSimulatePredicts) {
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelGraph graph = executor::ToModelGraph(*spec);
  const std::string prefix = TestPath("skewed");
  const ModelGraph profile = SkewedProfile(graph);
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json", profile).ok());
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", MeasuredCluster()).ok());
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZbV}) {
    SCOPED_TRACE(ScheduleKindName(kind));
    absl::StatusOr<Plan> ran = TrainClassicPlan(kind, 2, 0, 6, graph, prefix);
    ASSERT_TRUE(ran.ok()) << ran.status();
    ClassicRequest req;
    req.kind = kind;
    req.devices = 2;
    req.microbatches = 6;
    absl::StatusOr<ClassicRun> predicted =
        SimulateClassic(profile, MeasuredCluster(), CostModel(), req);
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    EXPECT_EQ(ran->schedule.ops, predicted->plan.schedule.ops);
    EXPECT_EQ(ran->stages.size(), predicted->plan.stages.size());
  }
  // The unit-cost order is another one here: the profile matters.
  absl::StatusOr<Plan> unit = TrainClassicPlan(ScheduleKind::kZbH1, 2, 0, 6, graph, "");
  absl::StatusOr<Plan> costed = TrainClassicPlan(ScheduleKind::kZbH1, 2, 0, 6, graph, prefix);
  ASSERT_TRUE(unit.ok() && costed.ok());
  EXPECT_NE(unit->schedule.ops, costed->schedule.ops);

  // And the executor runs it; the run calibrates the profile: the tiny model's layers take
  // microseconds, not the profile's milliseconds, so every calibrated time shrinks.
  std::ostringstream out, err;
  const std::string calibrated = prefix + ".calibrated.model.json";
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=zb-h1", "--profile=" + prefix,
                      "--ranks=2", "--transport=inproc", "--iterations=2", "--json",
                      "--calibrated_model=" + calibrated},
                     out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("\"calibration\""), std::string::npos) << out.str();
  absl::StatusOr<ModelGraph> cal = LoadModelFile(calibrated);
  ASSERT_TRUE(cal.ok()) << cal.status();
  ASSERT_EQ(cal->num_layers(), profile.num_layers());
  for (int l = 0; l < cal->num_layers(); ++l) {
    const MeasuredCosts& c = cal->layers[l].measured;
    const MeasuredCosts& p = profile.layers[l].measured;
    EXPECT_GT(*c.forward_s, 0) << l;
    EXPECT_LT(*c.forward_s, *p.forward_s) << l;
    // One factor per layer: the profile's ratios between a layer's kinds are kept.
    EXPECT_NEAR(*c.weight_grad_s / *c.forward_s, *p.weight_grad_s / *p.forward_s, 1e-9) << l;
  }
  std::ostringstream out2, err2;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--calibrated_model=" + calibrated,
                      "--transport=inproc"},
                     out2, err2),
            2);
  EXPECT_NE(err2.str().find("--calibrated_model needs --profile"), std::string::npos)
      << err2.str();
}

TEST(TrainCommandTest, AProfileOfAnotherModelIsRefusedNamingTheFlag) {
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok());
  ModelGraph graph = executor::ToModelGraph(*spec);
  const std::string prefix = TestPath("other");
  ModelGraph other = SkewedProfile(graph);
  other.layers.pop_back();
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json", other).ok());
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", MeasuredCluster()).ok());
  std::ostringstream out, err;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=zb-h1", "--profile=" + prefix,
                      "--ranks=2", "--transport=inproc", "--iterations=1"},
                     out, err),
            2);
  EXPECT_NE(err.str().find("--profile: "), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("layers but --model has"), std::string::npos) << err.str();
}

// A plan that splits the vocabulary layers (`octopipe plan --vocab_parallel=on`, planned for
// the same layers with a heavy head so the split pays: tens of microseconds per micro-batch,
// against the split embedding's reduce and broadcast of a few each) runs: every rank trains its
// shards, the loss comes from the last stage's rank, and the simulator predicts the run from
// the measured S and T passes too. (The search converges long before its budget here; the
// budget is generous so a loaded machine finds the same plan.)
TEST(TrainCommandTest, RunsAVocabParallelPlanFromThePlanCommand) {
  const std::string file = TestPath("vocab.plan.json");
  std::ostringstream plan_out, plan_err;
  ASSERT_EQ(RunPlan({"--model=ref:pattern=M*E-M*,hidden=2048,heads=2,ffn=32,experts=4,top_k=2,"
                     "moe_ffn=16,state=4,seq=8,vocab=262144,microbatches=6",
                     "--devices=2", "--vocab_parallel=on", "--time_budget=30", "--quiet",
                     "--out=" + file},
                    plan_out, plan_err),
            0)
      << plan_err.str();
  absl::StatusOr<Plan> plan = LoadPlanFile(file);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->vocab_parallel) << plan_out.str();
  // Its shards are the heavy head's 65536 columns: scaled to kSpec's vocabulary by the same
  // rule, or the run refuses the plan (the columns must sum to the model's vocabulary).
  ASSERT_EQ(plan->vocab_shard_columns.size(), 2u);
  plan->vocab_shard_columns = VocabShardColumns(
      32, std::vector<double>(plan->vocab_shard_columns.begin(), plan->vocab_shard_columns.end()));
  ASSERT_TRUE(WritePlanFile(file, *plan).ok());
  // With a profile of kSpec's layers the run also calibrates it (--calibrated_model).
  const ModelGraph graph = executor::ToModelGraph(*executor::ParseModelSpec(kSpec));
  const std::string prefix = TestPath("vocab-profile");
  const ModelGraph profile = SkewedProfile(graph);
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json", profile).ok());
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", MeasuredCluster()).ok());
  const std::string calibrated = prefix + ".calibrated.model.json";
  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + file, "--ranks=2",
                      "--transport=inproc", "--iterations=2", "--json", "--profile=" + prefix,
                      "--calibrated_model=" + calibrated},
                     out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("\"loss\""), std::string::npos) << out.str();
  // A plan file's run names the plan's schedule (not the file) and the file.
  EXPECT_EQ(nlohmann::json::parse(out.str()).at("schedule"), plan->schedule_name) << out.str();
  EXPECT_FALSE(plan->schedule_name.empty());
  EXPECT_EQ(nlohmann::json::parse(out.str()).at("plan"), file) << out.str();
  // The S and T passes of both shards were measured.
  for (const char* pass : {"[0,\"S\"", "[1,\"S\"", "[0,\"T\"", "[1,\"T\""}) {
    EXPECT_NE(out.str().find(pass), std::string::npos) << pass << " in " << out.str();
  }
  // The split head is calibrated by its S and T passes (not by its layer times, which time only
  // its norm): factor = sum(measured x samples) / sum(predicted x samples) over both shards,
  // the profile predicting S = (F + B) / 2 + the op overhead and T = W / 2 + the overhead.
  const nlohmann::json result = nlohmann::json::parse(out.str());
  const MeasuredCosts& head = profile.layers.back().measured;
  const double overhead = MeasuredCluster().hardware[0].op_overhead_s;
  double measured = 0, predicted = 0;
  int passes = 0;
  for (const nlohmann::json& e : result.at("stage_op_s")) {
    const std::string kind = e.at(1).get<std::string>();
    if (kind != "S" && kind != "T") continue;
    const double n = e.at(3).get<double>();
    measured += e.at(2).get<double>() * n;
    predicted += ((kind == "S" ? *head.forward_s + *head.backward_input_s : *head.weight_grad_s) /
                      2 + overhead) * n;
    ++passes;
  }
  ASSERT_EQ(passes, 4) << out.str();
  absl::StatusOr<ModelGraph> cal = LoadModelFile(calibrated);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_NEAR(*cal->layers.back().measured.forward_s / *head.forward_s, measured / predicted,
              1e-9 * measured / predicted);
}

// Plans kSpec over 2 devices with `flag` into `file`, trains that plan for one iteration and
// returns train's stderr (both commands must succeed).
std::string TrainAPlanMadeWith(const std::string& flag, const std::string& file) {
  std::ostringstream plan_out, plan_err;
  EXPECT_EQ(RunPlan({std::string("--model=") + kSpec, "--devices=2", flag, "--time_budget=1",
                     "--quiet", "--out=" + file},
                    plan_out, plan_err),
            0)
      << plan_err.str();
  std::ostringstream out, err;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + file, "--ranks=2",
                      "--transport=inproc", "--iterations=1", "--json"},
                     out, err),
            0)
      << err.str();
  return err.str();
}

// A plan made with --ep_overlap runs (the executor runs its all-to-alls in line), and train says
// what to compare its times with.
TEST(TrainCommandTest, APlanMadeWithEpOverlapSaysTheExecutorRunsItsAllToAllsInLine) {
  const std::string file = TestPath("ep-overlap.plan.json");
  const std::string err = TrainAPlanMadeWith("--ep_overlap", file);
  EXPECT_NE(err.find("the plan was made with --ep_overlap"), std::string::npos) << err;
  EXPECT_NE(err.find("octopipe simulate --plan=" + file + " --ep_overlap=false"),
            std::string::npos)
      << err;
}

// A plan made with selective recompute runs, and the run says what the executor does instead.
TEST(TrainCommandTest, APlanMadeWithSelectiveRecomputeSaysTheExecutorKeepsEveryActivation) {
  const std::string err =
      TrainAPlanMadeWith("--recompute=selective", TestPath("selective.plan.json"));
  EXPECT_NE(err.find("the plan was made with --recompute=selective"), std::string::npos) << err;
}

// A --plan that cannot be read, or is not a plan, is refused before anything runs, naming the
// flag and the file (exit 2: bad usage).
TEST(TrainCommandTest, AMissingOrBadPlanFileIsRefusedNamingTheFlag) {
  const std::string missing = TestPath("no-such.plan.json");
  const std::string bad = TestPath("bad.plan.json");
  ASSERT_TRUE(WriteStringToFile(bad, "{\"stages\": \"not a list\"}").ok());
  for (const std::string& file : {missing, bad}) {
    std::ostringstream out, err;
    EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + file, "--ranks=2",
                        "--transport=inproc", "--iterations=1"},
                       out, err),
              2);
    EXPECT_NE(err.str().find("--plan"), std::string::npos) << err.str();
    EXPECT_NE(err.str().find(file), std::string::npos) << err.str();
    EXPECT_EQ(out.str().find("loss"), std::string::npos) << out.str();
  }
}

// A plan file and a planner job are one or the other: refused before the planner is called
// (nothing listens at the address; a connection's failure would say so instead), naming both.
TEST(TrainCommandTest, PlanAndJobTogetherAreRefusedBeforeConnecting) {
  const std::string file = TestPath("either.plan.json");
  std::ostringstream out, err;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + file, "--job=job-1",
                      "--planner=127.0.0.1:1", "--ranks=2"},
                     out, err),
            2);
  EXPECT_NE(err.str().find("--plan and --job both given (--plan=" + file + ", --job=job-1)"),
            std::string::npos)
      << err.str();
}

// --trace writes the last iteration as the simulator's Chrome trace writes a prediction: one
// complete event per op of each rank's schedule, in order, not overlapping on a rank, all on
// one time axis that starts at 0.
TEST(TrainCommandTest, TraceWritesTheMeasuredTimelineOfEveryRank) {
  const std::string trace = TestPath("measured.trace.json");
  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=zb-h1", "--ranks=2",
                      "--iterations=2", "--transport=inproc", "--trace=" + trace},
                     out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("measured timeline written to"), std::string::npos) << out.str();
  absl::StatusOr<std::string> text = ReadFileToString(trace);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json doc = nlohmann::json::parse(*text);
  std::map<int, std::vector<std::pair<double, double>>> by_rank;  // tid -> (ts, end)
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    EXPECT_GE(dur, 0);
    by_rank[e.at("tid").get<int>()].push_back({ts, ts + dur});
  }
  ASSERT_EQ(by_rank.size(), 2u);  // compute lanes of ranks 0 and 1 (no transfer events)
  absl::StatusOr<Plan> plan =
      TrainClassicPlan(ScheduleKind::kZbH1, 2, 0, 6,
                       executor::ToModelGraph(*executor::ParseModelSpec(kSpec)), "");
  ASSERT_TRUE(plan.ok()) << plan.status();
  double earliest = 1e300;
  for (const auto& [tid, spans] : by_rank) {
    EXPECT_EQ(spans.size(), plan->schedule.ops[tid / 2].size()) << "rank " << tid / 2;
    for (size_t k = 1; k < spans.size(); ++k) {
      EXPECT_LE(spans[k - 1].second, spans[k].first + 1e-3) << "rank " << tid / 2 << " op " << k;
    }
    earliest = std::min(earliest, spans.front().first);
  }
  EXPECT_GE(earliest, 0);
  EXPECT_LT(earliest, 1e6);  // microseconds: within a second of the iteration's start
}

// --report: one HTML page with the last iteration's measured timeline (every op of every rank)
// and the prediction from the measured op times on the same axis; an unwritable path is
// refused before the run, naming the flag.
TEST(TrainCommandTest, ReportShowsTheMeasuredTimelineBesideThePrediction) {
  const std::string page = TestPath("train-report.html");
  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=zb-h1", "--ranks=2",
                      "--iterations=2", "--transport=inproc", "--report=" + page},
                     out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("report written to"), std::string::npos) << out.str();
  absl::StatusOr<std::string> html = ReadFileToString(page);
  ASSERT_TRUE(html.ok()) << html.status();
  absl::StatusOr<Plan> plan =
      TrainClassicPlan(ScheduleKind::kZbH1, 2, 0, 6,
                       executor::ToModelGraph(*executor::ParseModelSpec(kSpec)), "");
  ASSERT_TRUE(plan.ok()) << plan.status();
  const size_t ops = plan->schedule.ops[0].size() + plan->schedule.ops[1].size();
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = html->find(needle); at != std::string::npos; at = html->find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("data-timeline=\"plan\""), 1u);
  EXPECT_EQ(count("data-timeline=\"baseline\""), 1u);
  EXPECT_EQ(count("class=\"op\""), 2 * ops);  // measured and predicted
  EXPECT_NE(html->find("octopipe train"), std::string::npos);
  EXPECT_EQ(count("class=\"mem-bar\""), 2u);  // one per rank

  std::ostringstream out2, err2;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--ranks=2", "--transport=inproc",
                      "--report=/no/such/dir/page.html"},
                     out2, err2),
            2);
  EXPECT_NE(err2.str().find("--report: cannot write '/no/such/dir/page.html'"),
            std::string::npos)
      << err2.str();
}

// `--job` runs the planner job's current plan: the output names that plan's schedule (its
// schedule_name, "octopipe" or "baseline:...") and version, not the --schedule default.
TEST(TrainCommandTest, AJobRunPrintsTheScheduleOfTheJobsPlan) {
  planner::PlannerServerOptions options;
  options.port = 0;
  options.metrics_port = -1;
  options.state_dir = TestPath("job-state");
  // The runs' reports (against a synthetic cluster's tiny predictions) never re-plan: both runs
  // below run version 1.
  options.replan.start_deviation = 1e12;
  planner::PlannerServer server(options);
  ASSERT_TRUE(server.Start().ok());
  const std::string at = "--planner=127.0.0.1:" + std::to_string(server.port());
  std::ostringstream created, err;
  ASSERT_EQ(RunJobs({"create", at, std::string("--model=") + kSpec, "--cluster=synthetic:devices=2",
                     "--time_budget=1", "--json"},
                    created, err),
            0)
      << err.str();
  const std::string id = nlohmann::json::parse(created.str()).at("id").get<std::string>();
  std::ostringstream watched, got;
  ASSERT_EQ(RunJobs({"watch", at, "--job=" + id, "--count=1"}, watched, err), 0) << err.str();
  ASSERT_EQ(RunJobs({"get", at, "--job=" + id, "--json"}, got, err), 0) << err.str();
  const nlohmann::json job = nlohmann::json::parse(got.str());
  const std::string schedule_name =
      job.at("current").at("result").at("plan").at("schedule_name").get<std::string>();
  ASSERT_FALSE(schedule_name.empty()) << got.str();

  for (const bool json : {true, false}) {
    std::ostringstream out;
    std::vector<std::string> args = {at, "--job=" + id, std::string("--model=") + kSpec,
                                     "--transport=inproc", "--iterations=1"};
    if (json) args.push_back("--json");
    ASSERT_EQ(RunTrain(args, out, err), 0) << err.str();
    if (json) {
      const nlohmann::json result = nlohmann::json::parse(out.str());
      EXPECT_EQ(result.at("schedule"), schedule_name) << out.str();
      EXPECT_EQ(result.at("job"), id);
      EXPECT_EQ(result.at("plan_version"), 1);
      EXPECT_EQ(result.at("ranks"), 2);
    } else {
      EXPECT_NE(out.str().find("schedule " + schedule_name + ", "), std::string::npos)
          << out.str();
    }
  }
  server.Shutdown();
}

// Without --job the output names the --schedule kind run.
TEST(TrainCommandTest, AScheduleRunPrintsItsSchedule) {
  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=gpipe", "--ranks=2",
                      "--transport=inproc", "--iterations=1", "--json"},
                     out, err),
            0)
      << err.str();
  EXPECT_EQ(nlohmann::json::parse(out.str()).at("schedule"), "gpipe");
  EXPECT_FALSE(nlohmann::json::parse(out.str()).contains("job"));
}

}  // namespace
}  // namespace octopipe::cli

namespace octopipe::cli {
namespace {

// Core rotation moves the computing threads between CPUs; it changes where ops run, never what
// they compute: the losses equal a run without it, bit for bit. A negative period is refused.
TEST(TrainCommandTest, RotatingCoresTrainsTheSameModel) {
  auto losses = [](const std::string& rotate) {
    std::ostringstream out, err;
    EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=1f1b", "--ranks=2",
                        "--transport=gloo", "--iterations=2", "--json",
                        "--rotate_cores_ms=" + rotate},
                       out, err),
              0)
        << err.str();
    return nlohmann::json::parse(out.str()).at("loss").get<std::vector<double>>();
  };
  const std::vector<double> still = losses("0");
  ASSERT_EQ(still.size(), 2u);
  EXPECT_EQ(losses("1"), still);

  std::ostringstream out, err;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--rotate_cores_ms=-5"}, out, err), 2);
  EXPECT_NE(err.str().find("--rotate_cores_ms must be >= 0 (0 = off), got -5"),
            std::string::npos)
      << err.str();
}

}  // namespace
}  // namespace octopipe::cli

namespace octopipe::cli {
namespace {

// The profile at a host `ratio` times slower: every measured layer time and the per-op and
// per-message CPU costs scaled (what --host_probe predicts with).
ModelGraph ScaledProfile(const ModelGraph& profile, double ratio, Cluster* cluster) {
  ModelGraph scaled = profile;
  for (Layer& l : scaled.layers) {
    for (std::optional<double>* t : {&l.measured.forward_s, &l.measured.backward_input_s,
                                     &l.measured.weight_grad_s, &l.measured.recompute_s}) {
      **t *= ratio;
    }
  }
  cluster->hardware[0].op_overhead_s *= ratio;
  cluster->hardware[0].message_cpu_s *= ratio;
  return scaled;
}

// --host_probe: every rank times the probe before its first iteration; against the profile's
// probe that is the host's speed now, and the plan's prediction from the profile is repeated
// with every layer (and per-op and per-message CPU cost) scaled by it.
TEST(TrainCommandTest, HostProbeComparesWithTheProfileAndPredictsAtTheHostsSpeed) {
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelGraph graph = executor::ToModelGraph(*spec);
  const std::string prefix = TestPath("probed");
  ModelGraph profile = SkewedProfile(graph);
  profile.host_probe_s = 0.02;
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json", profile).ok());
  Cluster cluster = MeasuredCluster();
  cluster.hardware[0].message_cpu_s = 3e-5;
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", cluster).ok());

  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=1f1b", "--profile=" + prefix,
                      "--host_probe=3", "--ranks=2", "--transport=inproc", "--iterations=1",
                      "--json"},
                     out, err),
            0)
      << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  const std::vector<double> probes = j.at("host_probe_s").get<std::vector<double>>();
  ASSERT_EQ(probes.size(), 2u);
  for (double p : probes) EXPECT_GT(p, 0);
  const double ratio = (probes[0] + probes[1]) / 2 / 0.02;  // the median of two
  EXPECT_DOUBLE_EQ(j.at("profile_host_probe_s").get<double>(), 0.02);
  EXPECT_NEAR(j.at("host_time_vs_profile").get<double>(), ratio, 1e-12 * ratio);

  ClassicRequest req;
  req.kind = ScheduleKind::k1F1B;
  req.devices = 2;
  req.microbatches = 6;
  absl::StatusOr<ClassicRun> as_profiled = SimulateClassic(profile, cluster, CostModel(), req);
  ASSERT_TRUE(as_profiled.ok()) << as_profiled.status();
  // Compared with a run's iterations, which follow each other without a barrier: the period.
  EXPECT_NEAR(j.at("predicted_from_profile_s").get<double>(),
              as_profiled->result.steady_state_iteration_time_s, 1e-12);
  // The same prediction with every time of the profile scaled by the measured ratio.
  const ModelGraph scaled = ScaledProfile(profile, ratio, &cluster);
  absl::StatusOr<ClassicRun> at_speed = SimulateClassic(scaled, cluster, CostModel(), req);
  ASSERT_TRUE(at_speed.ok()) << at_speed.status();
  EXPECT_NEAR(j.at("predicted_at_host_speed_s").get<double>(),
              at_speed->result.steady_state_iteration_time_s,
              1e-9 * at_speed->result.steady_state_iteration_time_s);
  EXPECT_NE(at_speed->result.steady_state_iteration_time_s,
            as_profiled->result.steady_state_iteration_time_s);

  // Without --profile the probes are reported alone.
  std::ostringstream out2, err2;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=1f1b", "--host_probe=1",
                      "--ranks=2", "--transport=inproc", "--iterations=1"},
                     out2, err2),
            0)
      << err2.str();
  EXPECT_NE(out2.str().find("host-speed probe "), std::string::npos) << out2.str();
  EXPECT_EQ(out2.str().find("the profile's"), std::string::npos) << out2.str();
}

// A calibration run calibrates at its own host speed: FitMeasuredTimes' factor for each layer
// as it is (the run's probe, a fraction of a second, is not used), and the calibrated model's
// host-speed reference is its own probe workload, as a profile's is.
TEST(TrainCommandTest, CalibrationIsAtTheRunsHostSpeedWithItsOwnReference) {
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelGraph graph = executor::ToModelGraph(*spec);
  const std::string prefix = TestPath("probed-cal");
  ModelGraph profile = SkewedProfile(graph);
  profile.host_probe_s = 0.02;
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json", profile).ok());
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", MeasuredCluster()).ok());
  const std::string calibrated = prefix + ".calibrated.model.json";
  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=1f1b", "--profile=" + prefix,
                      "--host_probe=2", "--ranks=2", "--transport=inproc", "--iterations=2",
                      "--json", "--calibrated_model=" + calibrated},
                     out, err),
            0)
      << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_GT(j.at("host_time_vs_profile").get<double>(), 0);
  EXPECT_NE(j.at("calibration").get<std::string>().find("at this run's host speed (host-speed "
                                                        "reference "),
            std::string::npos)
      << j.at("calibration");
  // The fit of the run's own measurements, as the command made it.
  absl::StatusOr<Plan> plan = TrainClassicPlan(ScheduleKind::k1F1B, 2, 0, 6, graph, prefix);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<ProblemBuilder> builder =
      ProblemBuilder::Create(profile, MeasuredCluster(), CostModel(), 2, {}, false);
  ASSERT_TRUE(builder.ok()) << builder.status();
  std::vector<MeasuredStageTime> stages;
  for (const auto& t : j.at("stage_op_s")) {
    absl::StatusOr<OpKind> k = ParseOpKind(t.at(1).get<std::string>());
    ASSERT_TRUE(k.ok());
    stages.push_back({t.at(0).get<int>(), *k, t.at(2).get<double>(), t.at(3).get<int64_t>()});
  }
  std::vector<MeasuredLayerTime> layers;
  for (const auto& t : j.at("layer_op_s")) {
    absl::StatusOr<OpKind> k = ParseOpKind(t.at(1).get<std::string>());
    ASSERT_TRUE(k.ok());
    layers.push_back({t.at(0).get<int>(), *k, t.at(2).get<double>(), t.at(3).get<int64_t>()});
  }
  absl::StatusOr<CalibrationUpdate> fit =
      FitMeasuredTimes(*builder, *plan, stages, layers, {});
  ASSERT_TRUE(fit.ok()) << fit.status();
  absl::StatusOr<ModelGraph> cal = LoadModelFile(calibrated);
  ASSERT_TRUE(cal.ok()) << cal.status();
  EXPECT_DOUBLE_EQ(cal->host_probe_s, executor::ProbeWorkloadSeconds(*cal));
  EXPECT_GT(cal->host_probe_s, 0);
  for (int l = 0; l < graph.num_layers(); ++l) {
    SCOPED_TRACE(l);
    const double got = *cal->layers[l].measured.forward_s / *profile.layers[l].measured.forward_s;
    EXPECT_NEAR(got, fit->factors[l], 1e-9 * got);
  }
}

// By default (--host_probe=-1) a run with a --profile that has a host-speed reference probes the
// host 9 times and predicts at its speed; one without a reference (or without --profile) does not.
TEST(TrainCommandTest, HostProbeIsOnByDefaultWithAProfileThatHasAReference) {
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const ModelGraph graph = executor::ToModelGraph(*spec);
  const std::string with = TestPath("auto-probe"), without = TestPath("auto-no-probe");
  ModelGraph profile = SkewedProfile(graph);
  ASSERT_TRUE(WriteModelFile(without + ".model.json", profile).ok());
  ASSERT_TRUE(WriteClusterFile(without + ".cluster.json", MeasuredCluster()).ok());
  profile.host_probe_s = 0.02;
  ASSERT_TRUE(WriteModelFile(with + ".model.json", profile).ok());
  ASSERT_TRUE(WriteClusterFile(with + ".cluster.json", MeasuredCluster()).ok());
  for (const std::string& prefix : {with, without}) {
    SCOPED_TRACE(prefix);
    std::ostringstream out, err;
    ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--schedule=1f1b", "--profile=" + prefix,
                        "--ranks=2", "--transport=inproc", "--iterations=1", "--json"},
                       out, err),
              0)
        << err.str();
    const nlohmann::json j = nlohmann::json::parse(out.str());
    if (prefix == with) {
      ASSERT_TRUE(j.contains("host_probe_s")) << out.str();
      EXPECT_EQ(j.at("host_probe_s").size(), 2u);
      EXPECT_GT(j.at("predicted_at_host_speed_s").get<double>(), 0);
    } else {
      EXPECT_FALSE(j.contains("host_probe_s")) << out.str();
    }
  }
}

TEST(TrainCommandTest, HostProbeNeedsAProbedProfileAndACount) {
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string prefix = TestPath("unprobed");
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json",
                             SkewedProfile(executor::ToModelGraph(*spec))).ok());
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", MeasuredCluster()).ok());
  std::ostringstream out, err;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--profile=" + prefix, "--host_probe=2",
                      "--transport=inproc"},
                     out, err),
            2);
  EXPECT_NE(err.str().find("--host_probe: " + prefix + ".model.json has no host_probe_s"),
            std::string::npos)
      << err.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--host_probe=-2"}, out2, err2), 2);
  EXPECT_NE(err2.str().find("--host_probe must be >= 0 (0 = off) or -1 (auto), got -2"),
            std::string::npos)
      << err2.str();
}

}  // namespace
}  // namespace octopipe::cli

namespace octopipe::cli {
namespace {

// `octopipe plan` chooses a layout over 2 devices (DP2 here: the model is small) and writes the
// whole layout; `train --plan` runs it on as many ranks and refuses another count, naming it.
TEST(TrainCommandTest, RunsALayoutPlanFromThePlanCommand) {
  const std::string file = TestPath("layout.plan.json");
  const std::string model = "--model=ref:pattern=M*-E,hidden=16,heads=2,ffn=24,experts=4,top_k=2,"
                            "moe_ffn=12,state=4,seq=8,vocab=32,microbatches=4";
  std::ostringstream plan_out, plan_err;
  ASSERT_EQ(RunPlan({model, "--cluster=synthetic:devices=2", "--dp=2", "--time_budget=2",
                     "--quiet", "--out=" + file},
                    plan_out, plan_err),
            0)
      << plan_err.str();
  absl::StatusOr<LayoutPlan> layout = LoadLayoutPlanFile(file);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->layout.dp, 2);
  EXPECT_EQ(layout->num_ranks, 2);
  EXPECT_EQ(layout->global_microbatches, 4);
  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({model, "--plan=" + file, "--ranks=2", "--transport=inproc",
                      "--iterations=2", "--json"},
                     out, err),
            0)
      << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j.at("layout"), layout->layout.ToString());
  EXPECT_EQ(j.at("loss").size(), 2u);
  EXPECT_GT(j.at("measured_tokens_per_s").get<double>(), 0);
  EXPECT_GT(j.at("predicted_iteration_time_s").get<double>(), 0);
  // Each rank's gradient all-reduces (DP2: every layer is all-reduced), of which what it waited
  // for after its ops, against the plan's exposed synchronisation; and every layer's op times.
  ASSERT_EQ(j.at("grad_sync_s").size(), 2u);
  ASSERT_EQ(j.at("grad_sync_wait_s").size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(j.at("grad_sync_s")[r].get<double>(), 0) << r;
    EXPECT_GE(j.at("grad_sync_wait_s")[r].get<double>(), 0) << r;
  }
  EXPECT_TRUE(j.contains("predicted_dp_sync_exposed_s"));
  EXPECT_FALSE(j.contains("stage_op_s"));
  std::set<int> layers;
  for (const nlohmann::json& row : j.at("layer_op_s")) layers.insert(row.at(0).get<int>());
  EXPECT_EQ(layers.size(), 6u);  // embedding, M, *, -, E, head

  // simulate --plan predicts the layout as the plan command did.
  std::ostringstream sim_out, sim_err;
  ASSERT_EQ(RunSimulate({model, "--cluster=synthetic:devices=2", "--plan=" + file, "--json"},
                        sim_out, sim_err),
            0)
      << sim_err.str();
  const nlohmann::json sim = nlohmann::json::parse(sim_out.str());
  EXPECT_NEAR(sim.at("iteration_time_s").get<double>(),
              j.at("predicted_iteration_time_s").get<double>(),
              1e-9 * j.at("predicted_iteration_time_s").get<double>())
      << sim_out.str();
  EXPECT_EQ(sim.at("pipelines"), 1);

  std::ostringstream out1, err1;
  EXPECT_EQ(RunTrain({model, "--plan=" + file, "--ranks=1", "--transport=inproc"}, out1, err1),
            2);
  EXPECT_NE(err1.str().find("--ranks=2"), std::string::npos) << err1.str();
}

// --host_probe on a layout: the ranks probe, and the layout is predicted from the profile as
// measured and at the host's speed now (SimulateLayout of the profile, every layer time and
// per-op and per-message CPU cost scaled by the probes' ratio).
TEST(TrainCommandTest, HostProbeOnALayoutPredictsItAtTheHostsSpeed) {
  const std::string file = TestPath("probed-layout.plan.json");
  std::ostringstream plan_out, plan_err;
  ASSERT_EQ(RunPlan({std::string("--model=") + kSpec, "--cluster=synthetic:devices=2", "--dp=2",
                     "--time_budget=1", "--quiet", "--out=" + file},
                    plan_out, plan_err),
            0)
      << plan_err.str();
  absl::StatusOr<LayoutPlan> layout = LoadLayoutPlanFile(file);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_FALSE(layout->single_pipeline());
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(kSpec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string prefix = TestPath("probed-layout");
  ModelGraph profile = SkewedProfile(executor::ToModelGraph(*spec));
  profile.host_probe_s = 0.02;
  ASSERT_TRUE(WriteModelFile(prefix + ".model.json", profile).ok());
  Cluster cluster = MeasuredCluster();
  cluster.hardware[0].message_cpu_s = 3e-5;
  ASSERT_TRUE(WriteClusterFile(prefix + ".cluster.json", cluster).ok());

  std::ostringstream out, err;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + file, "--profile=" + prefix,
                      "--host_probe=2", "--ranks=2", "--transport=inproc", "--iterations=1",
                      "--json"},
                     out, err),
            0)
      << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  const std::vector<double> probes = j.at("host_probe_s").get<std::vector<double>>();
  ASSERT_EQ(probes.size(), 2u);
  const double ratio = (probes[0] + probes[1]) / 2 / 0.02;
  EXPECT_NEAR(j.at("host_time_vs_profile").get<double>(), ratio, 1e-12 * ratio);
  absl::StatusOr<LayoutSimulation> as_profiled =
      SimulateLayout(profile, cluster, CostModel(), *layout);
  ASSERT_TRUE(as_profiled.ok()) << as_profiled.status();
  EXPECT_NEAR(j.at("predicted_from_profile_s").get<double>(), as_profiled->iteration_time_s,
              1e-12);
  const ModelGraph scaled = ScaledProfile(profile, ratio, &cluster);
  absl::StatusOr<LayoutSimulation> at_speed = SimulateLayout(scaled, cluster, CostModel(), *layout);
  ASSERT_TRUE(at_speed.ok()) << at_speed.status();
  EXPECT_NEAR(j.at("predicted_at_host_speed_s").get<double>(), at_speed->iteration_time_s,
              1e-9 * at_speed->iteration_time_s);
  EXPECT_NE(at_speed->iteration_time_s, as_profiled->iteration_time_s);
  EXPECT_TRUE(j.contains("prediction_error_at_host_speed"));
}

}  // namespace
}  // namespace octopipe::cli
