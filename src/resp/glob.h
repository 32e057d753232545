// Glob matching with Redis's pattern language (stringmatchlen), for SCAN ... MATCH:
//   *      any sequence, also empty        ?      any one byte
//   [abc]  one of the bytes                [^abc] any byte but these
//   [a-z]  a range (ends in either order)  \x     the byte x itself (also inside [...])
// Bytes compare exactly (no case folding). An unterminated "[..." class runs to the end of the
// pattern, as in Redis.
// Cost: O(pattern.size() * text.size()) at worst (backtracking only to the last '*'), never
// exponential. Threads: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace shoal::resp {

bool glob_match(std::string_view pattern, std::string_view text);

// The bytes every match must start with: the pattern up to its first *, ? or [ with escapes
// resolved ("user\*:*" -> "user*:"). A SCAN may restrict itself to keys with this prefix.
std::string glob_literal_prefix(std::string_view pattern);

}  // namespace shoal::resp
