// Multi-process tests of the shared-memory collectives: ranks as forked processes of a one-host
// job over the real shared-memory transport and arena.
#pragma once

#include <functional>
#include <string>

#include "collectives/communicator.h"
#include "common/params.h"

namespace perseus::testing {

// Whether this system lets a forked child read its parent's memory (cross-memory attach: no
// Yama ptrace scope or seccomp profile forbids it). Call from a child of the test process.
bool crossMemoryPermitted();

// Forks n ranks; rank r runs body(r, its params, a Communicator of every rank, group 0) with
// params_of(r) and exits with its result. EXPECTs every child to return 0 within 60 s.
void expectForkedShmRanksOk(
    int n, const std::string& job_prefix, const std::function<Params(int)>& params_of,
    const std::function<int(int, const Params&, collectives::Communicator&)>& body);

}  // namespace perseus::testing
