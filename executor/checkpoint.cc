#include "executor/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "core/status_macros.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/layers/vocab_head.h"

namespace octopipe::executor {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'O', 'P', 'C', 'K', 'P', 'T', '0', '1'};
constexpr uint32_t kFormatVersion = 1;
constexpr char kIterPrefix[] = "iter-";

uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string IterationDir(const std::string& root, int64_t iteration) {
  return absl::StrFormat("%s/%s%09d", root, kIterPrefix, iteration);
}

// --- serialization: little helpers over a byte string ---

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void PutTensors(std::string* out, const std::vector<Tensor>& tensors) {
  Put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  for (const Tensor& t : tensors) {
    Put<int64_t>(out, t.rows());
    Put<int64_t>(out, t.cols());
    out->append(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(float));
  }
}

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  template <typename T>
  absl::StatusOr<T> Get(const char* what) {
    if (bytes_.size() - pos_ < sizeof(T)) return Truncated(what);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  absl::StatusOr<std::string> GetString(const char* what, size_t n) {
    if (bytes_.size() - pos_ < n) return Truncated(what);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  absl::StatusOr<std::vector<Tensor>> GetTensors(const char* what) {
    ASSIGN_OR_RETURN(const uint32_t n, Get<uint32_t>(what));
    std::vector<Tensor> tensors;
    for (uint32_t i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(const int64_t rows, Get<int64_t>(what));
      ASSIGN_OR_RETURN(const int64_t cols, Get<int64_t>(what));
      if (rows < 0 || cols < 0 || (rows > 0 && cols > (1ll << 40) / rows)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", path_, ": ", what, " ", i, " has shape ", rows, "x", cols));
      }
      const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
      if (bytes_.size() - pos_ < bytes) return Truncated(what);
      Tensor t(rows, cols);
      std::memcpy(t.data(), bytes_.data() + pos_, bytes);
      pos_ += bytes;
      tensors.push_back(std::move(t));
    }
    return tensors;
  }

  size_t pos() const { return pos_; }

 private:
  absl::Status Truncated(const char* what) const {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path_, ": truncated at byte ", pos_, " (", what, ")"));
  }
  const std::string& bytes_;
  const std::string& path_;
  size_t pos_ = 0;
};

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("checkpoint: ", what, " ", path, ": ",
                                          std::strerror(errno)));
}

// Writes `bytes` to `path` atomically: temporary file, fsync, rename, fsync of the directory.
absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  // Unique across processes of different hosts or containers writing the same file on shared
  // storage (replicas of a layer may all write it, e.g. a failure snapshot): pid, host and a
  // per-process counter.
  static std::atomic<int> counter{0};
  static const std::string host = [] {
    char name[256] = {};
    return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("host");
  }();
  const std::string tmp = absl::StrCat(path, ".tmp.", host, ".", getpid(), ".", counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status s = ErrnoError("cannot write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = ErrnoError("cannot fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError("cannot rename to", path);
    ::unlink(tmp.c_str());
    return s;
  }
  const std::string dir = fs::path(path).parent_path().string();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoError("cannot open directory", dir);
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) return ErrnoError("cannot fsync directory", dir);
  return absl::OkStatus();
}

// Checkpoint iterations present under root, newest first.
std::vector<int64_t> IterationsNewestFirst(const std::string& root) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    int64_t it = 0;
    if (e.is_directory(ec) && absl::StartsWith(name, kIterPrefix) &&
        absl::SimpleAtoi(name.substr(sizeof(kIterPrefix) - 1), &it)) {
      out.push_back(it);
    }
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

absl::Status CheckComplete(const std::string& root, int64_t iteration, const ModelSpec& spec) {
  for (int l = 0; l < static_cast<int>(spec.kinds.size()); ++l) {
    const std::string path = LayerCheckpointPath(root, iteration, l);
    ASSIGN_OR_RETURN(LayerCheckpoint c, ReadLayerCheckpoint(path));
    if (c.layer != l || c.iteration != iteration || c.kind != spec.kinds[l]) {
      return absl::DataLossError(absl::StrCat("checkpoint ", path, ": holds layer ", c.layer, " (",
                                              c.kind, ") of iteration ", c.iteration,
                                              ", expected layer ", l, " (", spec.kinds[l],
                                              ") of iteration ", iteration));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string LayerCheckpointPath(const std::string& root, int64_t iteration, int layer) {
  return absl::StrFormat("%s/layer-%05d.ckpt", IterationDir(root, iteration), layer);
}

absl::Status WriteLayerCheckpoint(const std::string& root, const LayerCheckpoint& c) {
  std::string bytes(kMagic, sizeof(kMagic));
  Put<uint32_t>(&bytes, kFormatVersion);
  Put<int32_t>(&bytes, c.layer);
  Put<int64_t>(&bytes, c.iteration);
  Put<int64_t>(&bytes, c.optimizer_step);
  Put<uint32_t>(&bytes, static_cast<uint32_t>(c.kind.size()));
  bytes += c.kind;
  PutTensors(&bytes, c.params);
  PutTensors(&bytes, c.first_moments);
  PutTensors(&bytes, c.second_moments);
  Put<uint64_t>(&bytes, Fnv1a(bytes));
  const std::string dir = IterationDir(root, c.iteration);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot create directory ", dir, ": ", ec.message()));
  }
  return WriteAtomically(LayerCheckpointPath(root, c.iteration, c.layer), bytes);
}

absl::StatusOr<std::string> ReadLayerCheckpointBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("checkpoint ", path, ": no such file"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  RETURN_IF_ERROR(ParseLayerCheckpoint(bytes, path).status());
  return bytes;
}

absl::StatusOr<std::string> StoreLayerCheckpointBytes(const std::string& root,
                                                      const std::string& bytes) {
  ASSIGN_OR_RETURN(LayerCheckpoint c, ParseLayerCheckpoint(bytes, "received checkpoint file"));
  const std::string dir = IterationDir(root, c.iteration);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot create directory ", dir, ": ", ec.message()));
  }
  const std::string path = LayerCheckpointPath(root, c.iteration, c.layer);
  RETURN_IF_ERROR(WriteAtomically(path, bytes));
  return path;
}

std::vector<std::pair<int64_t, int>> ListLayerCheckpoints(const std::string& root) {
  std::vector<std::pair<int64_t, int>> out;
  for (int64_t it : IterationsNewestFirst(root)) {
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(IterationDir(root, it), ec)) {
      const std::string name = e.path().filename().string();
      int layer = 0;
      if (absl::StartsWith(name, "layer-") && absl::EndsWith(name, ".ckpt") &&
          absl::SimpleAtoi(name.substr(6, name.size() - 6 - 5), &layer)) {
        out.emplace_back(it, layer);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<LayerCheckpoint> ReadLayerCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("checkpoint ", path, ": no such file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseLayerCheckpoint(ss.str(), path);
}

absl::StatusOr<LayerCheckpoint> ParseLayerCheckpoint(const std::string& bytes,
                                                     const std::string& path) {
  if (bytes.size() < sizeof(kMagic) + sizeof(uint64_t) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": not a checkpoint (magic)"));
  }
  const std::string body = bytes.substr(0, bytes.size() - sizeof(uint64_t));
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof(stored));
  if (Fnv1a(body) != stored) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": checksum mismatch"));
  }
  Reader r(body, path);
  ASSIGN_OR_RETURN(std::string magic, r.GetString("magic", sizeof(kMagic)));
  ASSIGN_OR_RETURN(const uint32_t version, r.Get<uint32_t>("version"));
  if (version != kFormatVersion) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, ": format version ", version, ", expected ",
                     kFormatVersion));
  }
  LayerCheckpoint c;
  ASSIGN_OR_RETURN(c.layer, r.Get<int32_t>("layer"));
  ASSIGN_OR_RETURN(c.iteration, r.Get<int64_t>("iteration"));
  ASSIGN_OR_RETURN(c.optimizer_step, r.Get<int64_t>("optimizer step"));
  ASSIGN_OR_RETURN(const uint32_t kind_size, r.Get<uint32_t>("kind"));
  ASSIGN_OR_RETURN(c.kind, r.GetString("kind", kind_size));
  ASSIGN_OR_RETURN(c.params, r.GetTensors("parameter"));
  ASSIGN_OR_RETURN(c.first_moments, r.GetTensors("first moment"));
  ASSIGN_OR_RETURN(c.second_moments, r.GetTensors("second moment"));
  if (r.pos() != body.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", body.size() - r.pos(),
                                            " trailing bytes"));
  }
  const bool has_moments = c.optimizer_step > 0;
  if (c.first_moments.size() != (has_moments ? c.params.size() : 0) ||
      c.second_moments.size() != c.first_moments.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", c.params.size(),
                                            " parameters but ", c.first_moments.size(), "/",
                                            c.second_moments.size(), " moments at step ",
                                            c.optimizer_step));
  }
  for (size_t i = 0; i < c.first_moments.size(); ++i) {
    for (const Tensor* m : {&c.first_moments[i], &c.second_moments[i]}) {
      if (m->rows() != c.params[i].rows() || m->cols() != c.params[i].cols()) {
        return absl::DataLossError(
            absl::StrCat("checkpoint ", path, ": moment of parameter ", i, " differs in shape"));
      }
    }
  }
  return c;
}

absl::StatusOr<int64_t> LatestCompleteCheckpoint(const std::string& root, const ModelSpec& spec) {
  for (int64_t it : IterationsNewestFirst(root)) {
    if (CheckComplete(root, it, spec).ok()) return it;
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint under ", root));
}

absl::StatusOr<std::vector<LayerCheckpoint>> RankLayerCheckpoints(
    int64_t iteration, std::vector<std::unique_ptr<Layer>>& layers, const AdamW& optimizer) {
  const std::vector<Tensor>& m = optimizer.first_moments();
  const std::vector<Tensor>& v = optimizer.second_moments();
  std::vector<LayerCheckpoint> out;
  size_t next = 0;  // index into the optimizer's moments (ApplyAdamW order)
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l] == nullptr) continue;
    LayerCheckpoint c;
    c.layer = static_cast<int>(l);
    c.iteration = iteration;
    c.optimizer_step = optimizer.step();
    c.kind = std::string(layers[l]->kind());
    for (Tensor* p : layers[l]->params()) {
      c.params.push_back(*p);
      if (!m.empty()) {
        if (next >= m.size()) {
          return absl::InternalError(absl::StrCat("checkpoint: the optimizer holds ", m.size(),
                                                  " moments, fewer than the rank's parameters"));
        }
        c.first_moments.push_back(m[next]);
        c.second_moments.push_back(v[next]);
      }
      ++next;
    }
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status SaveRankCheckpoint(const std::string& root, int64_t iteration,
                                std::vector<std::unique_ptr<Layer>>& layers,
                                const AdamW& optimizer) {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (dynamic_cast<const VocabShardHead*>(layers[l].get()) != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint: layer ", l, " is a vocabulary shard of the head; merge the shards into "
          "the whole head (WholeHeadOf) and write that"));
    }
    if (dynamic_cast<const VocabShardEmbedding*>(layers[l].get()) != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint: layer ", l, " is a vocabulary shard of the embedding; merge the shards "
          "into the whole embedding (WholeEmbeddingOf) and write that"));
    }
  }
  ASSIGN_OR_RETURN(std::vector<LayerCheckpoint> checkpoints,
                   RankLayerCheckpoints(iteration, layers, optimizer));
  for (const LayerCheckpoint& c : checkpoints) RETURN_IF_ERROR(WriteLayerCheckpoint(root, c));
  return absl::OkStatus();
}

// A layer SaveWholeRankLayers writes: whole on this rank (not a vocabulary shard) and, with
// `whole`, one it says this rank holds whole.
static bool IsWholeRankLayer(const Layer* layer, int index,
                             const std::function<bool(int layer)>& whole) {
  if (dynamic_cast<const VocabShardHead*>(layer) != nullptr ||
      dynamic_cast<const VocabShardEmbedding*>(layer) != nullptr) {
    return false;
  }
  return !whole || whole(index);
}

absl::StatusOr<int> SaveWholeRankLayers(const std::string& root, int64_t iteration,
                                        std::vector<std::unique_ptr<Layer>>& layers,
                                        const AdamW& optimizer,
                                        const std::function<bool(int layer)>& whole) {
  ASSIGN_OR_RETURN(std::vector<LayerCheckpoint> checkpoints,
                   RankLayerCheckpoints(iteration, layers, optimizer));
  int written = 0;
  for (const LayerCheckpoint& c : checkpoints) {
    if (!IsWholeRankLayer(layers[c.layer].get(), c.layer, whole)) continue;
    RETURN_IF_ERROR(WriteLayerCheckpoint(root, c));
    ++written;
  }
  return written;
}

int WholeRankLayerCount(const std::vector<std::unique_ptr<Layer>>& layers,
                        const std::function<bool(int layer)>& whole) {
  int n = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] && IsWholeRankLayer(layers[i].get(), static_cast<int>(i), whole)) ++n;
  }
  return n;
}

namespace {

// A whole head's checkpoint cut to `shard`'s part (its params() order). kFailedPrecondition
// naming the file unless it holds a head's two parameters, wide enough for the shard.
absl::Status CutToShard(const VocabShardHead& shard, const std::string& path,
                        LayerCheckpoint* c) {
  const VocabRange r = shard.range();
  if (c->params.size() != 2 || c->params[1].cols() < r.end) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, ": not a whole head with vocabulary columns [", r.begin, ", ", r.end,
        ") (", c->params.size(), " parameters)"));
  }
  c->params = shard.SliceOfWhole(c->params);
  if (!c->first_moments.empty()) {
    c->first_moments = shard.SliceOfWhole(c->first_moments);
    c->second_moments = shard.SliceOfWhole(c->second_moments);
  }
  return absl::OkStatus();
}

// A whole embedding's checkpoint cut to `shard`'s rows. kFailedPrecondition naming the file
// unless it holds one table with enough rows for the shard.
absl::Status CutToShard(const VocabShardEmbedding& shard, const std::string& path,
                        LayerCheckpoint* c) {
  const VocabRange r = shard.range();
  if (c->params.size() != 1 || c->params[0].rows() < r.end) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, ": not a whole embedding with vocabulary rows [", r.begin, ", ",
        r.end, ") (", c->params.size(), " parameters)"));
  }
  c->params = shard.SliceOfWhole(c->params);
  if (!c->first_moments.empty()) {
    c->first_moments = shard.SliceOfWhole(c->first_moments);
    c->second_moments = shard.SliceOfWhole(c->second_moments);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadRankCheckpoint(const std::string& root, int64_t iteration,
                                std::vector<std::unique_ptr<Layer>>& layers, AdamW* optimizer,
                                const ShardCutter& cut) {
  std::vector<Tensor> m, v;
  int64_t step = -1;
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l] == nullptr) continue;
    const std::string path = LayerCheckpointPath(root, iteration, static_cast<int>(l));
    ASSIGN_OR_RETURN(LayerCheckpoint c, ReadLayerCheckpoint(path));
    if (const auto* shard = dynamic_cast<const VocabShardHead*>(layers[l].get());
        shard != nullptr && c.kind == shard->kind()) {
      RETURN_IF_ERROR(CutToShard(*shard, path, &c));
    }
    if (const auto* shard = dynamic_cast<const VocabShardEmbedding*>(layers[l].get());
        shard != nullptr && c.kind == shard->kind()) {
      RETURN_IF_ERROR(CutToShard(*shard, path, &c));
    }
    if (cut && c.kind == layers[l]->kind()) {
      for (std::vector<Tensor>* part : {&c.params, &c.first_moments, &c.second_moments}) {
        if (part->empty()) continue;
        absl::StatusOr<std::vector<Tensor>> shard = cut(static_cast<int>(l), *part);
        if (!shard.ok()) {
          return absl::FailedPreconditionError(
              absl::StrCat("checkpoint ", path, ": ", shard.status().message()));
        }
        *part = std::move(*shard);
      }
    }
    std::vector<Tensor*> params = layers[l]->params();
    if (c.kind != layers[l]->kind() || c.params.size() != params.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, ": layer ", l, " is ", c.kind, " with ", c.params.size(),
          " parameters, the model's is ", layers[l]->kind(), " with ", params.size()));
    }
    if (step >= 0 && c.optimizer_step != step) {
      return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, ": optimizer step ",
                                                        c.optimizer_step, ", other layers ", step));
    }
    step = c.optimizer_step;
    for (size_t j = 0; j < params.size(); ++j) {
      if (c.params[j].rows() != params[j]->rows() || c.params[j].cols() != params[j]->cols()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", path, ": parameter ", j, " of layer ", l, " is ", c.params[j].rows(),
            "x", c.params[j].cols(), ", the model's ", params[j]->rows(), "x", params[j]->cols()));
      }
    }
    for (size_t j = 0; j < params.size(); ++j) *params[j] = std::move(c.params[j]);
    for (Tensor& t : c.first_moments) m.push_back(std::move(t));
    for (Tensor& t : c.second_moments) v.push_back(std::move(t));
  }
  return optimizer->Restore(std::max<int64_t>(step, 0), std::move(m), std::move(v));
}

absl::StatusOr<int> PruneCheckpoints(const std::string& root, const ModelSpec& spec, int keep) {
  if (keep < 1) return absl::InvalidArgumentError(absl::StrCat("keep ", keep, " < 1"));
  int complete = 0, removed = 0;
  for (int64_t it : IterationsNewestFirst(root)) {
    if (complete < keep) {
      if (CheckComplete(root, it, spec).ok()) ++complete;
      continue;
    }
    std::error_code ec;
    fs::remove_all(IterationDir(root, it), ec);
    // Removed meanwhile by someone else (another pruner): done. A replicated copy landing while
    // it went leaves the directory not empty: skipped, the next prune takes it.
    const bool landed = ec == std::errc::directory_not_empty;
    if (ec == std::errc::no_such_file_or_directory || landed) ec.clear();
    if (ec) {
      return absl::InternalError(absl::StrCat("checkpoint: cannot remove ",
                                              IterationDir(root, it), ": ", ec.message()));
    }
    if (!landed) ++removed;
  }
  return removed;
}

}  // namespace octopipe::executor
