// Byte encoding of request and response lists for the negotiation messages. Only ranks of
// one build talk to each other, so the format is native-endian and unversioned; a reader
// still checks every length so that a corrupt message is an InternalError, not a crash.
#pragma once

#include <cstdint>
#include <vector>

#include "negotiation/request.h"

namespace perseus::engine {

std::vector<uint8_t> encodeRequests(const std::vector<Request>& requests);
std::vector<Request> decodeRequests(const std::vector<uint8_t>& bytes);

// The coordinator's reply: the responses, then the stall notices (usually none).
std::vector<uint8_t> encodeResponses(const std::vector<Response>& responses,
                                     const std::vector<StallNotice>& notices = {});
std::vector<Response> decodeResponses(const std::vector<uint8_t>& bytes,
                                      std::vector<StallNotice>* notices = nullptr);

}  // namespace perseus::engine
