#include "cli/table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octopipe::cli {

std::string TextTable::Render(const std::vector<bool>& left) const {
  std::vector<size_t> width(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      const bool l = c < left.size() ? left[c] : c == 0;
      absl::StrAppend(&out, c ? "  " : "", l ? cell + pad : pad + cell);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header_);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  absl::StrAppend(&out, std::string(total > 2 ? total - 2 : 0, '-'), "\n");
  for (const auto& row : rows_) absl::StrAppend(&out, line(row));
  return out;
}

std::string FormatSeconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (s >= 1) return absl::StrFormat("%.3f s", s);
  if (s >= 1e-3) return absl::StrFormat("%.2f ms", s * 1e3);
  return absl::StrFormat("%.1f us", s * 1e6);
}

std::string FormatPercent(double ratio) { return absl::StrFormat("%.1f%%", ratio * 100); }

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  if (bytes >= 1e9) return absl::StrFormat("%.1f GB", bytes / 1e9);
  if (bytes >= 1e6) return absl::StrFormat("%.1f MB", bytes / 1e6);
  return absl::StrFormat("%.0f B", bytes);
}

std::string FormatCount(double n) {
  std::string digits = absl::StrFormat("%.0f", n);
  std::string out;
  const size_t start = digits[0] == '-' ? 1 : 0;
  for (size_t i = 0; i < digits.size(); ++i) {
    out += digits[i];
    const size_t left = digits.size() - 1 - i;
    if (i >= start && left > 0 && left % 3 == 0) out += ',';
  }
  return out;
}

}  // namespace octopipe::cli
