// The MPI data plane outside mpirun: asking for it must fail at once with a message that says
// how to start the job (the working path is TransportMpi.CollectivesUnderMpirun, which CTest
// runs through mpirun; see tests/cpp/mpi/mpi_collectives_check.cc).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/status.h"
#include "rendezvous/world.h"
#include "transport/mpi/mpi_channels.h"

namespace perseus {
namespace {

TEST(TransportMpi, RefusedWithoutMpirun) {
  if (std::getenv("OMPI_COMM_WORLD_RANK") != nullptr) GTEST_SKIP() << "running under mpirun";
  Params params;
  params.cpu_operations = "mpi";
  try {
    rendezvous::bootstrap(params);
    FAIL() << "bootstrap accepted PERSEUS_CPU_OPERATIONS=mpi without mpirun";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun"), std::string::npos) << e.what();
  }
}

TEST(TransportMpi, BuildReportsMpi) {
#ifdef PERSEUS_HAVE_MPI
  EXPECT_TRUE(transport::mpi::built());
#else
  EXPECT_FALSE(transport::mpi::built());
  EXPECT_THROW(transport::mpi::connectMpiPeers(0, 2, Params()), InvalidArgumentError);
#endif
}

}  // namespace
}  // namespace perseus
