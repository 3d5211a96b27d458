// The planner's --store flag: which Store (store.h) holds its state.
//   sqlite:DIR                          DIR/planner.db, one local file (the default, with DIR
//                                       the --state_dir)
//   etcd:HOST:PORT[,HOST:PORT...]       an etcd cluster (etcd_store.h), shared by replicas
#ifndef OCTOPIPE_PLANNER_SERVICE_OPEN_STORE_H_
#define OCTOPIPE_PLANNER_SERVICE_OPEN_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner_service/etcd_store.h"
#include "planner_service/store.h"

namespace octopipe {

struct StoreSpec {
  enum class Kind { kSqlite, kEtcd };
  Kind kind = Kind::kSqlite;
  std::string dir;                     // kSqlite
  std::vector<std::string> endpoints;  // kEtcd
};

// kInvalidArgument naming the value and what is expected.
absl::StatusOr<StoreSpec> ParseStoreSpec(absl::string_view value);

// Opens the store `spec` names; `etcd` configures an etcd store (prefix, timeouts).
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const StoreSpec& spec,
                                                 const EtcdStoreOptions& etcd = {});

}  // namespace octopipe

#endif  // OCTOPIPE_PLANNER_SERVICE_OPEN_STORE_H_
