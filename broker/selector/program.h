// A compiled selector: what parser.cpp writes and evaluate.cpp runs. Postfix bytecode over an
// operand stack, with everything the text held read once at parse time: literals as values, header
// names and strings in one pool, IN lists and LIKE patterns in tables of their own. Built once,
// never changed afterwards, shared between the copies of a selector.
//
// The operand stack holds values (values.h). Each instruction pops its operands and pushes its
// result; AND and OR short-circuit through a jump that leaves the deciding operand on the stack.
// The parser counts the stack's deepest point (max_stack) so that the evaluator can size it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "escrow/broker/selector/selector.h"  // lookup_ref
#include "jms_names.h"
#include "like.h"
#include "values.h"

namespace escrow::broker::selector_detail {

enum class opcode : std::uint8_t {
  push_constant,  // a: index in constants
  push_header,    // a: index in names; pushes the header's text, or NULL when it is missing
  push_jms,       // a: the jms_field; pushes its value as jms_names.h reads it
  negate,         // unary minus
  plus,           // unary plus: a number stays, a header's text is read as one
  add,
  subtract,
  multiply,
  divide,
  equal,
  not_equal,
  less,
  less_equal,
  greater,
  greater_equal,
  between,       // pops high, low, value
  not_between,
  in,            // a: index in lists
  not_in,
  like,          // a: index in patterns
  not_like,
  is_null,
  is_not_null,
  logical_not,
  logical_and,
  logical_or,
  jump_if_false,  // a: target; makes the top a condition; jumps (keeping it) when it is FALSE
  jump_if_true,   // a: target; the same for TRUE
};

struct instruction {
  opcode op;
  std::uint32_t a = 0;
};

// A list of string literals (IN): `count` slices from `first` in program::list_items.
struct string_list {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
};

struct program {
  std::vector<instruction> code;
  std::vector<constant> constants;
  std::string pool;                  // the bytes of every slice below
  std::vector<slice> names;          // header names (push_header)
  std::vector<string_list> lists;    // IN lists
  std::vector<slice> list_items;
  std::vector<like_pattern> patterns;
  std::size_t max_stack = 0;

  std::string_view view(slice s) const { return std::string_view(pool).substr(s.offset, s.length); }
  slice add_to_pool(std::string_view bytes) {
    slice s{static_cast<std::uint32_t>(pool.size()), static_cast<std::uint32_t>(bytes.size())};
    pool.append(bytes);
    return s;
  }
};

// Runs a program against one message's headers: true when it ends TRUE (evaluate.cpp).
bool run(const program& p, lookup_ref lookup);

}  // namespace escrow::broker::selector_detail
