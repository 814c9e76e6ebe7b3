// curves.png: training curves of a run, drawn by gnuplot from metrics.csv.
// Two panels against epoch: loss (train and test) and accuracy (test top-1, top-5 when present).
#pragma once
#include <string>

namespace sima {

// The CSV columns read, by header name: epoch (required), train_loss, test_loss, test_top1,
// test_top5 (whichever hold values; an empty cell skips that point). The PNG is 1200x480
// (gnuplot's pngcairo terminal, or png when pngcairo is not built in).

// True when a `gnuplot` executable is on PATH (searched directly, no shell).
bool gnuplot_available();
// Renders <csv>'s columns to `png_path` (gnuplot writes `png_path` + ".tmp.png", renamed when
// gnuplot succeeded). Returns "" on success, else a one-line reason starting "no curves: "
// (CSV unreadable, no rows yet, gnuplot missing, "gnuplot failed: <its error>") that the
// caller prints as a note; never throws, and never leaves a partial PNG.
std::string render_curves(const std::string& csv_path, const std::string& png_path);

}  // namespace sima
