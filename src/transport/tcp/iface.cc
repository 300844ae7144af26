#include "transport/tcp/iface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>

#include <sstream>

#include "common/status.h"
#include "transport/tcp/socket.h"

namespace perseus::transport::tcp {
namespace {

bool isAddressLiteral(const std::string& text) {
  in_addr a4;
  in6_addr a6;
  return ::inet_pton(AF_INET, text.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, text.c_str(), &a6) == 1;
}

// name -> first IPv4 address of each interface that is up; loopback last.
std::string findInterface(const std::string& name, bool want_non_loopback, std::string* listing) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::string();
  std::string found;
  std::ostringstream all;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if ((ifa->ifa_flags & IFF_UP) == 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, text,
                sizeof(text));
    all << (all.tellp() > 0 ? ", " : "") << ifa->ifa_name << " (" << text << ")";
    if (!found.empty()) continue;
    bool loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    if (!name.empty() ? name == ifa->ifa_name : (want_non_loopback && !loopback)) found = text;
  }
  ::freeifaddrs(list);
  if (listing != nullptr) *listing = all.str();
  return found;
}

}  // namespace

std::string chooseListenHost(const std::string& iface, const std::string& controller_host,
                             int controller_port, bool all_ranks_local) {
  if (!iface.empty()) {
    if (isAddressLiteral(iface)) return iface;
    std::string listing;
    std::string address = findInterface(iface, false, &listing);
    if (address.empty()) {
      throw InvalidArgumentError(
          PERSEUS_STR("PERSEUS_IFACE='" << iface
                                        << "' is neither an address nor an interface with an IPv4 "
                                           "address that is up; interfaces found: "
                                        << listing));
    }
    return address;
  }
  if (all_ranks_local) return "127.0.0.1";
  // No controller to route to (rank 0 opening the store for a multi-host mpiexec/mpirun job):
  // the first outward address.
  if (controller_host.empty()) {
    std::string address = findInterface(std::string(), true, nullptr);
    return address.empty() ? "127.0.0.1" : address;
  }
  SockAddr controller = SockAddr::parse(controller_host, controller_port > 0 ? controller_port : 1,
                                        "PERSEUS_CONTROLLER_ADDR");
  if (!controller.isLoopback()) {
    // A UDP connect sends nothing; it only asks the kernel which source address it would use.
    Fd probe(::socket(controller.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (probe.valid() && ::connect(probe.get(), controller.get(), controller.length) == 0) {
      return localAddress(probe.get()).host();
    }
  }
  std::string address = findInterface(std::string(), true, nullptr);
  return address.empty() ? "127.0.0.1" : address;
}

}  // namespace perseus::transport::tcp
