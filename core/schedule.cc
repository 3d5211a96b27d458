#include "core/schedule.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace octopipe {

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kF: return "F";
    case OpKind::kB: return "B";
    case OpKind::kW: return "W";
    case OpKind::kBW: return "BW";
    case OpKind::kR: return "R";
  }
  return "?";
}

std::string OpToString(const Op& op) {
  return absl::StrCat(OpKindName(op.kind), op.stage, ".", op.microbatch);
}

absl::StatusOr<Op> ParseOp(absl::string_view text) {
  Op op;
  absl::string_view rest = text;
  if (rest.substr(0, 2) == "BW") {
    op.kind = OpKind::kBW;
    rest.remove_prefix(2);
  } else if (!rest.empty() && (rest[0] == 'F' || rest[0] == 'B' || rest[0] == 'W' ||
                               rest[0] == 'R')) {
    op.kind = rest[0] == 'F'   ? OpKind::kF
              : rest[0] == 'B' ? OpKind::kB
              : rest[0] == 'W' ? OpKind::kW
                               : OpKind::kR;
    rest.remove_prefix(1);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", text, "': expected KIND STAGE.MICROBATCH with KIND in F, B, W, BW, R"));
  }
  const size_t dot = rest.find('.');
  int stage = -1, mb = -1;
  if (dot == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dot), &stage) ||
      !absl::SimpleAtoi(rest.substr(dot + 1), &mb) || stage < 0 || mb < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op '", text, "': expected KIND STAGE.MICROBATCH such as F3.7 (non-negative integers)"));
  }
  op.stage = stage;
  op.microbatch = mb;
  return op;
}

size_t Schedule::total_ops() const {
  size_t n = 0;
  for (const auto& device_ops : ops) n += device_ops.size();
  return n;
}

}  // namespace octopipe
