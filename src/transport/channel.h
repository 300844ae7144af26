// One peer's end of a bidirectional byte stream, non-blocking. ChannelTransport
// (channel_transport.h) drives many of these at once to implement Transport::exchange();
// shm/ and tcp/ each provide a Channel.
#pragma once

#include <cstddef>

namespace perseus::transport {

class Channel {
 public:
  virtual ~Channel() = default;
  // Moves as many bytes as possible without blocking; returns how many (0 if none).
  // Throws PeerLostError when the peer is gone.
  virtual size_t trySend(const void* data, size_t bytes) = 0;
  virtual size_t tryRecv(void* data, size_t bytes) = 0;
  // True when received bytes are waiting.
  virtual bool hasIncoming() = 0;
  // A file descriptor that poll() reports readable/writable when progress is possible, or -1
  // if this channel is polled by spinning/sleeping (shared memory).
  virtual int pollFd() const = 0;
  // Called while the transport waits without progress (every few ms): throws PeerLostError if
  // the peer is known dead (e.g. its process no longer exists).
  virtual void checkPeer() = 0;
  // Rings the peer's doorbell without sending bytes (Transport::ring()). Any thread. A no-op
  // for a channel without one (TCP: the peer polls its sockets).
  virtual void ring() {}
};

}  // namespace perseus::transport
