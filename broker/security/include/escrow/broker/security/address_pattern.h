// Address patterns, shared by [[address-settings]] (address_settings.h) and [[security-settings]]
// (security.h): HornetQ/Artemis wildcards, where `.` separates words, `*` matches exactly one word
// and `#` zero or more words, and the order that decides which of several matching patterns is the
// most specific (docs/configuration.md). Pure functions; no I/O.
#pragma once

#include <string>
#include <string_view>

namespace escrow::broker {

// Checks a pattern: non-empty words separated by single dots. "" when valid, else the problem.
std::string check_pattern(std::string_view pattern);

// Whether `pattern` matches `address` (both split at dots).
bool pattern_matches(std::string_view pattern, std::string_view address);

// True when `a` is more specific than `b` (for an address both match): a pattern without
// wildcards beats one with; otherwise, at the first word where they differ in kind, a literal word
// beats `*` and `*` beats `#`; when one is a prefix of the other in kinds, the longer one wins.
bool more_specific(std::string_view a, std::string_view b);

}  // namespace escrow::broker
