#include "rendezvous/slurm_lists.h"

#include <cctype>
#include <cstdlib>

#include "common/status.h"

namespace perseus::rendezvous {
namespace {

// A list's items are split at commas outside brackets.
std::vector<std::string> splitTopLevel(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) break;
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  if (depth != 0) {
    throw InvalidArgumentError(PERSEUS_STR(what << "='" << text << "' has unbalanced brackets"));
  }
  items.push_back(current);
  return items;
}

bool allDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "01-04" -> {"01", "02", "03", "04"}; "7" -> {"7"}. The lower bound's width is the padding.
void expandRange(const std::string& range, const std::string& what, const std::string& text,
                 std::vector<std::string>* out) {
  const size_t dash = range.find('-');
  const std::string lo = range.substr(0, dash);
  const std::string hi = dash == std::string::npos ? lo : range.substr(dash + 1);
  if (!allDigits(lo) || !allDigits(hi) || lo.size() > 9 || hi.size() > 9) {
    throw InvalidArgumentError(
        PERSEUS_STR(what << "='" << text << "': '" << range << "' is not a range like 01-04"));
  }
  const long first = std::strtol(lo.c_str(), nullptr, 10);
  const long last = std::strtol(hi.c_str(), nullptr, 10);
  if (last < first || last - first > 100000) {
    throw InvalidArgumentError(
        PERSEUS_STR(what << "='" << text << "': range '" << range << "' is empty or too long"));
  }
  for (long v = first; v <= last; ++v) {
    std::string digits = std::to_string(v);
    if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
    out->push_back(digits);
  }
}

// One item, brackets expanded left to right (every combination, in Slurm's order).
void expandItem(const std::string& item, const std::string& what, const std::string& text,
                std::vector<std::string>* out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.find(']') != std::string::npos) {
      throw InvalidArgumentError(PERSEUS_STR(what << "='" << text << "' has unbalanced brackets"));
    }
    out->push_back(item);
    return;
  }
  const size_t close = item.find(']', open);
  if (close == std::string::npos) {
    throw InvalidArgumentError(PERSEUS_STR(what << "='" << text << "' has unbalanced brackets"));
  }
  const std::string prefix = item.substr(0, open);
  const std::string rest = item.substr(close + 1);
  std::vector<std::string> values;
  for (const auto& range : splitTopLevel(item.substr(open + 1, close - open - 1), what)) {
    expandRange(range, what, text, &values);
  }
  std::vector<std::string> tails;
  expandItem(rest, what, text, &tails);
  for (const auto& v : values) {
    for (const auto& tail : tails) out->push_back(prefix + v + tail);
  }
}

}  // namespace

std::vector<std::string> expandHostList(const std::string& text, const std::string& what) {
  std::vector<std::string> hosts;
  for (const auto& item : splitTopLevel(text, what)) {
    if (item.empty()) {
      throw InvalidArgumentError(PERSEUS_STR(what << "='" << text << "' has an empty host name"));
    }
    expandItem(item, what, text, &hosts);
  }
  return hosts;
}

std::vector<int> expandTasksPerNode(const std::string& text, const std::string& what) {
  std::vector<int> counts;
  for (const auto& item : splitTopLevel(text, what)) {
    // "N" or "N(xM)"
    const size_t paren = item.find('(');
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        throw InvalidArgumentError(
            PERSEUS_STR(what << "='" << text << "': '" << item << "' is not N or N(xM)"));
      }
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!allDigits(count) || !allDigits(repeat) || count.size() > 6 || repeat.size() > 6) {
      throw InvalidArgumentError(
          PERSEUS_STR(what << "='" << text << "': '" << item << "' is not N or N(xM)"));
    }
    const int n = std::atoi(count.c_str()), m = std::atoi(repeat.c_str());
    counts.insert(counts.end(), m, n);
  }
  return counts;
}

}  // namespace perseus::rendezvous
