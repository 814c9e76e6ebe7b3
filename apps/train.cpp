// sima-train: trains a model from a JSON experiment config (train/config/experiment_config.h).
//
//   build/bin/sima-train --config configs/quickstart.json [--set key.path=value ...]
//                        [--out runs/NAME] [--resume] [--check [--derived]] [--quiet] [--allow-nonfinite]
//
// The whole config is validated before any work. The run folder gets the resolved config,
// metrics.jsonl/.csv, curves.png and the checkpoints (train/objectives/trainer.h; with dino.enabled,
// DINO self-supervised training, train/objectives/dino_trainer.h), and run.lock: one writer per folder
// (train/loop/run_lock.h). Ctrl-C (SIGINT) or
// SIGTERM finishes the current step, saves the train state and exits 130 with the command
// that resumes; one thread takes both signals, none of the compute threads (train/loop/stop_signals.h).
//
// Under mpirun (mpirun -np P sima-train ...) the P ranks train one model data-parallel
// (train/distributed/distributed.h): rank 0 prints and writes the run folder; a rank that fails
// ends the job.
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "core/omp_wait.h"
#include "models/finite_check.h"
#include "models/registry.h"
#include "train/config/cli.h"
#include "train/config/experiment_config.h"
#include "train/distributed/distributed.h"
#ifdef SIMA_HAVE_MPI
#include "train/distributed/comm_mpi.h"  // libsima_mpi
#endif
#include "train/objectives/dino_trainer.h"
#include "train/loop/stop_signals.h"
#include "train/objectives/trainer.h"
#include "sima_version.h"  // generated at build time: SIMA_VERSION_STRING

namespace {
const std::atomic<bool>* g_stop = nullptr;  // set by SIGINT / SIGTERM (train/loop/stop_signals.h)

// How a run ended, for its last line.
struct RunEnd {
  bool interrupted;      // stopped before its last epoch (signal or train.max_steps)
  int64_t steps;
  double seconds;
  std::string run_dir;
  bool nothing_done;     // the run had already finished
  int64_t epochs_done;
};

// Prints the run's last line and returns the exit code: 130 after Ctrl-C / SIGTERM (with the
// resume command), 0 otherwise. `done` is the line for a run that trained to its end.
int report_end(const char* argv0, const RunEnd& e, const std::string& done) {
  if (g_stop->load() && e.interrupted) {
    std::fprintf(stderr, "sima-train: interrupted at step %lld; the train state is saved. Resume with:\n"
                 "  %s --out %s --resume\n", (long long)e.steps, argv0, e.run_dir.c_str());
    return 130;
  }
  if (e.interrupted)
    std::printf("stopped after %lld steps (train.max_steps) in %.1f s; continue with --out %s --resume\n",
                (long long)e.steps, e.seconds, e.run_dir.c_str());
  else if (e.nothing_done)
    std::printf("nothing to do: the run in %s has finished its %lld epochs\n", e.run_dir.c_str(),
                (long long)e.epochs_done);
  else
    std::printf("%s\n", done.c_str());
  return 0;
}

// The flags (--help prints them).
void declare_flags(sima::Cli& cli) {
  cli.flag("config", "FILE", "experiment config (JSON); with --resume, defaults to <out>/config.json");
  cli.repeated("set", "KEY=VALUE", "override a config key, e.g. --set train.epochs=3 --set model.depth=6");
  cli.flag("out", "DIR", "run folder (default: runs/<config name>)");
  cli.option("resume", "continue the run in --out from its train_state.safetensors");
  cli.option("check", "validate the config, print it resolved, and exit");
  cli.option("derived", "with --check: print {\"config\": the resolved config, \"derived\": what the run computes "
             "from it (\"lr\": the peak learning rate)}");
  cli.option("quiet", "no progress output");
  cli.option("allow-nonfinite", "load and save weights holding NaN or inf (for debugging; refused by default)");
  cli.option("config-reference", "print every config key with its type, default and meaning (Markdown) and exit");
}

// The experiment: --config (or, with --resume and no --config, the run folder's config.json)
// with every --set applied, validated whole.
sima::ExperimentConfig read_experiment(const sima::Cli& cli) {
  using namespace sima;
  std::string config_path = cli.get("config");
  if (config_path.empty()) {
    check(cli.is_set("resume") && !cli.get("out").empty(),
          "sima-train: --config is required (or --resume with --out of an existing run)");
    config_path = cli.get("out") + "/config.json";
  }
  nlohmann::json doc = read_json_file(config_path);
  // A run folder's config.json records the max_steps of the invocation that wrote it; a
  // resumption from the folder alone runs on to the end unless --set says otherwise.
  if (cli.get("config").empty() && doc.contains("train") && doc["train"].is_object()) doc["train"].erase("max_steps");
  // A run folder's config.json written before the model schema lists every architecture's
  // model keys; the ones its architecture does not read are dropped (models/registry.h).
  if (cli.get("config").empty() && doc.contains("model")) doc["model"] = stored_config_json(doc["model"]);
  for (const std::string& s : cli.get_all("set")) apply_override(doc, s);
  return experiment_from_json(doc, config_path);
}

// Self-supervised training (cfg.dino.enabled): train/objectives/dino_trainer.h.
int run_dino(const sima::ExperimentConfig& cfg, const sima::TrainerOptions& opt, const char* argv0) {
  using namespace sima;
  DinoTrainer dino(cfg, opt);
  DinoTrainResult r = dino.fit();
  char done[512] = "";
  if (!r.epochs.empty())
    std::snprintf(done, sizeof done,
                  "done: DINO, %lld steps in %.1f s; last epoch loss %.4f, teacher entropy %.3f, KL %.4f; "
                  "teacher backbone %s/model.safetensors",
                  (long long)r.steps, r.seconds, r.epochs.back().loss, r.epochs.back().teacher_entropy,
                  r.epochs.back().kl, r.run_dir.c_str());
  if (!world().is_main()) return 0;
  return report_end(argv0, {r.interrupted, r.steps, r.seconds, r.run_dir, r.epochs.empty(), r.epochs_done}, done);
}

// Supervised training: train/objectives/trainer.h.
int run_supervised(const sima::ExperimentConfig& cfg, const sima::TrainerOptions& opt, const char* argv0) {
  using namespace sima;
  Trainer trainer(cfg, opt);
  TrainResult r = trainer.fit();
  char done[512] = "";
  if (r.last_eval.count > 0)
    std::snprintf(done, sizeof done,
                  "done: %lld steps in %.1f s; %s top-1 %.2f%% (best %.2f%%), top-5 %.2f%%, loss %.4f; run folder %s",
                  (long long)r.steps, r.seconds, cfg.data.validation > 0 ? "val" : "test", r.last_eval.top1, r.best_top1, r.last_eval.top5, r.last_eval.loss,
                  r.run_dir.c_str());
  if (!world().is_main()) return 0;
  if (r.ranks > 1)
    std::printf("allreduce: %lld bytes per step in %lld buckets; %.3f s waited after backward, %.3f s in sync "
                "in total, of %.1f s\n",
                (long long)r.allreduce_bytes_per_step, (long long)r.allreduce_buckets, r.allreduce_wait_seconds,
                r.allreduce_seconds, r.seconds);
  return report_end(argv0, {r.interrupted, r.steps, r.seconds, r.run_dir, r.last_eval.count == 0, r.epochs_done},
                    done);
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, so every thread inherits SIGINT / SIGTERM blocked and only the
  // waiting thread takes them (train/loop/stop_signals.h: oneDNN's kernels must not be interrupted).
  g_stop = sima::stop_on_signals();
  sima::setup_app_threads();  // the thread governor (core/omp_wait.h)
  using namespace sima;
  try {
#ifdef SIMA_HAVE_MPI
    use_mpi();  // libsima_mpi: the MPI backend (train/distributed/comm_mpi.h)
#endif
    init_distributed(&argc, &argv);  // MPI, when launched by mpirun
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sima-train: error: %s\n", e.what());
    return 1;
  }
  Comm& comm = world();
  Cli cli("sima-train", "Trains a model from a JSON experiment config.");
  cli.version(SIMA_VERSION_STRING);
  declare_flags(cli);
  if (!cli.parse(argc, argv)) return cli.exit_code();
  set_allow_nonfinite_weights(cli.is_set("allow-nonfinite"));
  if (cli.is_set("config-reference")) {
    std::cout << config_reference_markdown();
    return 0;
  }
  try {
    const ExperimentConfig cfg = read_experiment(cli);
    check(!cli.is_set("derived") || cli.is_set("check"), "--derived goes with --check");
    if (cli.is_set("check")) {
      check_startable(cfg);  // what the run's start refuses, --check refuses too
      nlohmann::json out = experiment_to_json(cfg);
      if (cli.is_set("derived")) out = {{"config", out}, {"derived", {{"lr", cfg.effective_lr()}}}};
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    if (comm.size() > 1) {
      const std::string threads = set_threads_per_rank(comm);
      if (comm.is_main() && !cli.is_set("quiet"))
        std::printf("data parallel: %d ranks (MPI), %s\n", comm.size(), threads.c_str());
    }
    const TrainerOptions opt{.run_dir = cli.get("out"), .resume = cli.is_set("resume"),
                             .quiet = cli.is_set("quiet") || !comm.is_main(), .stop_flag = g_stop};
    return cfg.dino.enabled ? run_dino(cfg, opt, argv[0]) : run_supervised(cfg, opt, argv[0]);
  } catch (const std::exception& e) {
    // One rank's failure ends the job: MPI_Abort stops the others (no hang).
    if (comm.size() > 1) comm.abort(e.what());
    std::fprintf(stderr, "sima-train: error: %s\n", e.what());
    return 1;
  }
}
