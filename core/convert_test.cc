// Pins the proto <-> core conversion: lossless round trips (through protos and through JSON
// files) and the error code and field path of every kind of bad input.
#include "core/convert.h"

#include <cstdlib>
#include <limits>

#include "core/cluster_presets.h"
#include "core/file_io.h"
#include "core/model_zoo.h"
#include "core/test_dirs.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestPath;
using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

ModelGraph SmallModel() {
  ModelGraph m;
  m.name = "small";
  m.source = "test";
  Layer e;
  e.name = "embedding";
  e.kind = LayerKind::kEmbedding;
  e.dims.hidden = 64;
  e.dims.vocab = 1000;
  Layer a;
  a.name = "L0.attention";
  a.kind = LayerKind::kAttention;
  a.dims.hidden = 64;
  a.dims.heads = 4;
  a.dims.kv_heads = 2;
  a.measured.forward_s = 1.25e-3;  // partially measured
  a.measured.activation_bytes = 0;  // present even though zero
  a.measured.tp_degree = 2;         // measured per rank of a TP pair
  a.measured.sharded.push_back(
      MeasuredSharded{4, 1, 0.5e-3, 1e-3, 0.75e-3, 0.6e-3, 3000, 2500, 1.5e6});
  Layer mlp;
  mlp.name = "L0.mlp";
  mlp.kind = LayerKind::kMlp;
  mlp.dims.hidden = 64;
  mlp.dims.ffn = 256;
  mlp.dims.gated = true;
  Layer h;
  h.name = "head";
  h.kind = LayerKind::kHead;
  h.dims.hidden = 64;
  h.dims.vocab = 1000;
  m.layers = {e, a, mlp, h};
  m.training.seq_len = 128;
  m.training.micro_batch_size = 2;
  m.training.num_microbatches = 16;
  m.training.precision = Precision::kFp16;
  m.training.tp_degree = 2;
  m.training.recompute = RecomputePolicy::kSelective;
  m.training.zero_degree = 4;
  m.training.ep_comm_overlap = true;
  m.training.ep_comm_sms = 24;
  m.training.attention_kernel = AttentionKernel::kMaterialized;
  m.training.recompute_modules.core_attn = false;
  m.training.recompute_modules.layernorm = true;
  m.training.recompute_modules.mla_up_proj = true;
  m.host_probe_s = 0.0421;
  return m;
}

void ExpectSameModel(const ModelGraph& a, const ModelGraph& b) {
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(ModelToProto(a), ModelToProto(b))) << diff;
}

TEST(ConvertTest, ModelRoundTripKeepsEveryField) {
  const ModelGraph m = SmallModel();
  absl::StatusOr<ModelGraph> back = ModelFromProto(ModelToProto(m));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameModel(m, *back);
  EXPECT_EQ(LayerKind::kAttention, back->layers[1].kind);
  EXPECT_EQ(1.25e-3, *back->layers[1].measured.forward_s);
  EXPECT_EQ(0.0, *back->layers[1].measured.activation_bytes);
  EXPECT_FALSE(back->layers[1].measured.backward_input_s.has_value());
  EXPECT_EQ(2, back->layers[1].measured.tp_degree);
  EXPECT_EQ(1, back->layers[0].measured.tp_degree);  // absent: whole layers
  ASSERT_EQ(1u, back->layers[1].measured.sharded.size());
  EXPECT_EQ(4, back->layers[1].measured.sharded[0].tp_degree);
  EXPECT_EQ(1, back->layers[1].measured.sharded[0].ep_degree);
  EXPECT_EQ(0.6e-3, back->layers[1].measured.sharded[0].recompute_s);
  EXPECT_EQ(3000, back->layers[1].measured.sharded[0].activation_bytes);
  EXPECT_EQ(2500, back->layers[1].measured.sharded[0].activation_bytes_w);
  EXPECT_EQ(1.5e6, back->layers[1].measured.sharded[0].param_bytes);
  EXPECT_TRUE(back->layers[2].dims.gated);
  EXPECT_EQ(Precision::kFp16, back->training.precision);
  EXPECT_EQ(RecomputePolicy::kSelective, back->training.recompute);
  EXPECT_EQ(4, back->training.zero_degree);
  EXPECT_TRUE(back->training.ep_comm_overlap);
  EXPECT_EQ(24, back->training.ep_comm_sms);
  EXPECT_EQ(AttentionKernel::kMaterialized, back->training.attention_kernel);
  EXPECT_EQ(std::vector<std::string>({"layernorm", "mla_up_proj"}),
            RecomputeModuleNames(back->training.recompute_modules));
  EXPECT_EQ(0.0421, back->host_probe_s);
}

TEST(ConvertTest, ABadHostProbeIsRefusedNamingTheField) {
  ModelGraph m = SmallModel();
  m.host_probe_s = -1;
  absl::StatusOr<ModelGraph> back = ModelFromProto(ModelToProto(m));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(back.status().message()).find("host_probe_s must be finite and >= 0, got -1"),
            std::string::npos)
      << back.status();
}

TEST(ConvertTest, BadTimesMeasuredSplitAreRefusedNamingTheEntry) {
  for (auto [entry, want] : {
           std::pair{MeasuredSharded{1, 1, 1e-3, 1e-3, 1e-3, 1e-3},
                     "layers[1].measured.sharded[1]: tp_degree and ep_degree are both 1"},
           std::pair{MeasuredSharded{-1, 1, 1e-3, 1e-3, 1e-3, 1e-3},
                     "layers[1].measured.sharded[1].tp_degree must be in [1, 4096], got -1"},
           std::pair{MeasuredSharded{4, 1, 1e-3, 1e-3, 1e-3, 1e-3},
                     "layers[1].measured.sharded[1]: TP 4 x EP 1 repeats sharded[0]"},
           std::pair{MeasuredSharded{1, 2, 1e-3, 1e-3, 1e-3, 1e-3},
                     "layers[1].measured.sharded[1].ep_degree is 2 but the layer is not a MoE layer"},
           std::pair{MeasuredSharded{8, 1, 1e-3, 0, 1e-3, 1e-3},
                     "layers[1].measured.sharded[1].backward_input_s must be > 0, got 0"},
           std::pair{MeasuredSharded{8, 1, 1e-3, 1e-3, 1e-3, 1e-3, -5, 0, 0},
                     "layers[1].measured.sharded[1].activation_bytes must be finite and in "
                     "[0, 1e15] bytes, got -5"},
       }) {
    ModelGraph m = SmallModel();
    m.layers[1].measured.sharded.push_back(entry);
    absl::StatusOr<ModelGraph> back = ModelFromProto(ModelToProto(m));
    ASSERT_FALSE(back.ok()) << want;
    EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(back.status().message()).find(want), std::string::npos) << back.status();
  }
}

TEST(ConvertTest, ZooModelsRoundTripThroughJsonFiles) {
  for (const std::string& name : ZooModelNames()) {
    SCOPED_TRACE(name);
    absl::StatusOr<ModelGraph> m = ZooModel(name, TrainingOptions{});
    ASSERT_TRUE(m.ok()) << m.status();
    const std::string path = TestPath(name + ".json");
    ASSERT_TRUE(WriteModelFile(path, *m).ok());
    absl::StatusOr<ModelGraph> back = LoadModelFile(path);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameModel(*m, *back);
  }
}

TEST(ConvertTest, FilesUseSnakeCaseNamesAndEndWithNewline) {
  const std::string path = TestPath("small.json");
  ASSERT_TRUE(WriteModelFile(path, SmallModel()).ok());
  absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("\"kv_heads\""));
  EXPECT_THAT(*text, HasSubstr("\"micro_batch_size\""));
  EXPECT_THAT(*text, HasSubstr("\"kind\": \"attention\""));
  EXPECT_EQ('\n', text->back());
}

// Malformed JSON is refused strictly (a trailing comma too, which protobuf's parser accepts),
// saying where: line and column of the break.
TEST(ConvertTest, MalformedJsonIsRefusedWithItsLineAndColumn) {
  proto::Model m;
  const absl::Status comma = ProtoFromJson("{\n \"name\": \"x\",\n}", &m);
  EXPECT_EQ(comma.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comma.message().find(
                "invalid JSON for octopipe.proto.Model at line 3, column 1: syntax error"),
            absl::string_view::npos)
      << comma.message();
  const absl::Status cut = ProtoFromJson("{\"name\": \"x\"", &m);
  EXPECT_NE(cut.message().find("invalid JSON for octopipe.proto.Model at line 1"),
            absl::string_view::npos)
      << cut.message();
  const absl::Status huge = ProtoFromJson("{\"name\": \"x\", \"host_probe_s\": 1e400}", &m);
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument) << huge.message();
  EXPECT_TRUE(ProtoFromJson("{\"name\": \"x\"}", &m).ok());
  EXPECT_EQ(m.name(), "x");
}

TEST(ConvertTest, ClusterRoundTripIncludingInfinity) {
  for (const std::string& name : ClusterPresetNames()) {
    absl::StatusOr<Cluster> c = ClusterPreset(name);
    ASSERT_TRUE(c.ok());
    const std::string path = TestPath(name + ".json");
    ASSERT_TRUE(WriteClusterFile(path, *c).ok());
    absl::StatusOr<Cluster> back = LoadClusterFile(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(MessageDifferencer::Equals(ClusterToProto(*c), ClusterToProto(*back))) << name;
  }
  // A link's all-reduce bus bandwidth, where one is given, survives the file.
  Cluster measured = *ClusterPreset("h100-4nodes");
  measured.nodes[0].intra_node_link.allreduce_bandwidth = 3.6e11;
  measured.inter_node_link.allreduce_bandwidth = 4.1e10;
  measured.inter_node_link.allreduce_latency_s = 2.5e-5;
  measured.inter_node_link.allreduce_overlapped_bandwidth = 2.2e10;
  measured.inter_node_link.allreduce_overlapped_latency_s = 4.5e-5;
  ASSERT_TRUE(WriteClusterFile(TestPath("busbw.json"), measured).ok());
  absl::StatusOr<Cluster> reloaded = LoadClusterFile(TestPath("busbw.json"));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(3.6e11, reloaded->nodes[0].intra_node_link.allreduce_bandwidth);
  EXPECT_EQ(0, reloaded->nodes[1].intra_node_link.allreduce_bandwidth);
  EXPECT_EQ(4.1e10, reloaded->inter_node_link.allreduce_bandwidth);
  EXPECT_EQ(2.5e-5, reloaded->inter_node_link.allreduce_latency_s);
  EXPECT_EQ(0, reloaded->nodes[0].intra_node_link.allreduce_latency_s);
  EXPECT_EQ(2.2e10, reloaded->inter_node_link.allreduce_overlapped_bandwidth);
  EXPECT_EQ(4.5e-5, reloaded->inter_node_link.allreduce_overlapped_latency_s);
  EXPECT_EQ(0, reloaded->nodes[0].intra_node_link.allreduce_overlapped_bandwidth);

  // The synthetic cluster has unlimited memory and links.
  const Cluster synthetic = SyntheticCluster(4);
  const std::string path = TestPath("synthetic.json");
  ASSERT_TRUE(WriteClusterFile(path, synthetic).ok());
  absl::StatusOr<Cluster> back = LoadClusterFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::numeric_limits<double>::infinity(), back->hardware[0].memory_bytes);
  EXPECT_EQ(4, back->num_devices());
}

Plan SmallPlan() {
  Plan p;
  p.version = 3;
  p.cost_model_generation = 7;
  p.schedule_name = "1f1b";
  p.num_devices = 2;
  p.num_microbatches = 2;
  p.stages = {{0, 1, 0, false}, {2, 3, 1, true}};
  p.schedule.ops = {
      {{OpKind::kF, 0, 0}, {OpKind::kF, 0, 1}, {OpKind::kB, 0, 0}, {OpKind::kW, 0, 0},
       {OpKind::kBW, 0, 1}},
      {{OpKind::kF, 1, 0}, {OpKind::kR, 1, 0}, {OpKind::kBW, 1, 0}, {OpKind::kF, 1, 1},
       {OpKind::kBW, 1, 1}},
  };
  return p;
}

TEST(ConvertTest, PlanRoundTripWithOpStrings) {
  const Plan plan = SmallPlan();
  const proto::Plan p = PlanToProto(plan);
  ASSERT_EQ(2, p.schedule_size());
  proto::Plan file = p;
  PlanFileForm(&file);
  EXPECT_EQ("BW0.1", file.schedule(0).ops(4));
  EXPECT_EQ("R1.0", file.schedule(1).ops(1));
  const std::string path = TestPath("plan.json");
  ASSERT_TRUE(WritePlanFile(path, plan).ok());
  absl::StatusOr<Plan> back = LoadPlanFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(MessageDifferencer::Equals(p, PlanToProto(*back)));
  EXPECT_EQ(plan.schedule.ops, back->schedule.ops);
  EXPECT_TRUE(back->stages[1].recompute);
  EXPECT_EQ(7, back->cost_model_generation);
}

void ExpectPlanError(const proto::Plan& p, absl::string_view fragment) {
  absl::StatusOr<Plan> plan = PlanFromProto(p);
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, plan.status().code());
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr(std::string(fragment)));
}

// The plan as an older client or a plan file sends it: op strings only.
proto::Plan TextOnlyPlan() {
  proto::Plan p = PlanToProto(SmallPlan());
  PlanFileForm(&p);
  return p;
}

TEST(ConvertTest, PlanErrorsNameTheField) {
  proto::Plan p = TextOnlyPlan();
  p.mutable_schedule(1)->set_ops(2, "X1.0");
  ExpectPlanError(p, "schedule[1].ops[2]: op 'X1.0'");

  p = TextOnlyPlan();
  p.mutable_schedule(0)->set_ops(0, "F5.0");
  ExpectPlanError(p, "schedule[0].ops[0]: stage 5 out of range [0, 2)");

  p = TextOnlyPlan();
  p.mutable_schedule(0)->set_ops(0, "F0.9");
  ExpectPlanError(p, "schedule[0].ops[0]: micro-batch 9 out of range [0, 2)");

  p = PlanToProto(SmallPlan());
  p.mutable_schedule(1)->set_device(0);
  ExpectPlanError(p, "schedule[1].device 0 has a second schedule entry");

  p = PlanToProto(SmallPlan());
  p.mutable_schedule(1)->set_device(2);
  ExpectPlanError(p, "schedule[1].device must be in [0, 1], got 2");

  p = PlanToProto(SmallPlan());
  p.mutable_stages(1)->set_device(5);
  ExpectPlanError(p, "stages[1].device must be in [0, 1], got 5");

  p = PlanToProto(SmallPlan());
  p.mutable_stages(1)->set_first_layer(3);
  ExpectPlanError(p, "stages[1].first_layer must be 2");

  p = PlanToProto(SmallPlan());
  p.set_num_microbatches(0);
  ExpectPlanError(p, "num_microbatches must be > 0, got 0");
}

TEST(ConvertTest, PlanToProtoFillsTypedOpsAndPlanFilesTheirText) {
  proto::Plan p = PlanToProto(SmallPlan());
  ASSERT_EQ(5, p.schedule(0).typed_ops_size());
  EXPECT_EQ(0, p.schedule(0).ops_size());  // one form on the wire
  const proto::ScheduleOp& bw = p.schedule(0).typed_ops(4);
  EXPECT_EQ(proto::OP_KIND_BW, bw.kind());
  EXPECT_EQ(0, bw.stage());
  EXPECT_EQ(1, bw.microbatch());
  EXPECT_EQ(proto::OP_KIND_R, p.schedule(1).typed_ops(1).kind());
  PlanFileForm(&p);
  ASSERT_EQ(5, p.schedule(0).ops_size());
  EXPECT_EQ(0, p.schedule(0).typed_ops_size());
  EXPECT_EQ("BW0.1", p.schedule(0).ops(4));
}

TEST(ConvertTest, PlanFromTypedOpsAloneOrTextAloneIsTheSame) {
  proto::Plan typed_only = PlanToProto(SmallPlan());
  for (proto::DeviceSchedule& d : *typed_only.mutable_schedule()) d.clear_ops();
  absl::StatusOr<Plan> from_typed = PlanFromProto(typed_only);
  ASSERT_TRUE(from_typed.ok()) << from_typed.status();
  absl::StatusOr<Plan> from_text = PlanFromProto(TextOnlyPlan());
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  EXPECT_EQ(SmallPlan().schedule.ops, from_typed->schedule.ops);
  EXPECT_EQ(SmallPlan().schedule.ops, from_text->schedule.ops);
}

// A plan in both wire forms, as an older planner sent it.
proto::Plan BothForms(const Plan& plan) {
  proto::Plan p = PlanToProto(plan);
  proto::Plan text = p;
  PlanFileForm(&text);
  for (int d = 0; d < p.schedule_size(); ++d) {
    *p.mutable_schedule(d)->mutable_ops() = text.schedule(d).ops();
  }
  return p;
}

TEST(ConvertTest, TypedOpErrorsNameTheField) {
  proto::Plan p = BothForms(SmallPlan());
  p.mutable_schedule(0)->set_ops(1, "B0.1");  // typed says F0.1
  ExpectPlanError(p, "schedule[0].typed_ops[1] F0.1 and schedule[0].ops[1] 'B0.1' disagree");

  p = BothForms(SmallPlan());
  p.mutable_schedule(0)->mutable_ops()->RemoveLast();
  ExpectPlanError(p, "schedule[0]: 5 typed_ops but 4 ops; they must agree");

  p = PlanToProto(SmallPlan());
  p.mutable_schedule(1)->clear_ops();
  p.mutable_schedule(1)->mutable_typed_ops(2)->set_kind(proto::OP_KIND_UNSPECIFIED);
  ExpectPlanError(p, "schedule[1].typed_ops[2]: kind: required");

  p.mutable_schedule(1)->mutable_typed_ops(2)->set_kind(static_cast<proto::OpKind>(42));
  ExpectPlanError(p, "schedule[1].typed_ops[2]: kind: unknown value 42");

  p = PlanToProto(SmallPlan());
  p.mutable_schedule(1)->clear_ops();
  p.mutable_schedule(1)->mutable_typed_ops(0)->set_stage(5);
  ExpectPlanError(p, "schedule[1].typed_ops[0]: stage 5 out of range [0, 2)");

  p.mutable_schedule(1)->mutable_typed_ops(0)->set_stage(-1);
  ExpectPlanError(p, "schedule[1].typed_ops[0]: stage -1 and micro-batch 0 must be >= 0");
}

TEST(ConvertTest, PlanFilesKeepTheReadableOpStrings) {
  const std::string path = TestPath("readable-plan.json");
  ASSERT_TRUE(WritePlanFile(path, SmallPlan()).ok());
  absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("\"BW0.1\""));
  EXPECT_THAT(*text, ::testing::Not(HasSubstr("typed_ops")));

  // A typed-only schedule (a newer planner's) is written in the same text form.
  proto::Plan typed_only = PlanToProto(SmallPlan());
  for (proto::DeviceSchedule& d : *typed_only.mutable_schedule()) d.clear_ops();
  PlanFileForm(&typed_only);
  EXPECT_TRUE(MessageDifferencer::Equals(TextOnlyPlan(), typed_only));
}

TEST(ConvertTest, PlanFileOfTheOldFormLoads) {
  // Written by a binary that predates the typed ops.
  const std::string path = TestPath("old-plan.json");
  ASSERT_TRUE(WriteStringToFile(path, R"({
  "version": "1", "schedule_name": "gpipe", "num_devices": 2, "num_microbatches": 1,
  "stages": [{"first_layer": 0, "last_layer": 0, "device": 0},
             {"first_layer": 1, "last_layer": 1, "device": 1}],
  "schedule": [{"device": 0, "ops": ["F0.0", "BW0.0"]},
               {"device": 1, "ops": ["F1.0", "BW1.0"]}]
})").ok());
  absl::StatusOr<Plan> plan = LoadPlanFile(path);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<Op> device1 = {{OpKind::kF, 1, 0}, {OpKind::kBW, 1, 0}};
  EXPECT_EQ(device1, plan->schedule.ops[1]);
}

// SmallPlan (2 devices, 2 micro-batches) twice over 4 ranks: PP2 x DP2, pp outer.
LayoutPlan SmallLayout() {
  LayoutPlan lp;
  lp.layout = {2, 1, 1, 2, true};
  lp.num_ranks = 4;
  lp.global_microbatches = 4;
  LayoutPipelinePlan pipe;
  pipe.plan = SmallPlan();
  pipe.replicas = {{0, 0, {0, 2}}, {1, 2, {1, 3}}};
  lp.pipelines.push_back(pipe);
  return lp;
}

TEST(ConvertTest, LayoutPlanFileRoundTripsWithItsRankMap) {
  const std::string path = TestPath("layout-plan.json");
  proto::LayoutPrediction predicted;
  predicted.set_iteration_time_s(1.5);
  ASSERT_TRUE(WriteLayoutPlanFile(path, SmallLayout(), &predicted).ok());
  absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("\"rank_order\": \"tp-dp-pp\""));
  EXPECT_THAT(*text, HasSubstr("\"BW0.1\""));
  absl::StatusOr<LayoutPlan> back = LoadLayoutPlanFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_ranks, 4);
  EXPECT_EQ(back->pipelines[0].replicas[1].device_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(back->pipelines[0].plan.schedule.ops, SmallPlan().schedule.ops);
  // One pipeline's caller is told the file holds a layout.
  absl::StatusOr<Plan> single = LoadPlanFile(path);
  EXPECT_EQ(single.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(single.status().message(), HasSubstr("PP2 x TP1 x EP1 x DP2"));
}

TEST(ConvertTest, LayoutPlanErrorsNameTheField) {
  proto::LayoutPlan p = LayoutPlanToProto(SmallLayout());
  p.mutable_ranks(3)->set_device(0);
  absl::StatusOr<LayoutPlan> r = LayoutPlanFromProto(p);
  EXPECT_THAT(r.status().message(), HasSubstr("ranks[3]")) << r.status();
  p = LayoutPlanToProto(SmallLayout());
  p.mutable_pipelines(0)->mutable_replicas(1)->set_first_microbatch(1);
  r = LayoutPlanFromProto(p);
  EXPECT_THAT(r.status().message(), HasSubstr("first_microbatch")) << r.status();
  p = LayoutPlanToProto(SmallLayout());
  p.mutable_layout()->set_rank_order("pp-first");
  r = LayoutPlanFromProto(p);
  EXPECT_THAT(r.status().message(), HasSubstr("layout.rank_order")) << r.status();
}

TEST(ConvertTest, AnOldSinglePlanFileLoadsAsALayoutOfOnePipeline) {
  const std::string path = TestPath("single-as-layout.json");
  ASSERT_TRUE(WritePlanFile(path, SmallPlan()).ok());
  absl::StatusOr<LayoutPlan> lp = LoadLayoutPlanFile(path);
  ASSERT_TRUE(lp.ok()) << lp.status();
  EXPECT_TRUE(lp->single_pipeline());
  EXPECT_EQ(lp->num_ranks, 2);
  EXPECT_EQ(lp->pipelines[0].plan.schedule.ops, SmallPlan().schedule.ops);
  // Its own prediction is the one-pipeline layout's.
  proto::Plan with_prediction = PlanToProto(SmallPlan());
  with_prediction.mutable_predicted()->set_iteration_time_s(1.5);
  with_prediction.mutable_predicted()->set_tokens_per_s(2048);
  ASSERT_TRUE(WriteStringToFile(path, ProtoToJson(with_prediction)).ok());
  proto::LayoutPrediction predicted;
  ASSERT_TRUE(LoadLayoutPlanFile(path, &predicted).ok());
  EXPECT_EQ(predicted.iteration_time_s(), 1.5);
  EXPECT_EQ(predicted.pipeline_time_s(), 1.5);
  EXPECT_EQ(predicted.tokens_per_s(), 2048);
}

// SmallPlan with its head split by vocabulary: S and T of each device's shard per micro-batch,
// and the columns it was costed with (unequal).
Plan VocabPlan() {
  Plan p = SmallPlan();
  p.vocab_parallel = true;
  p.vocab_shard_columns = {700, 300};
  for (int d = 0; d < 2; ++d) {
    for (int m = 0; m < 2; ++m) {
      p.schedule.ops[d].push_back({OpKind::kS, d, m});
      p.schedule.ops[d].push_back({OpKind::kT, d, m});
    }
  }
  return p;
}

TEST(ConvertTest, VocabShardColumnsRoundTrip) {
  const Plan plan = VocabPlan();
  const proto::Plan p = PlanToProto(plan);
  ASSERT_EQ(2, p.vocab_shard_columns_size());
  EXPECT_EQ(300, p.vocab_shard_columns(1));
  absl::StatusOr<Plan> wire = PlanFromProto(p);
  ASSERT_TRUE(wire.ok()) << wire.status();
  EXPECT_EQ(plan.vocab_shard_columns, wire->vocab_shard_columns);
  const std::string path = TestPath("vocab-plan.json");
  ASSERT_TRUE(WritePlanFile(path, plan).ok());
  absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(*text, HasSubstr("vocab_shard_columns"));
  absl::StatusOr<Plan> back = LoadPlanFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->vocab_parallel);
  EXPECT_EQ(plan.vocab_shard_columns, back->vocab_shard_columns);
  EXPECT_EQ(plan.schedule.ops, back->schedule.ops);
  EXPECT_TRUE(MessageDifferencer::Equals(p, PlanToProto(*back)));
}

// A vocab_parallel plan file written before the field loads with no columns: equal shards.
TEST(ConvertTest, VocabPlanFileWithoutColumnsLoadsWithEqualShards) {
  const std::string path = TestPath("old-vocab-plan.json");
  ASSERT_TRUE(WriteStringToFile(path, R"({
  "version": "1", "schedule_name": "octopipe", "num_devices": 2, "num_microbatches": 1,
  "vocab_parallel": true,
  "stages": [{"first_layer": 0, "last_layer": 0, "device": 0},
             {"first_layer": 1, "last_layer": 1, "device": 1}],
  "schedule": [{"device": 0, "ops": ["F0.0", "S0.0", "B0.0", "T0.0", "W0.0"]},
               {"device": 1, "ops": ["F1.0", "S1.0", "B1.0", "W1.0", "T1.0"]}]
})").ok());
  absl::StatusOr<Plan> plan = LoadPlanFile(path);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->vocab_shard_columns.empty());
  absl::StatusOr<std::vector<int64_t>> columns = PlanVocabShardColumns(*plan, 1001);
  ASSERT_TRUE(columns.ok()) << columns.status();
  EXPECT_EQ((std::vector<int64_t>{501, 500}), *columns);
}

TEST(ConvertTest, BadVocabShardColumnsNameTheField) {
  proto::Plan p = PlanToProto(VocabPlan());
  p.add_vocab_shard_columns(5);
  ExpectPlanError(p, "vocab_shard_columns has 3 entries for 2 devices");

  p = PlanToProto(VocabPlan());
  p.set_vocab_shard_columns(1, 0);
  ExpectPlanError(p, "vocab_shard_columns[1] must be > 0");

  p = PlanToProto(VocabPlan());
  p.set_vocab_shard_columns(0, -4);
  ExpectPlanError(p, "vocab_shard_columns[0] must be > 0");

  p = PlanToProto(SmallPlan());
  p.add_vocab_shard_columns(1);
  p.add_vocab_shard_columns(1);
  ExpectPlanError(p, "vocab_shard_columns: 2 entries in a plan without vocab_parallel");

  // The sum is checked against the model's vocabulary, which the plan alone does not know.
  absl::StatusOr<Plan> loaded = PlanFromProto(PlanToProto(VocabPlan()));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const absl::Status sum = PlanVocabShardColumns(*loaded, 1200).status();
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, sum.code());
  EXPECT_THAT(std::string(sum.message()),
              HasSubstr("vocab_shard_columns sum to 1000 but the model's vocabulary has 1200"));
}

TEST(ConvertTest, OpKindsMapOneToOne) {
  for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kBW, OpKind::kR, OpKind::kS,
                   OpKind::kT}) {
    const proto::OpKind wire = OpKindToProto(k);
    EXPECT_NE(proto::OP_KIND_UNSPECIFIED, wire);
    EXPECT_EQ(k, *OpKindFromProto(wire));
  }
  EXPECT_EQ(proto::OP_KIND_BW, OpKindToProto(OpKind::kBW));
}

void ExpectInvalid(const absl::Status& s, absl::string_view fragment) {
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(fragment)));
}

TEST(ConvertTest, UnsetOrUnknownEnumValuesNameTheField) {
  ExpectInvalid(OpKindFromProto(proto::OP_KIND_UNSPECIFIED).status(), "kind: required");
  ExpectInvalid(OpKindFromProto(static_cast<proto::OpKind>(42)).status(),
                "kind: unknown value 42");
  ExpectInvalid(ObjectiveFromProto(static_cast<proto::PlanObjective>(7)).status(),
                "objective_kind: unknown value 7");
  ExpectInvalid(ReplanReasonFromProto(static_cast<proto::PlanReason>(9)).status(),
                "reason_kind: unknown value 9");
  ExpectInvalid(ReplanReasonFromProto(proto::PLAN_REASON_UNSPECIFIED).status(),
                "reason_kind: required");
}

TEST(ConvertTest, ObjectiveDefaultsToSynchronous) {
  EXPECT_EQ(Objective::kSynchronous, *ObjectiveFromProto(proto::PLAN_OBJECTIVE_UNSPECIFIED));
  for (Objective o : {Objective::kSynchronous, Objective::kSteadyState}) {
    EXPECT_EQ(o, *ObjectiveFromProto(ObjectiveToProto(o)));
  }
  EXPECT_EQ(proto::PLAN_OBJECTIVE_STEADY_STATE, ObjectiveToProto(Objective::kSteadyState));
}

TEST(ConvertTest, ReplanReasonsMapOneToOne) {
  for (ReplanReason r : kAllReplanReasons) {
    const proto::PlanReason wire = ReplanReasonToProto(r);
    EXPECT_NE(proto::PLAN_REASON_UNSPECIFIED, wire);
    EXPECT_EQ(r, *ReplanReasonFromProto(wire));
  }
  EXPECT_EQ(proto::PLAN_REASON_NODE_FAILURE, ReplanReasonToProto(ReplanReason::kNodeFailure));
}

TEST(ConvertTest, MissingFileIsNotFound) {
  const std::string path = TestPath("does-not-exist.json");
  EXPECT_EQ(absl::StatusCode::kNotFound, LoadModelFile(path).status().code());
  EXPECT_EQ(absl::StatusCode::kNotFound, LoadClusterFile(path).status().code());
  absl::Status s = LoadPlanFile(path).status();
  EXPECT_EQ(absl::StatusCode::kNotFound, s.code());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
}

absl::Status LoadModelText(absl::string_view name, absl::string_view text) {
  const std::string path = TestPath(std::string(name));
  absl::Status w = WriteStringToFile(path, text);
  if (!w.ok()) return w;
  return LoadModelFile(path).status();
}

TEST(ConvertTest, MalformedJsonNamesFileAndParserMessage) {
  const absl::Status s = LoadModelText("bad.json", "{\"name\": \"x\", \"layers\": [");
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, s.code());
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.json"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("invalid JSON for octopipe.proto.Model"));

  const absl::Status unknown = LoadModelText("typo.json", "{\"nmae\": \"x\"}");
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, unknown.code());
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("nmae"));
}

// SmallModel as JSON with one edit applied.
std::string EditedModelJson(absl::string_view from, absl::string_view to) {
  std::string json = ProtoToJson(ModelToProto(SmallModel()));
  const size_t at = json.find(std::string(from));
  EXPECT_NE(std::string::npos, at) << from;
  if (at != std::string::npos) json.replace(at, from.size(), std::string(to));
  return json;
}

void ExpectModelError(absl::string_view from, absl::string_view to, absl::string_view fragment) {
  const absl::Status s = LoadModelText("edited.json", EditedModelJson(from, to));
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, s.code()) << to;
  EXPECT_THAT(std::string(s.message()), HasSubstr("edited.json"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(fragment)));
}

TEST(ConvertTest, ModelErrorsNameTheFieldPath) {
  ExpectModelError("\"kind\": \"head\"", "\"kind\": \"lstm\"",
                   "layers[3].kind: unknown layer kind 'lstm'");
  ExpectModelError("\"ffn\": \"256\"", "\"ffn\": \"0\"", "layers[2].dims.ffn must be > 0, got 0");
  ExpectModelError("\"ffn\": \"256\"", "\"ffn\": \"-5\"",
                   "layers[2].dims.ffn must be > 0, got -5");
  ExpectModelError("\"seq_len\": \"128\"", "\"seq_len\": \"0\"",
                   "training.seq_len must be > 0, got 0");
  ExpectModelError("\"forward_s\": 0.00125", "\"forward_s\": -1",
                   "layers[1].measured.forward_s must be finite and 0 or in [1e-12, 1e6] s, got -1");
  ExpectModelError("\"precision\": \"fp16\"", "\"precision\": \"int8\"",
                   "training.precision: unknown precision 'int8'");
  ExpectModelError("\"recompute\": \"selective\"", "\"recompute\": \"some\"",
                   "training.recompute: unknown recompute policy 'some'");
  ExpectModelError("\"attention_kernel\": \"materialized\"", "\"attention_kernel\": \"tiled\"",
                   "training.attention_kernel: unknown attention kernel 'tiled' (valid: flash, "
                   "materialized)");
  ExpectModelError("\"mla_up_proj\"", "\"gelu\"",
                   "training.recompute_modules: unknown module 'gelu' (valid: core_attn, "
                   "layernorm, mla_up_proj, moe_act)");
  ExpectModelError("\"mla_up_proj\"", "\"layernorm\"",
                   "training.recompute_modules: 'layernorm' named twice");
  ExpectModelError("\"recompute\": \"selective\"", "\"recompute\": \"full\"",
                   "training.recompute_modules: names what selective recompute recomputes, but "
                   "training.recompute is 'full'");
}

TEST(ConvertTest, ProtoDefaultsForDegreesAndEnums) {
  proto::Model p = ModelToProto(SmallModel());
  p.mutable_training()->clear_tp_degree();
  p.mutable_training()->clear_zero_degree();
  p.mutable_training()->clear_precision();
  p.mutable_training()->clear_recompute();
  p.mutable_training()->clear_recompute_modules();
  p.mutable_training()->clear_attention_kernel();
  p.mutable_training()->clear_ep_comm_sms();
  absl::StatusOr<ModelGraph> m = ModelFromProto(p);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(1, m->training.tp_degree);
  EXPECT_EQ(1, m->training.zero_degree);
  EXPECT_EQ(Precision::kBf16, m->training.precision);
  EXPECT_EQ(RecomputePolicy::kNone, m->training.recompute);
  EXPECT_EQ(AttentionKernel::kFlash, m->training.attention_kernel);
  EXPECT_TRUE(m->training.recompute_modules == RecomputeModules{});  // core_attn alone
  EXPECT_EQ(kDefaultEpCommSms, m->training.ep_comm_sms);
  // Set to 0 (copy-engine communication) it stays 0; the default is not written to files.
  p.mutable_training()->set_ep_comm_sms(0);
  EXPECT_EQ(0, ModelFromProto(p)->training.ep_comm_sms);
  EXPECT_FALSE(ModelToProto(*m).training().has_ep_comm_sms());
  p.mutable_training()->set_ep_comm_sms(-4);
  EXPECT_THAT(std::string(ModelFromProto(p).status().message()),
              HasSubstr("training.ep_comm_sms must be in [0, 2147483648], got -4"));
  p.mutable_training()->clear_ep_comm_sms();

  // The MoE dispatcher: alltoall by default (not written), flex kept, anything else refused.
  EXPECT_EQ(MoeDispatcher::kAllToAll, m->training.moe_dispatcher);
  EXPECT_TRUE(ModelToProto(*m).training().moe_dispatcher().empty());
  p.mutable_training()->set_moe_dispatcher("flex");
  EXPECT_EQ(MoeDispatcher::kFlex, ModelFromProto(p)->training.moe_dispatcher);
  EXPECT_EQ("flex", ModelToProto(*ModelFromProto(p)).training().moe_dispatcher());
  p.mutable_training()->set_moe_dispatcher("deepep");
  EXPECT_THAT(std::string(ModelFromProto(p).status().message()),
              HasSubstr("training.moe_dispatcher: unknown MoE dispatcher 'deepep' (valid: "
                        "alltoall, flex)"));
  p.mutable_training()->clear_moe_dispatcher();

  p.mutable_training()->clear_micro_batch_size();
  EXPECT_THAT(std::string(ModelFromProto(p).status().message()),
              HasSubstr("training.micro_batch_size must be > 0, got 0"));
}

TEST(ConvertTest, ClusterErrorsNameTheFieldPath) {
  proto::Cluster p = ClusterToProto(*ClusterPreset("mixed-h100-a100"));
  p.mutable_hardware(1)->set_peak_flops(-1);
  absl::StatusOr<Cluster> c = ClusterFromProto(p);
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, c.status().code());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("hardware[1].peak_flops must be finite and in [1, 1e21] FLOP/s, got -1"));

  p = ClusterToProto(*ClusterPreset("mixed-h100-a100"));
  EXPECT_EQ(132, p.hardware(0).sm_count());
  EXPECT_EQ(108, p.hardware(1).sm_count());
  p.mutable_hardware(1)->set_sm_count(-1);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("hardware[1].sm_count must be 0 (unknown) or in [1, 100000], got -1"));

  p = ClusterToProto(*ClusterPreset("h100-4nodes"));
  p.mutable_nodes(1)->mutable_intra_node_link()->set_allreduce_bandwidth(-5);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("nodes[1].intra_node_link.allreduce_bandwidth must be 0 (the link's "
                        "bandwidth) or in [1, 1e21] bytes/s or +inf, got -5"));
  p = ClusterToProto(*ClusterPreset("h100-4nodes"));
  p.mutable_inter_node_link()->set_allreduce_latency_s(-1);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("inter_node_link.allreduce_latency_s must be finite and in [0, 3600] s "
                        "(0: the link's latency), got -1"));
  p = ClusterToProto(*ClusterPreset("h100-4nodes"));
  p.mutable_nodes(0)->mutable_intra_node_link()->set_allreduce_overlapped_bandwidth(-2);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("nodes[0].intra_node_link.allreduce_overlapped_bandwidth must be 0 "
                        "(allreduce_bandwidth) or in [1, 1e21] bytes/s or +inf, got -2"));
  p = ClusterToProto(*ClusterPreset("h100-4nodes"));
  p.mutable_inter_node_link()->set_allreduce_overlapped_latency_s(-3);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("inter_node_link.allreduce_overlapped_latency_s must be finite and in "
                        "[0, 3600] s (0: allreduce_latency_s), got -3"));

  p = ClusterToProto(*ClusterPreset("h100-4nodes"));
  p.mutable_nodes(2)->set_num_devices(0);
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("nodes[2].num_devices must be > 0, got 0"));

  p = ClusterToProto(*ClusterPreset("h100-4nodes"));
  p.mutable_nodes(0)->set_hardware("B200");
  EXPECT_THAT(std::string(ClusterFromProto(p).status().message()),
              HasSubstr("nodes[0].hardware: unknown hardware 'B200'"));
}

}  // namespace
}  // namespace octopipe
