// The run folder's metric files:
//   metrics.jsonl  one JSON object per line, every record as logged, e.g.
//                    {"kind":"step","epoch":0,"step":50,"loss":1.93,"lr":0.00012,"img_per_s":310.5}
//                    {"kind":"epoch","epoch":0,"step":469,"train_loss":1.2,"test_top1":81.3,...}
//   metrics.csv    the "epoch" records as a table, one row per epoch; the columns are the
//                  union of the keys of the epoch records seen so far (first-seen order, with
//                  "epoch" first; within one record nlohmann::json keeps its keys sorted, so
//                  that is the order of a record's new keys); rewritten whole after each epoch
//                  record (it is small), via a temporary file and rename. Cells: integers as
//                  is, other numbers %.6g, strings quoted when needed, a missing key empty.
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
  // Opens <dir>/metrics.jsonl and <dir>/metrics.csv, creating <dir> (and its parents) when
  // missing. resume_step < 0: start fresh (truncate both; the CSV holds the header only).
  // resume_step >= 0: keep the jsonl records with "step" <= resume_step (and those without a
  // "step"), drop a torn last line, rewrite the file (temporary file + rename) and append
  // after it; the CSV is rebuilt from the kept epoch records. No jsonl yet: starts empty.
  // Throws sima::Error naming the folder or file that cannot be created or written, or the
  // line of an existing jsonl that is malformed before its last line.
  void open(const std::string& dir, int64_t resume_step = -1);
  bool is_open() const { return out_.is_open(); }

  // Appends one record (an object; "kind" and "step" expected) as one compact line, flushed.
  // Records with "kind": "epoch" also rewrite the CSV. Throws sima::Error naming the file
  // when the write fails, or when the record is not a JSON object.
  void log(const nlohmann::json& record);

  // The "epoch" records, those kept on resume and those logged since (for tests and curves).
  const std::vector<nlohmann::json>& epoch_records() const { return epochs_; }
  std::string jsonl_path() const { return dir_ + "/metrics.jsonl"; }
  std::string csv_path() const { return dir_ + "/metrics.csv"; }

 private:
  void write_csv() const;
  std::string dir_;
  std::ofstream out_;
  std::vector<nlohmann::json> epochs_;  // the "epoch" records, for the CSV
};

// Parses a metrics.jsonl file (skipping blank lines and a torn last line: one that is not
// JSON or not an object); throws naming the file and line ("<path>:<line>: malformed JSON")
// on such a line before the last, and naming the file when it cannot be opened.
std::vector<nlohmann::json> read_metrics_jsonl(const std::string& path);

}  // namespace sima
