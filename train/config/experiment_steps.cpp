// The step counts a run derives from its config and its steps per epoch, with checked
// arithmetic (core/checked.h): an overflow names the key and the largest value it may take.
#include <algorithm>

#include "core/checked.h"
#include "models/budget.h"
#include "train/config/experiment_config.h"

namespace sima {

ScheduleSteps schedule_steps(const ExperimentConfig& c, int64_t steps_per_epoch) {
  check(steps_per_epoch > 0, "schedule_steps: steps_per_epoch must be positive, got ", steps_per_epoch);
  const std::string per_epoch = "steps per epoch";
  ScheduleSteps s;
  s.total = checked_mul(c.train.epochs, steps_per_epoch, "train.epochs", per_epoch);
  s.warmup = checked_round_mul(c.schedule.warmup_epochs, steps_per_epoch, "schedule.warmup_epochs", per_epoch);
  s.decay = std::max<int64_t>(1, checked_round_mul(c.schedule.decay_epochs, steps_per_epoch, "schedule.decay_epochs",
                                                   per_epoch));
  const int64_t per_epoch_images = checked_mul(c.data.batch_size, steps_per_epoch, "data.batch_size", per_epoch);
  s.samples = checked_mul(c.train.epochs, per_epoch_images, "train.epochs", "images per epoch");
  return s;
}

void check_startable(const ExperimentConfig& c) {
  schedule_steps(c, 1);
  check_model_budget(c.model, c.data.batch_size);
}

}  // namespace sima
