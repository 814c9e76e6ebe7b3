// The run folder's metric files:
//   metrics.jsonl  one JSON object per line, every record as logged, e.g.
//                    {"kind":"step","epoch":0,"step":50,"loss":1.93,"lr":0.00012,"img_per_s":310.5}
//                    {"kind":"epoch","epoch":0,"step":469,"train_loss":1.2,"test_top1":81.3,...}
//   metrics.csv    the "epoch" records as a table, one row per epoch; the columns are the
//                  union of the keys of the epoch records seen so far (first-seen order, with
//                  "epoch" first); rewritten whole after each epoch record (it is small), via a
//                  temporary file and rename.
// Records are written and flushed line by line, so a killed run loses at most the line
// being written. On resume from global step s, open(..., resume_step = s) keeps the
// records with "step" <= s (dropping what a killed run logged after its last checkpoint,
// and a torn last line) and continues after them, so the log has no gaps and no repeats.
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sima {

class MetricsLog {
 public:
  MetricsLog() = default;  // closed: log() does nothing
  // Opens <dir>/metrics.jsonl and <dir>/metrics.csv. resume_step < 0: start fresh
  // (truncate). Throws sima::Error naming the file if it cannot be written.
  void open(const std::string& dir, int64_t resume_step = -1);
  bool is_open() const { return out_.is_open(); }

  // Appends one record (an object; "kind" and "step" expected). Epoch records also update the CSV.
  void log(const nlohmann::json& record);

  // Every record read back from the jsonl (for tests and curves).
  const std::vector<nlohmann::json>& epoch_records() const { return epochs_; }
  std::string jsonl_path() const { return dir_ + "/metrics.jsonl"; }
  std::string csv_path() const { return dir_ + "/metrics.csv"; }

 private:
  void write_csv() const;
  std::string dir_;
  std::ofstream out_;
  std::vector<nlohmann::json> epochs_;  // the "epoch" records, for the CSV
};

// Parses a metrics.jsonl file (skipping a torn last line); throws naming the file and line
// on a malformed line before the last.
std::vector<nlohmann::json> read_metrics_jsonl(const std::string& path);

}  // namespace sima
