#include "rendezvous/job_secret.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/status.h"
#include "transport/tcp/auth.h"
#include "transport/tcp/sha256.h"

namespace perseus::rendezvous {
namespace {

constexpr size_t kMinSecretChars = 16;

std::string howToProvide(const LaunchInfo& info) {
  return PERSEUS_STR(launcherName(info.launcher)
                     << " hands out no secret, and Perseus never opens an unauthenticated "
                        "store; give every rank the same secret of at least "
                     << kMinSecretChars
                     << " characters: export PERSEUS_SECRET=$(openssl rand -hex 32) before "
                        "launching, or write one to a file only you can read (umask 077; "
                        "openssl rand -hex 32 > ~/.perseus/secret) on a home directory all "
                        "nodes share, or name such a file with PERSEUS_SECRET_FILE");
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t')) {
    text.pop_back();
  }
  return text;
}

// Returns false when `path` does not exist and `must_exist` is false.
bool readPrivateFile(const std::string& path, bool must_exist, const LaunchInfo& info,
                     std::string* text) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT && !must_exist) return false;
    throw InvalidArgumentError(PERSEUS_STR("cannot read the secret file "
                                           << path << ": " << std::strerror(errno) << "; "
                                           << howToProvide(info)));
  }
  struct stat st;
  const bool ok = ::fstat(fd, &st) == 0;
  if (!ok || !S_ISREG(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 077) != 0) {
    ::close(fd);
    throw InvalidArgumentError(PERSEUS_STR(
        "the secret file " << path << " must be a regular file owned by this user that no one "
                           << "else can read (chmod 600 " << path << "); it is not, so it is not "
                           << "used. " << howToProvide(info)));
  }
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  if (n < 0) {
    throw InvalidArgumentError(
        PERSEUS_STR("cannot read the secret file " << path << ": " << std::strerror(errno)));
  }
  *text = trimmed(std::string(buf, static_cast<size_t>(n)));
  return true;
}

}  // namespace

std::string userSecretHex(const LaunchInfo& info, const std::string& secret_file) {
  std::string text = info.secret_hex;
  std::string source = "PERSEUS_SECRET";
  if (text.empty() && !secret_file.empty()) {
    readPrivateFile(secret_file, true, info, &text);
    source = "PERSEUS_SECRET_FILE=" + secret_file;
  }
  if (text.empty()) {
    const char* home = std::getenv("HOME");
    const std::string path = std::string(home != nullptr ? home : "") + "/.perseus/secret";
    if (home != nullptr && readPrivateFile(path, false, info, &text)) source = path;
  }
  if (text.empty()) {
    throw InvalidArgumentError(PERSEUS_STR("no job secret: " << howToProvide(info)));
  }
  if (text.size() < kMinSecretChars) {
    throw InvalidArgumentError(PERSEUS_STR("the secret from " << source << " has " << text.size()
                                                              << " characters; "
                                                              << howToProvide(info)));
  }
  const auto mac = transport::tcp::hmacSha256(text.data(), text.size(), info.launch_id.data(),
                                              info.launch_id.size());
  return transport::tcp::toHex(mac.data(), mac.size());
}

}  // namespace perseus::rendezvous
