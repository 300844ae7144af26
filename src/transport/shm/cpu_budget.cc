#include "transport/shm/cpu_budget.h"

#include <sched.h>

namespace perseus::transport::shm {

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

bool oversubscribed(int local_processes) { return local_processes > usableCpus(); }

}  // namespace perseus::transport::shm
