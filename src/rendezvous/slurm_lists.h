// Slurm's compressed lists, as srun hands them to every task.
#pragma once

#include <string>
#include <vector>

namespace perseus::rendezvous {

// Expands a host list such as "node[01-04,07],gpu-a[1-2]-ib" (the syntax of
// SLURM_STEP_NODELIST / SLURM_JOB_NODELIST): comma-separated items, each with any number of
// bracketed ranges, zero padding kept. `what` names the variable in errors.
// Throws InvalidArgumentError on unbalanced brackets or a malformed range.
std::vector<std::string> expandHostList(const std::string& text, const std::string& what);

// Expands a tasks-per-node list such as "2(x3),1" (SLURM_STEP_TASKS_PER_NODE) into one count
// per node: {2, 2, 2, 1}. Throws InvalidArgumentError.
std::vector<int> expandTasksPerNode(const std::string& text, const std::string& what);

}  // namespace perseus::rendezvous
