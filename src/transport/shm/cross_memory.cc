#include "transport/shm/cross_memory.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdint>

namespace perseus::transport::shm {

int readPeerMemory(pid_t pid, const void* remote, void* local, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec to{static_cast<unsigned char*>(local) + done, bytes - done};
    iovec from{const_cast<unsigned char*>(static_cast<const unsigned char*>(remote)) + done,
               bytes - done};
    const ssize_t n = ::process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;  // a partial read stops at an unmapped page
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace perseus::transport::shm
