// metrics.jsonl (every record, one compact JSON object per line) and metrics.csv (the epoch
// records as a table); see metrics.h.
#include "train/loop/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/file_io.h"

namespace sima {

namespace fs = std::filesystem;

namespace {

bool is_blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

bool is_epoch_record(const nlohmann::json& r) {
  auto it = r.find("kind");
  return it != r.end() && it->is_string() && it->get<std::string>() == "epoch";
}

// One CSV cell: numbers as %.6g (integers exactly), strings quoted when they hold a comma,
// quote or newline (RFC 4180: quotes doubled), null / missing as the empty cell.
std::string csv_cell(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v.get<double>());
    return buf;
  }
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

}  // namespace

std::vector<nlohmann::json> read_metrics_jsonl(const std::string& path) {
  std::ifstream in(path);
  check(in.is_open(), path, ": cannot open for reading (", std::strerror(errno), ")");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  check(!in.bad(), path, ": read error");
  size_t last = lines.size();  // index of the last non-blank line
  while (last > 0 && is_blank(lines[last - 1])) --last;

  std::vector<nlohmann::json> records;
  for (size_t i = 0; i < last; ++i) {
    if (is_blank(lines[i])) continue;
    nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    const bool ok = !j.is_discarded() && j.is_object();
    if (ok) {
      records.push_back(std::move(j));
    } else if (i + 1 == last) {
      break;  // a torn last line: the run was killed while writing it
    } else {
      fail(path, ":", i + 1, ": ", j.is_discarded() ? "malformed JSON" : "not a JSON object",
           " (a line before the last)");
    }
  }
  return records;
}

void MetricsLog::open(const std::string& dir, int64_t resume_step) {
  if (out_.is_open()) out_.close();
  dir_ = dir;
  epochs_.clear();
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, dir, ": cannot create the run folder (", ec.message(), ")");

  const std::string path = jsonl_path();
  refuse_symlink(path, "metrics log");  // neither read nor written through a link
  if (resume_step >= 0) {
    // Keep what was logged up to the checkpoint we resume from, rewrite the file with only that.
    std::vector<nlohmann::json> kept;
    if (fs::exists(path)) {
      for (nlohmann::json& r : read_metrics_jsonl(path)) {
        auto it = r.find("step");
        if (it != r.end() && it->is_number() && it->get<double>() > static_cast<double>(resume_step)) continue;
        kept.push_back(std::move(r));
      }
    }
    std::string text;
    for (const nlohmann::json& r : kept) {
      text += r.dump() + "\n";
      if (is_epoch_record(r)) epochs_.push_back(r);
    }
    write_file_atomic(path, text.data(), text.size());
  }
  out_.open(path, std::ios::out | (resume_step >= 0 ? std::ios::app : std::ios::trunc));
  check(out_.is_open(), path, ": cannot open for writing (", std::strerror(errno), ")");
  write_csv();  // fresh: the header only; resumed: the kept epochs
}

void MetricsLog::log(const nlohmann::json& record) {
  if (!out_.is_open()) return;
  check(record.is_object(), jsonl_path(), ": a metrics record must be a JSON object, got ", record.dump());
  out_ << record.dump() << '\n';
  out_.flush();
  check(out_.good(), jsonl_path(), ": write failed (", std::strerror(errno), ")");
  if (is_epoch_record(record)) {
    epochs_.push_back(record);
    write_csv();
  }
}

// Columns: "epoch", then every other key of the epoch records in first-seen order (within one
// record, the order of nlohmann::json's object: alphabetical).
void MetricsLog::write_csv() const {
  std::vector<std::string> cols{"epoch"};
  for (const nlohmann::json& r : epochs_)
    for (auto it = r.begin(); it != r.end(); ++it)
      if (std::find(cols.begin(), cols.end(), it.key()) == cols.end()) cols.push_back(it.key());
  std::string text;
  for (size_t c = 0; c < cols.size(); ++c) {
    if (c) text += ",";
    text += csv_cell(nlohmann::json(cols[c]));
  }
  text += "\n";
  for (const nlohmann::json& r : epochs_) {
    for (size_t c = 0; c < cols.size(); ++c) {
      if (c) text += ",";
      if (auto it = r.find(cols[c]); it != r.end()) text += csv_cell(*it);
    }
    text += "\n";
  }
  write_file_atomic(csv_path(), text.data(), text.size());
}

}  // namespace sima
