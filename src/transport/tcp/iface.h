// Which local address the data-plane listener binds to (PERSEUS_IFACE and its default).
#pragma once

#include <string>

namespace perseus::transport::tcp {

// `iface`: an interface name (eth0) or an address; empty for the default, which is the address
// this host uses to reach `controller_host` (127.0.0.1 when every rank is on this host, or the
// first non-loopback IPv4 address when the controller is reached over loopback, or there is
// none, while other hosts take part). Throws InvalidArgumentError naming PERSEUS_IFACE and the
// interfaces found.
std::string chooseListenHost(const std::string& iface, const std::string& controller_host,
                             int controller_port, bool all_ranks_local);

}  // namespace perseus::transport::tcp
