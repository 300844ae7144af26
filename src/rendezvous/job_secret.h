// The job secret for launchers that hand out none (torchrun, Slurm's srun): every rank must
// derive the same one without talking to the others first.
#pragma once

#include <string>

#include "rendezvous/launch_env.h"

namespace perseus::rendezvous {

// From PERSEUS_SECRET (info.secret_hex, any text of 16+ characters), else from the file
// `secret_file` (PERSEUS_SECRET_FILE), else from ~/.perseus/secret when that exists. A file
// must be a regular file owned by this user with no group or other access. Returns the hex
// HMAC-SHA256 of `info.launch_id` under that text, so that each job gets its own key and a
// rank that reaches another job's store fails authentication instead of joining it.
// Throws InvalidArgumentError naming the launcher and saying how to provide a secret.
std::string userSecretHex(const LaunchInfo& info, const std::string& secret_file);

}  // namespace perseus::rendezvous
