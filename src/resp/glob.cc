#include "src/resp/glob.h"

namespace shoal::resp {
namespace {

// Matches the class starting after '[' at *p against c and leaves *p past the closing ']'.
bool match_class(std::string_view pat, size_t* p, unsigned char c) {
  size_t i = *p;
  bool negate = false;
  if (i < pat.size() && pat[i] == '^') {
    negate = true;
    ++i;
  }
  bool found = false;
  while (i < pat.size() && pat[i] != ']') {  // each pass consumes >= 1 byte
    if (pat[i] == '\\' && i + 1 < pat.size()) {
      found |= static_cast<unsigned char>(pat[i + 1]) == c;
      i += 2;
    } else if (i + 2 < pat.size() && pat[i + 1] == '-') {
      auto lo = static_cast<unsigned char>(pat[i]);
      auto hi = static_cast<unsigned char>(pat[i + 2]);
      if (lo > hi) std::swap(lo, hi);
      found |= c >= lo && c <= hi;
      i += 3;
    } else {
      found |= static_cast<unsigned char>(pat[i]) == c;
      ++i;
    }
  }
  *p = i < pat.size() ? i + 1 : i;  // past ']' (or at the end when unterminated)
  return negate ? !found : found;
}

// Matches the one-byte token at *p (not '*') against c and advances *p past it.
bool match_token(std::string_view pat, size_t* p, char c) {
  const char t = pat[*p];
  if (t == '?') {
    ++*p;
    return true;
  }
  if (t == '[') {
    ++*p;
    return match_class(pat, p, static_cast<unsigned char>(c));
  }
  if (t == '\\' && *p + 1 < pat.size()) {
    *p += 2;
    return pat[*p - 1] == c;
  }
  ++*p;
  return t == c;
}

}  // namespace

bool glob_match(std::string_view pat, std::string_view text) {
  constexpr size_t kNone = std::string_view::npos;
  size_t p = 0;
  size_t s = 0;
  size_t star_p = kNone;  // the pattern just after the last '*' met
  size_t star_s = 0;      // where that star's match currently ends in text
  // Each pass advances s, or moves star_s forward (restarting s there): bounded by
  // text.size() * (pattern.size() + 1) passes.
  while (s < text.size()) {
    if (p < pat.size() && pat[p] == '*') {
      while (p < pat.size() && pat[p] == '*') ++p;
      if (p == pat.size()) return true;
      star_p = p;
      star_s = s;
      continue;
    }
    if (p < pat.size()) {
      size_t next = p;
      if (match_token(pat, &next, text[s])) {
        p = next;
        ++s;
        continue;
      }
    }
    if (star_p == kNone) return false;
    p = star_p;
    s = ++star_s;
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

std::string glob_literal_prefix(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '*' || c == '?' || c == '[') break;
    if (c == '\\' && i + 1 < pattern.size()) ++i;
    out.push_back(pattern[i]);
  }
  return out;
}

}  // namespace shoal::resp
