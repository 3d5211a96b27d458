// `octopipe profile` end to end (two ranks as threads over the in-process transport, so the
// test is fast): the profile's files are a valid measured model and cluster, `plan` accepts
// them and `train` runs the resulting plan; bad models and bad profiles are refused clearly.
#include "cli/profile_command.h"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "cli/plan_command.h"
#include "cli/simulate_command.h"
#include "cli/table.h"
#include "cli/train_command.h"
#include "core/convert.h"
#include "core/json_text.h"
#include "core/test_dirs.h"
#include "executor/host_probe.h"
#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"

namespace octopipe::cli {
namespace {

using ::octopipe::testing::TestPath;

constexpr char kSpec[] =
    "ref:pattern=M*E-,hidden=16,heads=2,ffn=32,experts=4,top_k=2,moe_ffn=16,state=4,seq=8,"
    "vocab=32,microbatches=4";

TEST(ProfileCommandTest, ProfileThenPlanThenTrain) {
  const std::string prefix = TestPath("prof");
  std::ostringstream out, err;
  ASSERT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + prefix, "--ranks=2",
                        "--transport=inproc", "--repeat=3"},
                       out, err),
            0)
      << err.str();
  EXPECT_NE(out.str().find("spread"), std::string::npos) << out.str();
  absl::StatusOr<ModelGraph> model = LoadModelFile(prefix + ".model.json");
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->num_layers(), 6);  // embedding, 4 letters, head
  EXPECT_TRUE(ValidateMeasuredProfile(*model).ok());
  for (const Layer& l : model->layers) {
    EXPECT_GT(*l.measured.activation_bytes_w, 0) << l.name;
    EXPECT_GT(*l.measured.param_bytes, 0) << l.name;
  }
  // Every non-head layer hands a [seq, hidden] fp32 tensor on; the head nothing.
  EXPECT_EQ(*model->layers[1].measured.output_bytes, 8 * 16 * 4);
  EXPECT_EQ(*model->layers[5].measured.output_bytes, 0);
  EXPECT_EQ(*model->layers[0].measured.input_bytes, 0);
  absl::StatusOr<Cluster> cluster = LoadClusterFile(prefix + ".cluster.json");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->num_devices(), 2);
  EXPECT_GT(cluster->hardware[0].op_overhead_s, 0);
  EXPECT_GT(cluster->link(0, 1).bandwidth, 0);
  // The gradient all-reduce over both ranks was timed (the layers' gradient sizes) and its bus
  // bandwidth, copies included, written for the DP sync to use.
  EXPECT_GT(cluster->link(0, 1).allreduce_bandwidth, 0);
  // And again with every rank computing the model meanwhile: the overlapped figures, never
  // faster than the idle ones.
  EXPECT_GT(cluster->link(0, 1).allreduce_overlapped_bandwidth, 0);
  EXPECT_LE(cluster->link(0, 1).allreduce_overlapped_bandwidth,
            cluster->link(0, 1).allreduce_bandwidth);
  EXPECT_GE(cluster->link(0, 1).allreduce_overlapped_latency_s,
            cluster->link(0, 1).allreduce_latency_s);
  EXPECT_EQ(cluster->inter_node_link.allreduce_bandwidth,
            cluster->nodes[0].intra_node_link.allreduce_bandwidth);
  EXPECT_NE(out.str().find("gradient all-reduce over 2 ranks: bus bandwidth "), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find(" per ring step (fitted over "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("gradient all-reduce beside compute (every rank computing"),
            std::string::npos)
      << out.str();
  // The message-heavy runs took place and fitted a cost in [0, 10 ms].
  EXPECT_NE(out.str().find("per-message CPU cost"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("-stage interleaved runs"), std::string::npos) << out.str();
  EXPECT_GE(cluster->hardware[0].message_cpu_s, 0);
  EXPECT_LE(cluster->hardware[0].message_cpu_s, 0.01);
  // Threads of one process cannot tell communication CPU from the other rank's compute.
  EXPECT_NE(out.str().find("of CPU per message (median over 0 rank-iterations)"),
            std::string::npos)
      << out.str();

  // Every rank of every F/B/W launch timed the host-speed probe; the file's reference is the
  // probe's workload by its own medians, and the summary gives both.
  EXPECT_GT(model->host_probe_s, 0);
  EXPECT_DOUBLE_EQ(model->host_probe_s, executor::ProbeWorkloadSeconds(*model));
  EXPECT_NE(out.str().find("host-speed reference " + FormatSeconds(model->host_probe_s) +
                           " (the probe's workload, one micro-batch through every layer"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("the probe timed "), std::string::npos) << out.str();

  std::ostringstream cout_, cerr_;
  EXPECT_EQ(RunProfile({"--check=" + prefix + ".model.json"}, cout_, cerr_), 0) << cerr_.str();
  // A profile with a layer's time removed is refused by --check, naming the layer.
  ModelGraph broken = *model;
  broken.layers[3].measured.recompute_s.reset();
  ASSERT_TRUE(WriteModelFile(prefix + ".broken.json", broken).ok());
  EXPECT_EQ(RunProfile({"--check=" + prefix + ".broken.json"}, cout_, cerr_), 2);
  EXPECT_NE(cerr_.str().find("layers[3] (L3.moe): measured.recompute_s is missing"),
            std::string::npos)
      << cerr_.str();

  std::ostringstream pout, perr;
  const std::string plan = prefix + ".plan.json";
  // One pipeline over both ranks (--devices): the host-speed comparison is the single-pipeline
  // train path's (a layout run reports measured against predicted without it).
  ASSERT_EQ(RunPlan({"--model=" + prefix + ".model.json", "--cluster=" + prefix + ".cluster.json",
                     "--devices=2", "--out=" + plan, "--time-budget=1", "--seed=1"},
                    pout, perr),
            0)
      << perr.str();
  std::ostringstream tout, terr;
  EXPECT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + plan, "--ranks=2",
                      "--transport=inproc", "--iterations=2", "--profile=" + prefix,
                      "--host_probe=2"},
                     tout, terr),
            0)
      << terr.str();
  // The run's probe against the profile's, and the plan predicted at the host's speed now.
  EXPECT_NE(tout.str().find("their profiled time now"), std::string::npos) << tout.str();
  EXPECT_NE(tout.str().find("at the host's speed now"), std::string::npos) << tout.str();
}

// The bytes a TP2 split holds are measured, not the whole layer's halved: a PP1 x TP2 plan from
// the profile predicts each rank's peak live activations (`simulate --plan`) as the run then
// measures them (`train --json`), byte for byte. (Tensor-parallel shapes do not depend on the
// data; an EP split's do, through the routing, so it is left out here.)
TEST(ProfileCommandTest, TensorParallelPlanPredictsTheMeasuredPeakActivations) {
  const std::string prefix = TestPath("tp-bytes");
  std::ostringstream out, err;
  ASSERT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + prefix, "--ranks=2",
                        "--transport=inproc", "--repeat=2", "--max_launches=1", "--ep=off"},
                       out, err),
            0)
      << err.str();
  const std::string plan = prefix + ".plan.json";
  const std::vector<std::string> inputs = {"--model=" + prefix + ".model.json",
                                           "--cluster=" + prefix + ".cluster.json"};
  std::vector<std::string> plan_args = inputs;
  for (const char* a : {"--pp=1", "--tp=2", "--dp=1", "--time_budget=1", "--seed=1"}) {
    plan_args.push_back(a);
  }
  plan_args.push_back("--out=" + plan);
  std::ostringstream pout, perr;
  ASSERT_EQ(RunPlan(plan_args, pout, perr), 0) << perr.str();
  std::vector<std::string> sim_args = inputs;
  sim_args.push_back("--plan=" + plan);
  sim_args.push_back("--json");
  std::ostringstream sout, serr;
  ASSERT_EQ(RunSimulate(sim_args, sout, serr), 0) << serr.str();
  std::ostringstream tout, terr;
  ASSERT_EQ(RunTrain({std::string("--model=") + kSpec, "--plan=" + plan, "--ranks=2",
                      "--transport=inproc", "--iterations=1", "--json"},
                     tout, terr),
            0)
      << terr.str();
  const Json predicted = Json::parse(sout.str()).at("peak_activation_bytes");
  const Json measured = Json::parse(tout.str()).at("peak_activation_bytes");
  ASSERT_EQ(predicted.size(), 2u) << sout.str();
  ASSERT_EQ(measured.size(), 2u) << tout.str();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(measured[r].get<double>(), predicted[r].get<double>()) << "rank " << r;
  }
}

// Identical layers (here the three MoE layers of "E*EE") get one pooled median per op kind;
// with --pool=false each keeps its own, which noise makes differ.
TEST(ProfileCommandTest, IdenticalLayersArePooled) {
  constexpr char kThreeMoe[] =
      "ref:pattern=E*EE,hidden=16,heads=2,ffn=32,experts=4,top_k=2,moe_ffn=16,state=4,seq=8,"
      "vocab=32,microbatches=4";
  auto profile = [&](const std::string& name, bool pool) {
    const std::string prefix = TestPath(name);
    std::ostringstream out, err;
    EXPECT_EQ(RunProfile({std::string("--model=") + kThreeMoe, "--out=" + prefix, "--ranks=2",
                          "--transport=inproc", "--repeat=3",
                          pool ? "--pool=true" : "--pool=false"},
                         out, err),
              0)
        << err.str();
    if (pool) {
      EXPECT_NE(out.str().find("L1.moe (x3)"), std::string::npos) << out.str();
    }
    absl::StatusOr<ModelGraph> model = LoadModelFile(prefix + ".model.json");
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *model : ModelGraph{};
  };
  const ModelGraph pooled = profile("pooled", true);
  ASSERT_EQ(pooled.num_layers(), 6);  // embedding, E * E E, head
  for (int l : {3, 4}) {
    EXPECT_EQ(*pooled.layers[l].measured.forward_s, *pooled.layers[1].measured.forward_s);
    EXPECT_EQ(*pooled.layers[l].measured.backward_input_s,
              *pooled.layers[1].measured.backward_input_s);
    EXPECT_EQ(*pooled.layers[l].measured.weight_grad_s, *pooled.layers[1].measured.weight_grad_s);
    EXPECT_EQ(*pooled.layers[l].measured.recompute_s, *pooled.layers[1].measured.recompute_s);
  }
  EXPECT_NE(pooled.source.find("identical layers pooled"), std::string::npos) << pooled.source;
  const ModelGraph own = profile("own", false);
  ASSERT_EQ(own.num_layers(), 6);
  const bool all_equal = *own.layers[1].measured.forward_s == *own.layers[3].measured.forward_s &&
                         *own.layers[1].measured.forward_s == *own.layers[4].measured.forward_s &&
                         *own.layers[1].measured.backward_input_s ==
                             *own.layers[3].measured.backward_input_s;
  EXPECT_FALSE(all_equal) << "separate timings of three layers agreed to the nanosecond";
}

// The F/B/W runs are launched afresh, every other launch with the ranks mirrored, at least
// twice and until the summed medians settle: --stable=0 never settles (runs all
// --max_launches), --stable=1000 settles at the second launch (--stable=1 did not always: a
// first launch on a loaded machine measured 172% slower than the second).
TEST(ProfileCommandTest, LaunchesUntilTheMediansSettleWithRanksMirrored) {
  auto profile = [&](const std::string& name, const std::string& stable, int max_launches) {
    const std::string prefix = TestPath(name);
    std::ostringstream out, err;
    EXPECT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + prefix, "--ranks=2",
                          "--transport=inproc", "--repeat=2", "--stable=" + stable,
                          "--max_launches=" + std::to_string(max_launches)},
                         out, err),
              0)
        << err.str();
    absl::StatusOr<ModelGraph> model = LoadModelFile(prefix + ".model.json");
    EXPECT_TRUE(model.ok()) << model.status();
    return std::make_pair(err.str(), model.ok() ? model->source : std::string());
  };
  const auto [never_err, never_source] = profile("never", "0", 3);
  EXPECT_NE(never_err.find("launch 2 (ranks mirrored): summed layer medians"), std::string::npos)
      << never_err;
  // "profile: launch N" are the whole-layer launches ("TP2 launch N" the split ones, which
  // settle on their own).
  EXPECT_NE(never_err.find("profile: launch 3: summed layer medians"), std::string::npos)
      << never_err;
  EXPECT_EQ(never_err.find("profile: launch 4"), std::string::npos) << never_err;
  EXPECT_NE(never_source.find("median of 3 launches x 2 iterations"), std::string::npos)
      << never_source;
  const auto [settled_err, settled_source] = profile("settled", "1000", 4);
  EXPECT_NE(settled_err.find("launch 2 (ranks mirrored)"), std::string::npos) << settled_err;
  EXPECT_EQ(settled_err.find("profile: launch 3"), std::string::npos) << settled_err;
  EXPECT_NE(settled_source.find("median of 2 launches x 2 iterations"), std::string::npos)
      << settled_source;

  std::ostringstream out, err;
  EXPECT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + TestPath("zero"),
                        "--max_launches=0"},
                       out, err),
            2);
  EXPECT_NE(err.str().find("--max_launches must be >= 1, got 0"), std::string::npos) << err.str();
}

// By default (--tp=auto, --ep=auto) every layer is also measured split over TP groups of each
// power-of-two degree the ranks and the layers allow (here 2: PP1 x TP2 over both ranks), and
// every MoE layer over EP groups (here DP2 x EP2), and the file holds those times as
// measured.sharded — what a plan at TP2 or EP2 then uses (CostModel::Cost). --tp=off --ep=off
// measure none; degrees that do not divide the ranks, a model without MoE layers for --ep, or
// a layer that cannot be split so are refused before anything runs, naming the flag and degree.
TEST(ProfileCommandTest, MeasuresTheLayersSplitAtEachTensorAndExpertParallelDegree) {
  const std::string prefix = TestPath("at-tp");
  std::ostringstream out, err;
  ASSERT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + prefix, "--ranks=2",
                        "--transport=inproc", "--repeat=2", "--max_launches=2"},
                       out, err),
            0)
      << err.str();
  EXPECT_NE(err.str().find("TP2 launch 1: summed layer medians"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("EP2 launch 1: summed layer medians"), std::string::npos) << err.str();
  // Each split's launches (TP2, EP2) timed the host-speed probe too, against the F/B/W
  // launches'.
  const std::string text = out.str();
  int probe_lines = 0;
  for (size_t at = text.find(" the F/B/W launches')"); at != std::string::npos;
       at = text.find(" the F/B/W launches')", at + 1)) {
    ++probe_lines;
  }
  EXPECT_EQ(probe_lines, 2) << text;
  // The gradient all-reduce's fit, and each timed size's median against it.
  EXPECT_NE(text.find("gradient all-reduce over 2 ranks: bus bandwidth"), std::string::npos)
      << text;
  EXPECT_NE(text.find("; per size, median vs the fit: "), std::string::npos) << text;
  EXPECT_NE(out.str().find("split TP2 (per rank, the all-reduces included; PP 1 x TP2)"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("split EP2 (per rank, the dispatch and combine all-to-alls included; "
                           "PP 1 x TP1 x DP2 x EP2; MoE layers only)"),
            std::string::npos)
      << out.str();
  absl::StatusOr<ModelGraph> model = LoadModelFile(prefix + ".model.json");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE(model->source.find(", also at EP2, TP2"), std::string::npos) << model->source;
  EXPECT_TRUE(ValidateMeasuredProfile(*model).ok());
  for (const Layer& l : model->layers) {
    const bool moe = l.kind == LayerKind::kMoe;
    ASSERT_EQ(l.measured.sharded.size(), moe ? 2u : 1u) << l.name;
    for (auto [tp, ep] : {std::pair{2, 1}, std::pair{1, 2}}) {
      const MeasuredSharded* a = l.measured.Sharded(tp, ep, moe);
      if (ep > 1 && !moe) {
        EXPECT_EQ(a, nullptr) << l.name;  // a dense layer is whole under EP
        continue;
      }
      ASSERT_NE(a, nullptr) << l.name << " TP" << tp << " EP" << ep;
      EXPECT_GT(a->forward_s, 0) << l.name;
      EXPECT_GT(a->backward_input_s, 0) << l.name;
      EXPECT_GT(a->weight_grad_s, 0) << l.name;
      EXPECT_GT(a->recompute_s, 0) << l.name;
      // Each rank's bytes as the split holds them: a shard of the weights, and what its
      // context keeps (recorded by the split launches).
      ASSERT_TRUE(l.measured.param_bytes.has_value()) << l.name;
      EXPECT_GT(a->param_bytes, 0) << l.name;
      EXPECT_LT(a->param_bytes, *l.measured.param_bytes) << l.name;
      if (l.kind != LayerKind::kEmbedding) {
        EXPECT_GT(a->activation_bytes, 0) << l.name;
      }
    }
  }
  // A profile with one layer's TP2 entry removed is not a complete profile.
  ModelGraph broken = *model;
  broken.layers[2].measured.sharded.clear();
  const absl::Status s = ValidateMeasuredProfile(broken);
  EXPECT_NE(s.message().find("layers[2] (L2.attention): measured.sharded has no entry for TP 2 x EP 1"),
            absl::string_view::npos)
      << s;

  std::ostringstream off_out, off_err;
  ASSERT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + TestPath("tp-off"),
                        "--ranks=2", "--transport=inproc", "--repeat=2", "--max_launches=1",
                        "--tp=off", "--ep=off"},
                       off_out, off_err),
            0)
      << off_err.str();
  absl::StatusOr<ModelGraph> whole = LoadModelFile(TestPath("tp-off") + ".model.json");
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (const Layer& l : whole->layers) EXPECT_TRUE(l.measured.sharded.empty()) << l.name;
  EXPECT_EQ(off_err.str().find("TP2 launch"), std::string::npos) << off_err.str();
  EXPECT_EQ(off_err.str().find("EP2 launch"), std::string::npos) << off_err.str();

  for (auto [flags, want] : {
           std::pair{std::vector<std::string>{"--ranks=2", "--tp=3"},
                     "--tp: degree 3: does not divide --ranks=2"},
           std::pair{std::vector<std::string>{"--ranks=2", "--tp=two"},
                     "--tp: 'two' is not a degree >= 2"},
           std::pair{std::vector<std::string>{"--ranks=2", "--ep=4"},
                     "--ep: degree 4: does not divide --ranks=2"},
           std::pair{std::vector<std::string>{"--ranks=2", "--ep=2",
                                              "--model=ref:pattern=*-,hidden=16,heads=2,ffn=32,seq=8,vocab=32"},
                     "--ep: degree 2: needs MoE layers; the model has none"},
           std::pair{std::vector<std::string>{"--ranks=2", "--tp=2",
                                              "--model=ref:pattern=*,hidden=18,heads=3,seq=8,vocab=32"},
                     "--tp: degree 2: "},
       }) {
    std::vector<std::string> args = {std::string("--model=") + kSpec, "--out=" + TestPath("bad-tp"),
                                     "--transport=inproc"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::ostringstream bout, berr;
    EXPECT_EQ(RunProfile(args, bout, berr), 2) << want;
    EXPECT_NE(berr.str().find(want), std::string::npos) << berr.str();
  }
}

TEST(ProfileCommandTest, AModelTheExecutorCannotBuildIsAClearError) {
  std::ostringstream out, err;
  EXPECT_EQ(RunProfile({"--model=ref:pattern=M*X", "--out=" + TestPath("bad"),
                        "--transport=inproc"},
                       out, err),
            2);
  EXPECT_NE(err.str().find("'X'"), std::string::npos) << err.str();
}

TEST(ProfileCommandTest, TooLittleMemoryIsAClearError) {
  std::ostringstream out, err;
  EXPECT_EQ(RunProfile({std::string("--model=") + kSpec, "--out=" + TestPath("small"),
                        "--transport=inproc", "--memory=1000"},
                       out, err),
            3);
  EXPECT_NE(err.str().find("a device has 1000"), std::string::npos) << err.str();
}

ModelGraph MeasuredModel() {
  ModelGraph g;
  for (int i = 0; i < 3; ++i) {
    Layer l;
    l.name = "L" + std::to_string(i);
    l.measured.forward_s = l.measured.backward_input_s = l.measured.weight_grad_s =
        l.measured.recompute_s = 0.001;
    g.layers.push_back(l);
  }
  return g;
}

TEST(ProfileCommandTest, AProfileWithAMissingOrNonPositiveTimeIsRejectedNamingTheLayer) {
  EXPECT_TRUE(ValidateMeasuredProfile(MeasuredModel()).ok());
  ModelGraph missing = MeasuredModel();
  missing.layers[2].measured.weight_grad_s.reset();
  absl::Status s = ValidateMeasuredProfile(missing);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layers[2] (L2): measured.weight_grad_s is missing"),
            absl::string_view::npos)
      << s;
  ModelGraph zero = MeasuredModel();
  zero.layers[1].measured.forward_s = 0;
  s = ValidateMeasuredProfile(zero);
  EXPECT_NE(s.message().find("layers[1] (L1): measured.forward_s must be > 0, got 0"),
            absl::string_view::npos)
      << s;
}

// The simulator's own times for a light (ZB-H1, 2 stages) and a heavy (interleaved, 4 stages
// alternating) plan on a cluster whose messages cost 0.7 ms of CPU at each end: the fit, given
// the model without that cost and a common bias on both runs, recovers 0.7 ms.
TEST(ProfileCommandTest, FitMessageCpuRecoversTheCostThatMakesMessageHeavyPlansSlower) {
  ModelGraph model = MeasuredModel();
  for (int i = 3; i < 8; ++i) {
    Layer l = model.layers[0];
    l.name = "L" + std::to_string(i);
    model.layers.push_back(l);
  }
  for (Layer& l : model.layers) {
    l.measured.activation_bytes = l.measured.activation_bytes_w = l.measured.output_bytes = 1e4;
    l.measured.input_bytes = 1e4;
    l.measured.param_bytes = 1e4;
  }
  Cluster cluster;
  cluster.name = "fit";
  cluster.hardware.push_back(HardwareSpec{"cpu", 1e10, 1e12, 1e10, /*op_overhead_s=*/5e-5});
  cluster.nodes.push_back(Node{"n", "cpu", 2, LinkSpec{1e9, 1e-4}});
  cluster.inter_node_link = LinkSpec{1e9, 1e-4};
  const ModelGraph graph = model;
  absl::StatusOr<Plan> light = ClassicPlan(ScheduleKind::kZbH1, 2, 0, 8, graph);
  absl::StatusOr<Plan> heavy = ClassicPlan(ScheduleKind::kInterleaved, 2, 2, 8, graph);
  ASSERT_TRUE(light.ok() && heavy.ok());
  auto time_with = [&](const Plan& plan, double c) {
    Cluster with = cluster;
    with.hardware[0].message_cpu_s = c;
    absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, with, CostModel(), 2);
    EXPECT_TRUE(b.ok()) << b.status();
    absl::StatusOr<PipelineProblem> p = b->Build(plan);
    EXPECT_TRUE(p.ok()) << p.status();
    absl::StatusOr<SimResult> r = Simulate(*p, plan.schedule);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->iteration_time_s;
  };
  const double bias = 1.13;  // e.g. a contended machine slows both runs alike
  const double light_s = bias * time_with(*light, 7e-4), heavy_s = bias * time_with(*heavy, 7e-4);
  ASSERT_GT(heavy_s / light_s, time_with(*heavy, 0) / time_with(*light, 0));
  absl::StatusOr<double> c = FitMessageCpu(model, cluster, *light, light_s, *heavy, heavy_s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NEAR(*c, 7e-4, 1e-6);
  // A heavy run no slower, relatively, than the simulator says without the cost: c = 0.
  c = FitMessageCpu(model, cluster, *light, time_with(*light, 0), *heavy, time_with(*heavy, 0) * 0.9);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, 0);
}

// The message fit's input: a lower bound of the pairs' ratios, the median less half the range,
// so that one noisy pair cannot inflate every message-heavy prediction.
TEST(ProfileCommandTest, RatioLowerBoundIsTheMedianLessHalfTheRange) {
  EXPECT_DOUBLE_EQ(1.0, RatioLowerBound({}));
  EXPECT_DOUBLE_EQ(1.25, RatioLowerBound({1.25}));
  // 1.00, 1.03, 1.06: 1.03 - 0.03 = 1.00, no slowdown (the fit is 0).
  EXPECT_NEAR(1.0, RatioLowerBound({1.06, 1.0, 1.03}), 1e-12);
  // A consistent slowdown keeps most of it: 1.10, 1.12, 1.13 -> 1.12 - 0.015.
  EXPECT_NEAR(1.105, RatioLowerBound({1.12, 1.10, 1.13}), 1e-12);
  // An even count: the middle two's mean, 1.05 - 0.05.
  EXPECT_NEAR(1.0, RatioLowerBound({1.0, 1.04, 1.06, 1.1}), 1e-12);
}

TEST(ProfileCommandTest, FitLinkRecoversLatencyAndBandwidth) {
  absl::StatusOr<LinkFit> fit = FitLink({{1000, 1e-5 + 1000 / 1e9}, {4000, 1e-5 + 4000 / 1e9},
                                         {16000, 1e-5 + 16000 / 1e9}});
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->latency_s, 1e-5, 1e-9);
  EXPECT_NEAR(fit->bandwidth, 1e9, 1e3);
  EXPECT_FALSE(FitLink({{1000, 1e-5}}).ok());
  EXPECT_FALSE(FitLink({{1000, 1e-5}, {1000, 2e-5}}).ok());
}

}  // namespace
}  // namespace octopipe::cli
