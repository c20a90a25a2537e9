// The evaluator (program.h): runs a compiled selector's bytecode over an operand stack. The stack
// lives in this frame for every selector but very deeply nested ones, so that evaluating one
// allocates nothing; the values on it point into the program or into the looked-up header texts.
#include <new>
#include <vector>

#include "program.h"

namespace escrow::broker::selector_detail {

namespace {

constexpr std::size_t kInlineStack = 32;

value load(const program& p, const constant& c) {
  switch (c.type) {
    case kind::boolean: return value::of(c.boolean);
    case kind::exact: return value::of_exact(c.exact);
    case kind::approx: return value::of_approx(c.approx);
    case kind::string:
    case kind::text: return value::of_string(c.type, p.view(c.text));
    case kind::null: break;
  }
  return value::null();
}

tribool in_list(const program& p, const string_list& list, const value& v) {
  if (v.type == kind::null) return tribool::unknown;
  if (v.type != kind::string && v.type != kind::text) return tribool::is_false;  // the parser lets none through
  for (std::uint32_t i = 0; i < list.count; ++i)
    if (p.view(p.list_items[list.first + i]) == v.str()) return tribool::is_true;
  return tribool::is_false;
}

tribool like(const like_pattern& pattern, const value& v) {
  if (v.type == kind::null) return tribool::unknown;
  if (v.type != kind::string && v.type != kind::text) return tribool::is_false;
  return pattern.matches(v.str()) ? tribool::is_true : tribool::is_false;
}

}  // namespace

bool run(const program& p, lookup_ref lookup) {
  // Uninitialized storage: value is an implicit-lifetime type, and every slot is written before
  // it is read.
  alignas(value) unsigned char inline_storage[sizeof(value) * kInlineStack];
  std::vector<value> heap;
  value* stack = reinterpret_cast<value*>(inline_storage);
  if (p.max_stack > kInlineStack) {
    heap.resize(p.max_stack);
    stack = heap.data();
  }
  std::size_t sp = 0;  // the number of values on the stack
  auto pop = [&]() -> const value& { return stack[--sp]; };
  auto top = [&]() -> value& { return stack[sp - 1]; };
  auto lookup_header = [&](std::string_view name) { return lookup.call(lookup.context, name); };

  const std::size_t n = p.code.size();
  for (std::size_t pc = 0; pc < n; ++pc) {
    const instruction in = p.code[pc];
    switch (in.op) {
      case opcode::push_constant: stack[sp++] = load(p, p.constants[in.a]); break;
      case opcode::push_header: {
        auto text = lookup_header(p.view(p.names[in.a]));
        stack[sp++] = text ? value::of_string(kind::text, *text) : value::null();
        break;
      }
      case opcode::push_jms: {
        const auto field = static_cast<jms_field>(in.a);
        stack[sp++] = jms_value(field, lookup_header(stomp_header(field)));
        break;
      }
      case opcode::negate: top() = negate(top()); break;
      case opcode::plus: top() = unary_plus(top()); break;
      case opcode::add:
      case opcode::subtract:
      case opcode::multiply:
      case opcode::divide: {
        const value right = pop();
        const arithmetic op = in.op == opcode::add        ? arithmetic::add
                              : in.op == opcode::subtract ? arithmetic::subtract
                              : in.op == opcode::multiply ? arithmetic::multiply
                                                          : arithmetic::divide;
        top() = apply(op, top(), right);
        break;
      }
      case opcode::equal: {
        const value right = pop();
        top() = from_tribool(equal(top(), right));
        break;
      }
      case opcode::not_equal: {
        const value right = pop();
        top() = from_tribool(not_equal(top(), right));
        break;
      }
      case opcode::less:
      case opcode::less_equal:
      case opcode::greater:
      case opcode::greater_equal: {
        const value right = pop();
        const order op = in.op == opcode::less         ? order::less
                         : in.op == opcode::less_equal ? order::less_equal
                         : in.op == opcode::greater    ? order::greater
                                                       : order::greater_equal;
        top() = from_tribool(compare(top(), op, right));
        break;
      }
      case opcode::between:
      case opcode::not_between: {
        // JMS: x BETWEEN a AND b is a <= x AND x <= b, in three-valued logic; NOT BETWEEN its negation.
        const value high = pop();
        const value low = pop();
        tribool t = logical_and(compare(low, order::less_equal, top()), compare(top(), order::less_equal, high));
        top() = from_tribool(in.op == opcode::between ? t : logical_not(t));
        break;
      }
      case opcode::in: top() = from_tribool(in_list(p, p.lists[in.a], top())); break;
      case opcode::not_in: top() = from_tribool(logical_not(in_list(p, p.lists[in.a], top()))); break;
      case opcode::like: top() = from_tribool(like(p.patterns[in.a], top())); break;
      case opcode::not_like: top() = from_tribool(logical_not(like(p.patterns[in.a], top()))); break;
      case opcode::is_null: top() = value::of(top().type == kind::null); break;
      case opcode::is_not_null: top() = value::of(top().type != kind::null); break;
      case opcode::logical_not: top() = from_tribool(logical_not(as_condition(top()))); break;
      case opcode::logical_and: {
        const tribool right = as_condition(pop());
        top() = from_tribool(logical_and(as_condition(top()), right));
        break;
      }
      case opcode::logical_or: {
        const tribool right = as_condition(pop());
        top() = from_tribool(logical_or(as_condition(top()), right));
        break;
      }
      case opcode::jump_if_false:
      case opcode::jump_if_true: {
        const tribool t = as_condition(top());
        top() = from_tribool(t);
        if (t == (in.op == opcode::jump_if_false ? tribool::is_false : tribool::is_true)) pc = in.a - 1;  // the loop adds 1
        break;
      }
    }
  }
  return sp == 1 && as_condition(stack[0]) == tribool::is_true;
}

}  // namespace escrow::broker::selector_detail
