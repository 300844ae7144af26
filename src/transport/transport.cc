#include "transport/transport.h"

namespace perseus::transport {

void Transport::sendRecv(int send_peer, const void* send_data, size_t send_bytes, int recv_peer,
                         void* recv_data, size_t recv_bytes) {
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  if (send_peer >= 0) sends.push_back({send_peer, send_data, send_bytes});
  if (recv_peer >= 0) recvs.push_back({recv_peer, recv_data, recv_bytes});
  exchange(sends, recvs);
}

}  // namespace perseus::transport
