// curves.png through gnuplot (see curves.h). The CSV is parsed here and each curve goes to
// gnuplot as an inline data block of (epoch, value) rows, skipping the epochs where the
// value is missing (e.g. test metrics logged every few epochs), so gnuplot never sees the
// CSV path or an empty cell. gnuplot runs by fork + exec (no shell, so no quoting of paths
// beyond the output name inside the script), with its stderr captured to a temporary file,
// and dies with this process (PR_SET_PDEATHSIG).
#include "train/viz/curves.h"

#include "core/durable_file.h"
#include "core/error.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

namespace sima {

namespace fs = std::filesystem;

namespace {

// The first executable regular file named gnuplot in $PATH ("" when none). An empty PATH
// entry means the current directory, as for execvp.
std::string find_gnuplot() {
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const fs::path dir = end > start ? fs::path(path.substr(start, end - start)) : fs::path(".");
    const std::string exe = (dir / "gnuplot").string();
    struct stat st;
    if (::stat(exe.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(exe.c_str(), X_OK) == 0) return exe;
    start = end + 1;
  }
  return "";
}

// One CSV line split into cells (RFC 4180 quoting: "a,b" and "" inside quotes).
std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cells.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else cells.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else if (c != '\r') {
      cells.back() += c;
    }
  }
  return cells;
}

// The whole cell as a finite number.
bool parse_number(const std::string& cell, double& v) {
  if (cell.empty()) return false;
  char* end = nullptr;
  v = std::strtod(cell.c_str(), &end);
  return end == cell.c_str() + cell.size() && std::isfinite(v);
}

struct Series {
  std::string column, title;
  std::vector<std::pair<double, double>> points;  // (epoch, value)
};

// A gnuplot single-quoted string: the only escape is '' for a quote.
std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

// A file name for a temporary file (created empty, closed) in the system temp folder.
std::string make_temp_file(const char* tag) {
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  std::string tmpl = (dir / (std::string("sima-curves-") + tag + "-XXXXXX")).string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) return "";
  ::close(fd);
  return tmpl;
}

// The reason to report from gnuplot's stderr: its first error line ("<script>" line 7: msg),
// without the temporary script's name; else its first non-blank line.
std::string gnuplot_error(const std::string& stderr_path, const std::string& script_path) {
  std::ifstream in(stderr_path);
  std::string first, line;
  const std::string prefix = "\"" + script_path + "\" ";
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r^") == std::string::npos) continue;
    if (line.rfind(prefix, 0) == 0) return "script " + line.substr(prefix.size());
    if (first.empty()) first = line;
  }
  return first;
}

// The two panels' curves.
struct Panels {
  std::vector<Series> loss{{"train_loss", "train loss", {}}, {"test_loss", "test loss", {}}, {"val_loss", "val loss", {}}};
  std::vector<Series> acc{{"test_top1", "test top-1", {}},
                          {"test_top5", "test top-5", {}},
                          {"val_top1", "val top-1", {}},
                          {"val_top5", "val top-5", {}}};
};

// Reads the curves from the CSV into `panels`, dropping the series without a value; returns
// "" or why there are no curves.
std::string read_curves(const std::string& csv_path, Panels& panels) {
  std::ifstream in(csv_path);
  if (!in.is_open()) return "no curves: cannot read " + csv_path;
  std::string line;
  if (!std::getline(in, line)) return "no curves: " + csv_path + " has no rows yet";
  const std::vector<std::string> header = split_csv_line(line);
  auto column = [&](const std::string& name) -> int {
    for (size_t c = 0; c < header.size(); ++c)
      if (header[c] == name) return static_cast<int>(c);
    return -1;
  };
  const int epoch_col = column("epoch");
  if (epoch_col < 0) return "no curves: " + csv_path + " has no epoch column";
  int64_t rows = 0;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++rows;
    const std::vector<std::string> cells = split_csv_line(line);
    double epoch, v;
    if (epoch_col >= static_cast<int>(cells.size()) || !parse_number(cells[epoch_col], epoch)) continue;
    for (std::vector<Series>* panel : {&panels.loss, &panels.acc})
      for (Series& s : *panel) {
        const int c = column(s.column);
        if (c >= 0 && c < static_cast<int>(cells.size()) && parse_number(cells[c], v)) s.points.push_back({epoch, v});
      }
  }
  if (rows == 0) return "no curves: " + csv_path + " has no rows yet";
  std::erase_if(panels.loss, [](const Series& s) { return s.points.empty(); });
  std::erase_if(panels.acc, [](const Series& s) { return s.points.empty(); });
  if (panels.loss.empty() && panels.acc.empty())
    return "no curves: " + csv_path + " has no values of train_loss, test_ or val_ loss, top1 or top5";
  return "";
}

// The gnuplot script: terminal, data blocks, one panel per non-empty group, drawn into `png`.
std::string gnuplot_script(const Panels& panels, const std::string& png) {
  const std::vector<Series>& loss = panels.loss;
  const std::vector<Series>& acc = panels.acc;
  std::ostringstream gp;
  gp << "if (strstrt(' '.GPVAL_TERMINALS.' ', ' pngcairo ') > 0) {\n"
        "  set terminal pngcairo noenhanced size 1200,480\n"
        "} else {\n"
        "  set terminal png noenhanced size 1200,480\n"
        "}\n";
  gp << "set output " << gp_quote(png) << "\n";
  gp.precision(10);
  for (const std::vector<Series>* panel : {&loss, &acc})
    for (const Series& s : *panel) {
      gp << "$" << s.column << " << EOD\n";
      for (auto [x, y] : s.points) gp << x << " " << y << "\n";
      gp << "EOD\n";
    }
  const int panel_count = (loss.empty() ? 0 : 1) + (acc.empty() ? 0 : 1);
  double last_epoch = 0;
  for (const std::vector<Series>* panel : {&loss, &acc})
    for (const Series& s : *panel)
      for (auto [x, y] : s.points) last_epoch = std::max(last_epoch, x);
  gp << "set multiplot layout 1," << panel_count << "\n"
     << "set grid\nset xlabel 'epoch'\n";
  if (last_epoch <= 20) gp << "set xtics 1\n";  // whole epochs while few, gnuplot's choice after
  // The key where the curves are not: top right for falling losses, bottom right for rising accuracy.
  auto plot = [&](const std::vector<Series>& series, const char* title, const char* ylabel, const char* key) {
    if (series.empty()) return;
    gp << "set title '" << title << "'\nset ylabel '" << ylabel << "'\nset key " << key << "\nplot ";
    for (size_t i = 0; i < series.size(); ++i)
      gp << (i ? ", " : "") << "$" << series[i].column << " using 1:2 with linespoints title '" << series[i].title
         << "'";
    gp << "\n";
  };
  plot(loss, "loss", "loss", "top right");
  plot(acc, "accuracy", "accuracy (%)", "bottom right");
  gp << "unset multiplot\nset output\n";
  return gp.str();
}

// Runs `gnuplot <script>` with stdin and stdout /dev/null, stderr to `errors`, and waits for
// it: returns its wait status, or -1 with `start_errno` set when it could not be started.
// fork + exec rather than posix_spawn for one call in between: PR_SET_PDEATHSIG has the kernel
// kill gnuplot when the thread that forked it (waiting here) dies. Otherwise a run SIGKILLed
// while gnuplot draws leaves it running, and it can create <png>.tmp.<pid> after the next start
// has removed the temporaries.
int run_gnuplot(const std::string& gnuplot, const std::string& script, const std::string& errors, int& start_errno) {
  const int fd_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC), fd_out = ::open("/dev/null", O_WRONLY | O_CLOEXEC),
            fd_err = ::open(errors.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  std::vector<char*> argv{const_cast<char*>(gnuplot.c_str()), const_cast<char*>(script.c_str()), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = fd_in < 0 || fd_out < 0 || fd_err < 0 ? -1 : ::fork();
  if (pid == 0) {  // the child: async-signal-safe calls only
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);  // parent already gone
    if (::dup2(fd_in, 0) < 0 || ::dup2(fd_out, 1) < 0 || ::dup2(fd_err, 2) < 0) ::_exit(127);
    // sima-train blocks SIGINT/SIGTERM in every thread (train/loop/stop_signals.h) and a blocked
    // mask survives exec: gnuplot gets the default one back, so a signal can still stop it.
    sigset_t none;
    sigemptyset(&none);
    if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) ::_exit(127);
    ::execve(gnuplot.c_str(), argv.data(), environ);
    ::_exit(127);
  }
  start_errno = errno;
  for (int fd : {fd_in, fd_out, fd_err})
    if (fd >= 0) ::close(fd);
  if (pid < 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

bool gnuplot_available() { return !find_gnuplot().empty(); }

std::string render_curves(const std::string& csv_path, const std::string& png_path) {
  Panels panels;
  if (std::string reason = read_curves(csv_path, panels); !reason.empty()) return reason;
  const std::string gnuplot = find_gnuplot();
  if (gnuplot.empty()) return "no curves: gnuplot missing (not found on PATH)";

  // "<png>.tmp.<pid>" like every atomic write, so a run killed while gnuplot draws leaves a
  // temporary that the next start of the run removes (core/durable_file.h).
  // The temporary is created here, exclusively and not through a link, for gnuplot to fill; a
  // curves.png that is a symbolic link is refused (core/durable_file.h).
  const std::string tmp_png = temp_path_for(png_path);
  try {
    refuse_symlink(png_path, "curves image");
    ::close(create_temp_file(png_path));
  } catch (const Error& e) {
    return std::string("no curves: ") + e.what();
  }
  const std::string script = make_temp_file("gp"), errors = make_temp_file("err");
  auto cleanup = [&] {
    std::error_code ec;
    if (!script.empty()) fs::remove(script, ec);
    if (!errors.empty()) fs::remove(errors, ec);
    fs::remove(tmp_png, ec);
  };
  {
    std::ofstream f(script);
    f << gnuplot_script(panels, tmp_png);
    f.close();
    if (script.empty() || errors.empty() || !f) {
      cleanup();
      return "no curves: cannot write a temporary gnuplot script";
    }
  }

  int start_errno = 0;
  const int status = run_gnuplot(gnuplot, script, errors, start_errno);
  if (status < 0) {
    cleanup();
    return "no curves: cannot run " + gnuplot + " (" + std::strerror(start_errno) + ")";
  }
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::error_code ec;
  if (ok && fs::is_regular_file(tmp_png, ec) && fs::file_size(tmp_png, ec) > 0) {
    fs::rename(tmp_png, png_path, ec);
    if (!ec) {
      cleanup();
      return "";
    }
    const std::string reason = "no curves: cannot rename " + tmp_png + " to " + png_path + " (" + ec.message() + ")";
    cleanup();
    return reason;
  }
  std::string reason = gnuplot_error(errors, script);
  if (reason.empty())
    reason = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status)) : "killed by a signal";
  cleanup();
  return "no curves: gnuplot failed: " + reason;
}

}  // namespace sima
