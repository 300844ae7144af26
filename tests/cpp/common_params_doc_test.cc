// docs/environment.md's settings table is generated from the registry (src/common/params.h):
// this test fails when they differ. Regenerate with scripts/gen_environment_doc.sh, which runs
// this test with PERSEUS_UPDATE_DOCS=1 so that it rewrites the table instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/params.h"

namespace perseus {
namespace {

const char kBegin[] = "<!-- BEGIN params (generated from src/common/params.h) -->\n";
const char kEnd[] = "<!-- END params -->\n";

std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string tableFromRegistry() {
  std::ostringstream os;
  os << "| Variable | Default | Meaning |\n|---|---|---|\n";
  for (const auto& e : Params().describe()) {
    os << "| `" << e.variable << "` | "
       << (e.default_value.empty() ? std::string("unset") : "`" + e.default_value + "`") << " | "
       << cell(e.description) << " |\n";
  }
  return os.str();
}

std::string docPath() { return std::string(PERSEUS_SOURCE_DIR) + "/docs/environment.md"; }

TEST(EnvironmentDoc, SettingsTableMatchesTheRegistry) {
  std::ifstream in(docPath());
  ASSERT_TRUE(in) << "cannot read " << docPath();
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string doc = buffer.str();
  const size_t begin = doc.find(kBegin);
  const size_t end = doc.find(kEnd);
  ASSERT_TRUE(begin != std::string::npos && end != std::string::npos && begin < end)
      << docPath() << " lacks the markers " << kBegin << " and " << kEnd;
  const size_t body = begin + sizeof(kBegin) - 1;
  const std::string want = tableFromRegistry();
  const std::string have = doc.substr(body, end - body);
  const char* update = std::getenv("PERSEUS_UPDATE_DOCS");
  if (have != want && update != nullptr && std::string(update) == "1") {
    std::ofstream(docPath()) << doc.substr(0, body) << want << doc.substr(end);
    return;
  }
  EXPECT_EQ(have, want) << docPath() << " differs from the settings registry; run "
                        << "scripts/gen_environment_doc.sh and commit the result";
}

}  // namespace
}  // namespace perseus
