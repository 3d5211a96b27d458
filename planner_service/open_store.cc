#include "planner_service/open_store.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "etcd/client.h"
#include "planner_service/sqlite_store.h"

namespace octopipe {

absl::StatusOr<StoreSpec> ParseStoreSpec(absl::string_view value) {
  StoreSpec spec;
  absl::string_view rest = value;
  if (absl::ConsumePrefix(&rest, "sqlite:")) {
    if (rest.empty()) {
      return absl::InvalidArgumentError("--store=sqlite: needs a directory (sqlite:DIR)");
    }
    spec.kind = StoreSpec::Kind::kSqlite;
    spec.dir = std::string(rest);
    return spec;
  }
  if (absl::ConsumePrefix(&rest, "etcd:")) {
    absl::StatusOr<std::vector<std::string>> endpoints = etcd::ParseEndpoints(rest);
    if (!endpoints.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--store=", value, ": ", endpoints.status().message()));
    }
    spec.kind = StoreSpec::Kind::kEtcd;
    spec.endpoints = std::move(*endpoints);
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--store='", value,
                   "' is neither sqlite:DIR nor etcd:HOST:PORT[,HOST:PORT...]"));
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const StoreSpec& spec,
                                                 const EtcdStoreOptions& etcd) {
  if (spec.kind == StoreSpec::Kind::kEtcd) {
    absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(spec.endpoints, etcd);
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(*store));
  }
  std::error_code ec;
  std::filesystem::create_directories(spec.dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--store: cannot create '", spec.dir, "': ", ec.message()));
  }
  absl::StatusOr<std::unique_ptr<SqliteStore>> store =
      SqliteStore::Open((std::filesystem::path(spec.dir) / "planner.db").string());
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(*store));
}

}  // namespace octopipe
