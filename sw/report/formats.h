// Run and comparison reports in the formats besides JSON: CSV shaped like SCALE-Sim's
// COMPUTE_REPORT.csv and BANDWIDTH_REPORT.csv (same columns, same units, so the two tools can be
// diffed layer by layer), our full per-layer CSV, and Markdown tables. All take the
// tpusim.run/1 (or tpusim.compare/1) JSON, so they can be regenerated from stored reports.
// Definitions: docs/report.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tpu::report {

// 1234567 -> "1,234,567" (fmt's {:L} follows the C locale, which has no separator).
std::string thousands(double v);

// SCALE-Sim v2's columns, one row per layer that multiplies (LayerID counts those from 0).
std::string compute_report_csv(const nlohmann::ordered_json& run);
std::string bandwidth_report_csv(const nlohmann::ordered_json& run);
// Every per-layer figure of the run report, units in the column names, and a total row.
std::string layers_csv(const nlohmann::ordered_json& run);
// `run --scalesim-csv DIR`'s files, and their names and contents in that order.
inline const std::vector<std::string> kCsvReportFiles = {"COMPUTE_REPORT.csv",
                                                         "BANDWIDTH_REPORT.csv", "LAYERS.csv"};
std::vector<std::pair<std::string, std::string>> csv_reports(const nlohmann::ordered_json& run);

// The run's totals and its per-layer table.
std::string run_markdown(const nlohmann::ordered_json& run);
// A fit report (tpusim.fit/1): the epochs, the last step's split and its per-tag table.
std::string fit_markdown(const nlohmann::ordered_json& fit);
// Chips side by side (one row each), then per chip its per-layer table.
std::string compare_markdown(const nlohmann::ordered_json& comparison);
// Each run's name in a comparison (its chip's or system's); two with the same name are told
// apart by their files: "name (file)".
std::vector<std::string> compare_labels(const nlohmann::ordered_json& runs);
// One row per chip with the totals, units in the column names.
std::string compare_csv(const nlohmann::ordered_json& comparison);

}  // namespace tpu::report
