// AllocationBudget: a bound on the tensor storage one thread may take while it lives.
//
// Code that builds something whose size comes from untrusted input (a model rebuilt from a
// checkpoint's config) opens a budget; a request that would take the thread past it throws
// sima::Error naming `what` before any memory is allocated, instead of the program
// allocating whatever a few bytes of JSON ask for.
//
//   AllocationBudget budget(2 * file_bytes, path + ": the model config describes a larger model than the file holds");
//   auto model = create_model(cfg);  // sima::Error when its tensors would exceed the budget
//
// Counted: every storage_alloc request on this thread (size class, cache hits included),
// cumulatively — memory freed meanwhile is not given back. Budgets do not nest.
#pragma once
#include <cstdint>
#include <string>

namespace sima {

class AllocationBudget {
 public:
  AllocationBudget(int64_t bytes, std::string what);
  ~AllocationBudget();
  AllocationBudget(const AllocationBudget&) = delete;
  AllocationBudget& operator=(const AllocationBudget&) = delete;

  // Called by storage_alloc: charges `bytes` to this thread's budget, if one is open.
  static void charge(int64_t bytes);

 private:
  int64_t limit_, used_ = 0;
  std::string what_;
};

}  // namespace sima
