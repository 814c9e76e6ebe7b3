// curves.png: training curves of a run, drawn by gnuplot from metrics.csv.
// Two panels against epoch: loss (train and test) and accuracy (test top-1, top-5 when present).
#pragma once
#include <string>

namespace sima {

// True when a `gnuplot` executable is on PATH.
bool gnuplot_available();
// Renders <csv>'s columns to `png_path` (via a temporary file, renamed when gnuplot succeeded).
// Returns "" on success, else a one-line reason (gnuplot missing, no rows yet, gnuplot failed)
// that the caller prints as a note; never throws for these.
std::string render_curves(const std::string& csv_path, const std::string& png_path);

}  // namespace sima
