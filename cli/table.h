// TextTable: aligned plain-text tables for the CLI's human-readable output.
#ifndef OCTOPIPE_CLI_TABLE_H_
#define OCTOPIPE_CLI_TABLE_H_

#include <string>
#include <vector>

namespace octopipe::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns are left-aligned when `left[i]`, else right-aligned (numbers).
  std::string Render(const std::vector<bool>& left = {}) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string FormatSeconds(double s);       // "1.234 s", "12.3 ms"
std::string FormatPercent(double ratio);   // "23.4%"
std::string FormatBytes(double bytes);     // "71.2 GB"
std::string FormatCount(double n);         // "1,234,567"

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_TABLE_H_
