#include "planner_service/etcd_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "planner_service/etcd_records.pb.h"

namespace octopipe {
namespace {

using etcdserverpb::Compare;
using etcdserverpb::KeyValue;
using etcdserverpb::TxnRequest;
using etcdserverpb::TxnResponse;

// How many times NextJobNumber retries a compare-and-swap that lost to another writer.
constexpr int kCounterAttempts = 100;
// Keys per page when listing a prefix.
constexpr int64_t kPageSize = 500;

// An id as one key segment: '%' and '/' escaped, so that no id is a prefix path of another.
std::string Escape(const std::string& id) {
  std::string out;
  for (char c : id) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else {
      out += c;
    }
  }
  return out;
}

void AddExists(TxnRequest& txn, const std::string& key) {
  Compare* c = txn.add_compare();
  c->set_key(key);
  c->set_target(Compare::CREATE);
  c->set_result(Compare::GREATER);
  c->set_create_revision(0);
}

void AddAbsent(TxnRequest& txn, const std::string& key) {
  Compare* c = txn.add_compare();
  c->set_key(key);
  c->set_target(Compare::CREATE);
  c->set_result(Compare::EQUAL);
  c->set_create_revision(0);
}

void AddPut(TxnRequest& txn, const std::string& key, const std::string& value) {
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
}

// Whether the failure branch's read `index` found its key.
bool Found(const TxnResponse& r, int index) {
  return index < r.responses_size() && r.responses(index).response_range().kvs_size() > 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(std::vector<std::string> endpoints,
                                                           EtcdStoreOptions options) {
  absl::StatusOr<std::unique_ptr<etcd::Client>> client =
      etcd::Client::Connect(std::move(endpoints), options.client);
  if (!client.ok()) return client.status();
  return Open(std::shared_ptr<etcd::Client>(std::move(*client)), std::move(options));
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(std::shared_ptr<etcd::Client> client,
                                                           EtcdStoreOptions options) {
  if (options.prefix.empty() || options.prefix.front() != '/' || options.prefix.back() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd store prefix '", options.prefix, "' must start with '/' and not end with one"));
  }
  auto store = absl::WrapUnique(new EtcdStore(std::move(client), std::move(options)));
  if (absl::Status s = store->Init(); !s.ok()) return s;
  return store;
}

EtcdStore::EtcdStore(std::shared_ptr<etcd::Client> client, EtcdStoreOptions options)
    : client_(std::move(client)), options_(std::move(options)) {}

std::string EtcdStore::Describe() const {
  return absl::StrCat("etcd:", absl::StrJoin(client_->endpoints(), ","), " prefix ",
                      options_.prefix);
}

absl::Status EtcdStore::Init() {
  // Write the schema version into an empty prefix; read what is there otherwise.
  const std::string key = options_.prefix + "/schema_version";
  TxnRequest txn;
  AddAbsent(txn, key);
  AddPut(txn, key, absl::StrCat(kSchemaVersion));
  txn.add_failure()->mutable_request_range()->set_key(key);
  absl::StatusOr<TxnResponse> r = client_->Txn(txn);
  if (!r.ok()) return Wrap(r.status(), "open");
  if (r->succeeded()) return absl::OkStatus();
  int stored = 0;
  const std::string value =
      Found(*r, 0) ? r->responses(0).response_range().kvs(0).value() : std::string();
  if (!absl::SimpleAtoi(value, &stored)) {
    return absl::DataLossError(absl::StrCat("store ", Describe(), ": ", key, " is '", value,
                                            "', not a schema version"));
  }
  if (stored > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("store ", Describe(), ": schema version ", stored,
                     " is newer than this binary supports (", kSchemaVersion, ")"));
  }
  return absl::OkStatus();
}

void EtcdStore::SetFence(std::optional<EtcdFence> fence) {
  absl::MutexLock lock(&mu_);
  fence_ = std::move(fence);
}

std::string EtcdStore::Key(const char* kind, const std::string& id) const {
  return absl::StrCat(options_.prefix, "/", kind, "/", Escape(id));
}

std::string EtcdStore::PlanKey(const std::string& job_id, int64_t version) const {
  return absl::StrFormat("%s/%020d", Key("plans", job_id), version);
}

absl::Status EtcdStore::Wrap(const absl::Status& status, const std::string& what) const {
  absl::StatusCode code = status.code();
  if (code == absl::StatusCode::kInvalidArgument &&
      absl::StrContains(status.message(), "request is too large")) {
    code = absl::StatusCode::kResourceExhausted;
  }
  return absl::Status(code, absl::StrCat("store ", Describe(), ": ", what, ": ", status.message()));
}

absl::StatusOr<std::vector<KeyValue>> EtcdStore::List(const std::string& prefix, bool keys_only) {
  std::vector<KeyValue> out;
  etcdserverpb::RangeRequest range;
  range.set_key(prefix);
  range.set_range_end(etcd::PrefixEnd(prefix));
  range.set_limit(kPageSize);
  range.set_keys_only(keys_only);
  int64_t revision = 0;  // every page at the first page's revision: one consistent snapshot
  while (true) {
    range.set_revision(revision);
    absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
    if (!r.ok()) return Wrap(r.status(), absl::StrCat("list ", prefix));
    if (revision == 0) revision = r->header().revision();
    for (KeyValue& kv : *r->mutable_kvs()) out.push_back(std::move(kv));
    if (!r->more() || r->kvs_size() == 0) break;
    range.set_key(out.back().key() + std::string(1, '\0'));
  }
  return out;
}

absl::StatusOr<TxnResponse> EtcdStore::FencedTxn(TxnRequest txn,
                                                 const std::vector<std::string>& explain,
                                                 const std::string& what) {
  std::optional<EtcdFence> fence;
  {
    absl::MutexLock lock(&mu_);
    fence = fence_;
  }
  if (fence.has_value()) {
    Compare c;
    c.set_key(fence->key);
    c.set_target(Compare::CREATE);
    c.set_result(Compare::EQUAL);
    c.set_create_revision(fence->create_revision);
    *txn.add_compare() = std::move(c);
    etcdserverpb::RangeRequest* read = txn.add_failure()->mutable_request_range();
    read->set_key(fence->key);
    read->set_keys_only(true);
  }
  for (const std::string& key : explain) {
    txn.add_failure()->mutable_request_range()->set_key(key);
  }
  absl::StatusOr<TxnResponse> r = client_->Txn(txn);
  if (!r.ok()) return Wrap(r.status(), what);
  if (!r->succeeded() && fence.has_value()) {
    const auto& kvs = r->responses(0).response_range().kvs();
    if (kvs.empty() || kvs[0].create_revision() != fence->create_revision) {
      fenced_refusals_.fetch_add(1);
      return absl::AbortedError(absl::StrCat(
          "store ", Describe(), ": ", what, ": refused: this replica no longer holds ",
          fence->key, " (revision ", fence->create_revision, "); another replica leads"));
    }
    // The fence held: drop its read so that the caller's reads start at 0.
    r->mutable_responses()->DeleteSubrange(0, 1);
  }
  return r;
}

// ---- Jobs. ----

absl::Status EtcdStore::WriteJob(const proto::Job& job, const std::string& bytes) {
  TxnRequest txn;
  AddPut(txn, Key("jobs", job.id()), bytes);
  return FencedTxn(std::move(txn), {}, absl::StrCat("put job '", job.id(), "'")).status();
}

absl::Status EtcdStore::DeleteJob(const std::string& id) {
  const std::string job_key = Key("jobs", id);
  TxnRequest txn;
  AddExists(txn, job_key);
  txn.add_success()->mutable_request_delete_range()->set_key(job_key);
  const std::string plans = Key("plans", id) + "/";
  etcdserverpb::DeleteRangeRequest* versions = txn.add_success()->mutable_request_delete_range();
  versions->set_key(plans);
  versions->set_range_end(etcd::PrefixEnd(plans));
  txn.add_success()->mutable_request_delete_range()->set_key(Key("calibration", id));
  absl::StatusOr<TxnResponse> r =
      FencedTxn(std::move(txn), {}, absl::StrCat("delete job '", id, "'"));
  if (!r.ok()) return r.status();
  if (!r->succeeded()) {
    return absl::NotFoundError(absl::StrCat("store ", Describe(), ": no job '", id, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<proto::Job>> EtcdStore::ReadJobs() {
  absl::StatusOr<std::vector<KeyValue>> kvs = List(options_.prefix + "/jobs/", false);
  if (!kvs.ok()) return kvs.status();
  std::vector<proto::Job> jobs;
  jobs.reserve(kvs->size());
  for (const KeyValue& kv : *kvs) {
    proto::Job job;
    if (!job.ParseFromString(kv.value())) {
      return absl::DataLossError(absl::StrCat("store ", Describe(), ": ", kv.key(),
                                              " does not parse as octopipe.proto.Job"));
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::optional<proto::Job>> EtcdStore::ReadJob(const std::string& id) {
  etcdserverpb::RangeRequest range;
  range.set_key(Key("jobs", id));
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  if (!r.ok()) return Wrap(r.status(), absl::StrCat("load job '", id, "'"));
  if (r->kvs_size() == 0) return std::optional<proto::Job>();
  proto::Job job;
  if (!job.ParseFromString(r->kvs(0).value())) {
    return absl::DataLossError(absl::StrCat("store ", Describe(), ": ", r->kvs(0).key(),
                                            " does not parse as octopipe.proto.Job"));
  }
  return std::optional<proto::Job>(std::move(job));
}

// ---- Plan versions. ----

absl::Status EtcdStore::WritePlanVersion(const proto::PlanVersion& version,
                                         const std::string& bytes) {
  const std::string job_key = Key("jobs", version.job_id());
  const std::string key = PlanKey(version.job_id(), version.version());
  TxnRequest txn;
  AddExists(txn, job_key);
  AddAbsent(txn, key);
  AddPut(txn, key, bytes);
  absl::StatusOr<TxnResponse> r =
      FencedTxn(std::move(txn), {job_key, key},
                absl::StrCat("put plan version ", version.version(), " of job '",
                             version.job_id(), "'"));
  if (!r.ok()) return r.status();
  if (r->succeeded()) return absl::OkStatus();
  if (!Found(*r, 0)) {
    return absl::FailedPreconditionError(
        absl::StrCat("store ", Describe(), ": plan version ", version.version(), " for job '",
                     version.job_id(), "', which is not stored (PutJob first)"));
  }
  // The same bytes: this write landed already (a retry of an attempt that went unanswered).
  if (Found(*r, 1) && r->responses(1).response_range().kvs(0).value() == bytes) {
    return absl::OkStatus();
  }
  return absl::AlreadyExistsError(absl::StrCat("store ", Describe(), ": plan version ",
                                               version.version(), " of job '", version.job_id(),
                                               "' already exists"));
}

absl::StatusOr<std::vector<proto::PlanVersion>> EtcdStore::LoadPlanVersions(
    const std::string& job_id) {
  absl::StatusOr<std::vector<KeyValue>> kvs = List(Key("plans", job_id) + "/", false);
  if (!kvs.ok()) return kvs.status();
  std::vector<proto::PlanVersion> versions;
  versions.reserve(kvs->size());
  for (const KeyValue& kv : *kvs) {  // key order is version order (zero-padded)
    proto::PlanVersion version;
    if (!version.ParseFromString(kv.value())) {
      return absl::DataLossError(absl::StrCat("store ", Describe(), ": ", kv.key(),
                                              " does not parse as octopipe.proto.PlanVersion"));
    }
    versions.push_back(std::move(version));
  }
  return versions;
}

// ---- Calibration. ----

absl::Status EtcdStore::WriteCalibration(const std::string& job_id,
                                         const std::vector<double>& layer_factors) {
  store::StoredCalibration value;
  value.mutable_layer_factors()->Add(layer_factors.begin(), layer_factors.end());
  const std::string job_key = Key("jobs", job_id);
  TxnRequest txn;
  AddExists(txn, job_key);
  AddPut(txn, Key("calibration", job_id), value.SerializeAsString());
  absl::StatusOr<TxnResponse> r = FencedTxn(std::move(txn), {job_key},
                                            absl::StrCat("put calibration of job '", job_id, "'"));
  if (!r.ok()) return r.status();
  if (!r->succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat("store ", Describe(),
                                                      ": calibration for job '", job_id,
                                                      "', which is not stored (PutJob first)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> EtcdStore::LoadCalibration(const std::string& job_id) {
  etcdserverpb::RangeRequest range;
  range.set_key(Key("calibration", job_id));
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  if (!r.ok()) return Wrap(r.status(), absl::StrCat("load calibration of job '", job_id, "'"));
  if (r->kvs_size() == 0) return std::vector<double>();
  store::StoredCalibration value;
  if (!value.ParseFromString(r->kvs(0).value())) {
    return absl::DataLossError(absl::StrCat("store ", Describe(), ": calibration of job '",
                                            job_id, "' does not parse"));
  }
  return std::vector<double>(value.layer_factors().begin(), value.layer_factors().end());
}

// ---- Counters. ----

absl::StatusOr<int64_t> EtcdStore::NextJobNumber() {
  const std::string key = options_.prefix + "/counters/job";
  for (int attempt = 0; attempt < kCounterAttempts; ++attempt) {
    etcdserverpb::RangeRequest range;
    range.set_key(key);
    absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
    if (!r.ok()) return Wrap(r.status(), "next job number");
    int64_t last = 0;
    TxnRequest txn;
    Compare* c = txn.add_compare();
    c->set_key(key);
    if (r->kvs_size() == 0) {
      // No counter yet: continue after the highest "job-N" stored.
      absl::StatusOr<std::vector<KeyValue>> jobs = List(options_.prefix + "/jobs/", true);
      if (!jobs.ok()) return jobs.status();
      for (const KeyValue& kv : *jobs) {
        absl::string_view id = kv.key();
        id.remove_prefix(options_.prefix.size() + std::string("/jobs/").size());
        int64_t n = 0;
        if (absl::ConsumePrefix(&id, "job-") && absl::SimpleAtoi(id, &n)) last = std::max(last, n);
      }
      c->set_target(Compare::CREATE);
      c->set_create_revision(0);
    } else {
      if (!absl::SimpleAtoi(r->kvs(0).value(), &last)) {
        return absl::DataLossError(absl::StrCat("store ", Describe(), ": ", key, " is '",
                                                r->kvs(0).value(), "', not a number"));
      }
      c->set_target(Compare::MOD);
      c->set_mod_revision(r->kvs(0).mod_revision());
    }
    c->set_result(Compare::EQUAL);
    AddPut(txn, key, absl::StrCat(last + 1));
    absl::StatusOr<TxnResponse> t = FencedTxn(std::move(txn), {}, "next job number");
    if (!t.ok()) return t.status();
    if (t->succeeded()) return last + 1;
    // Another writer took a number first: read again.
  }
  return absl::UnavailableError(absl::StrCat("store ", Describe(), ": next job number: ",
                                             kCounterAttempts,
                                             " attempts lost to concurrent writers"));
}

// ---- Agents. ----

absl::Status EtcdStore::WriteAgent(const AgentRecord& record) {
  store::StoredAgent value;
  value.set_node_id(record.node_id);
  value.set_num_devices(record.num_devices);
  value.set_address(record.address);
  value.set_registered_unix_ms(record.registered_unix_ms);
  value.set_lost_unix_ms(record.lost_unix_ms);
  TxnRequest txn;
  AddPut(txn, Key("agents", record.node_id), value.SerializeAsString());
  return FencedTxn(std::move(txn), {}, absl::StrCat("put agent '", record.node_id, "'"))
      .status();
}

absl::Status EtcdStore::DeleteAgent(const std::string& node_id) {
  const std::string key = Key("agents", node_id);
  TxnRequest txn;
  AddExists(txn, key);
  txn.add_success()->mutable_request_delete_range()->set_key(key);
  absl::StatusOr<TxnResponse> r =
      FencedTxn(std::move(txn), {}, absl::StrCat("delete agent '", node_id, "'"));
  if (!r.ok()) return r.status();
  if (!r->succeeded()) {
    return absl::NotFoundError(absl::StrCat("store ", Describe(), ": no agent '", node_id, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AgentRecord>> EtcdStore::LoadAgents() {
  absl::StatusOr<std::vector<KeyValue>> kvs = List(options_.prefix + "/agents/", false);
  if (!kvs.ok()) return kvs.status();
  std::vector<AgentRecord> agents;
  for (const KeyValue& kv : *kvs) {
    store::StoredAgent value;
    if (!value.ParseFromString(kv.value())) {
      return absl::DataLossError(
          absl::StrCat("store ", Describe(), ": ", kv.key(), " does not parse as an agent"));
    }
    agents.push_back({value.node_id(), value.num_devices(), value.address(),
                      value.registered_unix_ms(), value.lost_unix_ms()});
  }
  std::sort(agents.begin(), agents.end(),
            [](const AgentRecord& a, const AgentRecord& b) { return a.node_id < b.node_id; });
  return agents;
}

}  // namespace octopipe
