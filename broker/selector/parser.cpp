// The selector parser and code generator (parser.h): recursive descent, one function per
// precedence level, emitting postfix code as each operand is complete. Recursion happens only at
// parentheses (bounded by kSelectorMaxDepth); chains of operators and of NOT or signs are loops.
#include "parser.h"

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lexer.h"
#include "utf8.h"

namespace escrow::broker::selector_detail {

namespace {

constexpr std::uint64_t kLongLimit = std::uint64_t{1} << 63;

// What the text alone says an operand's type is.
enum class static_type {
  condition,  // a comparison, AND/OR/NOT, TRUE/FALSE, JMSRedelivered
  number,     // a numeric literal, arithmetic, JMSPriority, JMSTimestamp, JMSExpiration
  string,     // a string literal, JMSMessageID, JMSType, JMSCorrelationID, JMSDeliveryMode
  header,     // a plain header: typed only when evaluated
};

std::string a(static_type t) {
  switch (t) {
    case static_type::condition: return "a condition";
    case static_type::number: return "a number";
    case static_type::string: return "a string";
    case static_type::header: return "a header";
  }
  return "a value";
}

struct operand {
  static_type type = static_type::condition;
  std::size_t position = 0;  // where its text starts
  bool identifier = false;   // a bare identifier (in parentheses or not)
  std::string name;          // the identifier's name as written, for messages
};

// An operand that is not an identifier: the result of an operator.
operand result(static_type type, std::size_t position) {
  operand o;
  o.type = type;
  o.position = position;
  return o;
}

bool numeric(const operand& o) { return o.type == static_type::number || o.type == static_type::header; }
bool conditional(const operand& o) { return o.type == static_type::condition || o.type == static_type::header; }

bool is_comparison(token_kind k) {
  switch (k) {
    case token_kind::equal:
    case token_kind::not_equal:
    case token_kind::less:
    case token_kind::less_equal:
    case token_kind::greater:
    case token_kind::greater_equal:
    case token_kind::kw_between:
    case token_kind::kw_in:
    case token_kind::kw_like:
    case token_kind::kw_is:
    case token_kind::kw_not: return true;
    default: return false;
  }
}

class parser {
 public:
  explicit parser(std::string_view text) : text_(text), lexer_(text) {}

  std::variant<std::shared_ptr<const program>, selector_error> run() {
    if (text_.size() > kSelectorMaxBytes) {
      fail(kSelectorMaxBytes, "the selector is " + std::to_string(text_.size()) + " bytes long, more than the limit of " +
                                  std::to_string(kSelectorMaxBytes));
      return std::move(*error_);
    }
    current_ = lexer_.next();
    if (current_.kind == token_kind::error) fail(current_.position, current_.text);
    if (error_) return std::move(*error_);
    if (current_.kind == token_kind::end) return std::shared_ptr<const program>();  // no selector
    operand top;
    if (!parse_or(top)) return std::move(*error_);
    if (current_.kind != token_kind::end) {
      fail(current_.position, "expected an operator or end of input, found " + found());
      return std::move(*error_);
    }
    if (!conditional(top)) {
      fail(top.position, "expected a condition (a comparison, TRUE, FALSE or a header), found " + a(top.type));
      return std::move(*error_);
    }
    return std::make_shared<const program>(std::move(program_));
  }

 private:
  // -- tokens and errors ---------------------------------------------------------------------

  bool advance() {
    previous_ = std::move(current_);
    has_previous_ = true;
    current_ = lexer_.next();
    if (current_.kind == token_kind::error) return fail(current_.position, current_.text);
    return true;
  }

  bool fail(std::size_t position, std::string message) {
    if (!error_)
      error_ = selector_error{position, "selector: at column " + std::to_string(utf8_column(text_, position)) + ": " +
                                            std::move(message)};
    return false;
  }

  std::string found() const { return describe(current_, text_); }
  std::string after() const { return has_previous_ ? " after " + describe(previous_, text_) : std::string(); }

  // "expected WHAT after 'PREVIOUS', found CURRENT", at the current token.
  bool fail_expected(std::string_view what) {
    return fail(current_.position, "expected " + std::string(what) + after() + ", found " + found());
  }

  // -- code ----------------------------------------------------------------------------------

  std::size_t emit(opcode op, std::uint32_t arg = 0) {
    program_.code.push_back({op, arg});
    switch (op) {
      case opcode::push_constant:
      case opcode::push_header:
      case opcode::push_jms: ++stack_; break;
      case opcode::between:
      case opcode::not_between: stack_ -= 2; break;
      case opcode::add:
      case opcode::subtract:
      case opcode::multiply:
      case opcode::divide:
      case opcode::equal:
      case opcode::not_equal:
      case opcode::less:
      case opcode::less_equal:
      case opcode::greater:
      case opcode::greater_equal:
      case opcode::logical_and:
      case opcode::logical_or: --stack_; break;
      default: break;  // one operand in, one out; jumps keep theirs
    }
    if (stack_ > program_.max_stack) program_.max_stack = stack_;
    return program_.code.size() - 1;
  }

  void patch_jump(std::size_t at) { program_.code[at].a = static_cast<std::uint32_t>(program_.code.size()); }

  void emit_constant(const constant& c) {
    program_.constants.push_back(c);
    emit(opcode::push_constant, static_cast<std::uint32_t>(program_.constants.size() - 1));
  }

  void emit_number(const value& v) {
    constant c;
    c.type = v.type;
    c.exact = v.exact;
    c.approx = v.approx;
    emit_constant(c);
  }

  // -- grammar -------------------------------------------------------------------------------

  // condition := and ( OR and )*
  bool parse_or(operand& out) {
    if (!parse_and(out)) return false;
    if (current_.kind != token_kind::kw_or) return true;
    if (!conditional(out)) return fail(out.position, "expected a condition before OR, found " + a(out.type));
    while (current_.kind == token_kind::kw_or) {
      const std::size_t jump = emit(opcode::jump_if_true);
      if (!advance()) return false;
      operand right;
      if (!parse_and(right)) return false;
      if (!conditional(right)) return fail(right.position, "expected a condition after OR, found " + a(right.type));
      emit(opcode::logical_or);
      patch_jump(jump);
    }
    out = result(static_type::condition, out.position);
    return true;
  }

  // and := not ( AND not )*
  bool parse_and(operand& out) {
    if (!parse_not(out)) return false;
    if (current_.kind != token_kind::kw_and) return true;
    if (!conditional(out)) return fail(out.position, "expected a condition before AND, found " + a(out.type));
    while (current_.kind == token_kind::kw_and) {
      const std::size_t jump = emit(opcode::jump_if_false);
      if (!advance()) return false;
      operand right;
      if (!parse_not(right)) return false;
      if (!conditional(right)) return fail(right.position, "expected a condition after AND, found " + a(right.type));
      emit(opcode::logical_and);
      patch_jump(jump);
    }
    out = result(static_type::condition, out.position);
    return true;
  }

  // not := NOT* comparison
  bool parse_not(operand& out) {
    std::size_t nots = 0;
    std::size_t first = current_.position;
    while (current_.kind == token_kind::kw_not) {
      ++nots;
      if (!advance()) return false;
    }
    if (!parse_comparison(out)) return false;
    if (nots == 0) return true;
    if (!conditional(out)) return fail(out.position, "expected a condition after NOT, found " + a(out.type));
    for (std::size_t i = 0; i < nots; ++i) emit(opcode::logical_not);
    out = result(static_type::condition, first);
    return true;
  }

  bool parse_comparison(operand& out) {
    operand left;
    if (!parse_additive(left)) return false;
    out = left;
    const token_kind k = current_.kind;
    bool negated = false;
    if (k == token_kind::kw_not) {
      if (!advance()) return false;
      if (current_.kind != token_kind::kw_between && current_.kind != token_kind::kw_in && current_.kind != token_kind::kw_like)
        return fail_expected("BETWEEN, IN or LIKE");
      negated = true;
    }
    bool done = true;
    switch (current_.kind) {
      case token_kind::equal: done = binary_comparison(left, opcode::equal, false); break;
      case token_kind::not_equal: done = binary_comparison(left, opcode::not_equal, false); break;
      case token_kind::less: done = binary_comparison(left, opcode::less, true); break;
      case token_kind::less_equal: done = binary_comparison(left, opcode::less_equal, true); break;
      case token_kind::greater: done = binary_comparison(left, opcode::greater, true); break;
      case token_kind::greater_equal: done = binary_comparison(left, opcode::greater_equal, true); break;
      case token_kind::kw_between: done = parse_between(left, negated); break;
      case token_kind::kw_in: done = parse_in(left, negated); break;
      case token_kind::kw_like: done = parse_like(left, negated); break;
      case token_kind::kw_is: done = parse_is(left); break;
      default: return true;  // no comparison: the operand itself
    }
    if (!done) return false;
    out = result(static_type::condition, left.position);
    if (is_comparison(current_.kind))
      return fail(current_.position, std::string("expected AND, OR or ") + (depth_ > 0 ? "')'" : "end of input") + ", found " + found() +
                                         " (comparisons do not chain)");
    return true;
  }

  bool binary_comparison(const operand& left, opcode op, bool ordering) {
    const std::string symbol = describe(current_, text_);
    const char* why = " (strings and booleans compare only with = and <>)";
    if (ordering && !numeric(left)) return fail(left.position, "expected a number before " + symbol + why + ", found " + a(left.type));
    if (!advance()) return false;
    operand right;
    if (!parse_additive(right)) return false;
    if (ordering && !numeric(right)) return fail(right.position, "expected a number after " + symbol + why + ", found " + a(right.type));
    emit(op);
    return true;
  }

  bool parse_between(const operand& left, bool negated) {
    if (!numeric(left)) return fail(left.position, "expected a number before BETWEEN, found " + a(left.type));
    if (!advance()) return false;
    operand low, high;
    if (!parse_additive(low)) return false;
    if (!numeric(low)) return fail(low.position, "expected a number after BETWEEN, found " + a(low.type));
    if (current_.kind != token_kind::kw_and)
      return fail(current_.position, "expected AND after BETWEEN's lower bound, found " + found());
    if (!advance()) return false;
    if (!parse_additive(high)) return false;
    if (!numeric(high)) return fail(high.position, "expected a number after BETWEEN's AND, found " + a(high.type));
    emit(negated ? opcode::not_between : opcode::between);
    return true;
  }

  // IN and LIKE take an identifier whose value is a string (JMS): a plain header or a JMS name of
  // type String.
  bool string_identifier(const operand& left, std::string_view keyword) {
    if (!left.identifier) return fail(left.position, "expected an identifier before " + std::string(keyword) + ", found " + a(left.type));
    if (left.type != static_type::header && left.type != static_type::string)
      return fail(left.position, "expected an identifier of type string before " + std::string(keyword) + ", found " + left.name +
                                     ", " + a(left.type));
    return true;
  }

  bool parse_in(const operand& left, bool negated) {
    if (!string_identifier(left, "IN")) return false;
    if (!advance()) return false;
    if (current_.kind != token_kind::left_paren) return fail_expected("'('");
    string_list list{static_cast<std::uint32_t>(program_.list_items.size()), 0};
    while (true) {
      if (!advance()) return false;
      if (current_.kind != token_kind::string) return fail_expected("a string");
      program_.list_items.push_back(program_.add_to_pool(current_.text));
      ++list.count;
      if (!advance()) return false;
      if (current_.kind == token_kind::right_paren) break;
      if (current_.kind != token_kind::comma) return fail_expected("',' or ')'");
    }
    if (!advance()) return false;
    program_.lists.push_back(list);
    emit(negated ? opcode::not_in : opcode::in, static_cast<std::uint32_t>(program_.lists.size() - 1));
    return true;
  }

  bool parse_like(const operand& left, bool negated) {
    if (!string_identifier(left, "LIKE")) return false;
    if (!advance()) return false;
    if (current_.kind != token_kind::string) return fail_expected("a string (the pattern)");
    const token pattern = current_;
    if (!advance()) return false;
    std::optional<std::string> escape;
    if (current_.kind == token_kind::kw_escape) {
      if (!advance()) return false;
      if (current_.kind != token_kind::string) return fail_expected("a string of one character");
      if (current_.text.empty() || utf8_length(current_.text, 0) != current_.text.size())
        return fail(current_.position, "expected one character after ESCAPE, found " + found());
      escape = current_.text;
      if (!advance()) return false;
    }
    auto compiled = compile_like(pattern.text, escape);
    if (auto* problem = std::get_if<std::string>(&compiled)) return fail(pattern.position, *problem);
    program_.patterns.push_back(std::move(std::get<like_pattern>(compiled)));
    emit(negated ? opcode::not_like : opcode::like, static_cast<std::uint32_t>(program_.patterns.size() - 1));
    return true;
  }

  bool parse_is(const operand& left) {
    if (!left.identifier) return fail(left.position, "expected an identifier before IS, found " + a(left.type));
    if (!advance()) return false;
    bool negated = false;
    if (current_.kind == token_kind::kw_not) {
      negated = true;
      if (!advance()) return false;
    }
    if (current_.kind != token_kind::kw_null) return fail_expected(negated ? "NULL" : "NULL or NOT NULL");
    if (!advance()) return false;
    emit(negated ? opcode::is_not_null : opcode::is_null);
    return true;
  }

  // sum := product ( (+ | -) product )*
  bool parse_additive(operand& out) {
    if (!parse_multiplicative(out)) return false;
    while (current_.kind == token_kind::plus || current_.kind == token_kind::minus) {
      if (!arithmetic_step(out, current_.kind == token_kind::plus ? opcode::add : opcode::subtract, true)) return false;
    }
    return true;
  }

  // product := signed ( (* | /) signed )*
  bool parse_multiplicative(operand& out) {
    if (!parse_unary(out)) return false;
    while (current_.kind == token_kind::star || current_.kind == token_kind::slash) {
      if (!arithmetic_step(out, current_.kind == token_kind::star ? opcode::multiply : opcode::divide, false)) return false;
    }
    return true;
  }

  // One `left OP right` of a sum or product; `out` is the left operand, then the result.
  bool arithmetic_step(operand& out, opcode op, bool additive) {
    const std::string symbol = describe(current_, text_);
    if (!numeric(out)) return fail(out.position, "expected a number before " + symbol + ", found " + a(out.type));
    if (!advance()) return false;
    operand right;
    if (!(additive ? parse_multiplicative(right) : parse_unary(right))) return false;
    if (!numeric(right)) return fail(right.position, "expected a number after " + symbol + ", found " + a(right.type));
    emit(op);
    out = result(static_type::number, out.position);
    return true;
  }

  // signed := (+ | -)* primary. Signs on a numeric literal are folded into it, so that -5 is one
  // constant and -9223372036854775808 (whose digits alone are past a long) is Long.MIN_VALUE.
  bool parse_unary(operand& out) {
    std::vector<bool> minus;  // outermost first
    const std::size_t first = current_.position;
    while (current_.kind == token_kind::plus || current_.kind == token_kind::minus) {
      minus.push_back(current_.kind == token_kind::minus);
      if (!advance()) return false;
    }
    if (current_.kind == token_kind::exact || current_.kind == token_kind::approx) {
      value v;
      if (current_.kind == token_kind::approx) {
        v = value::of_approx(current_.approximate);
      } else if (current_.integer == kLongLimit) {
        if (minus.empty() || !minus.back())
          return fail(current_.position, "the number " + excerpt(text_.substr(current_.position, current_.length)) +
                                             " is out of the range of long (only a minus sign before it makes it one)");
        minus.pop_back();
        v = value::of_exact(std::numeric_limits<std::int64_t>::min());
      } else {
        v = value::of_exact(static_cast<std::int64_t>(current_.integer));
      }
      for (auto sign = minus.rbegin(); sign != minus.rend(); ++sign) v = *sign ? negate(v) : unary_plus(v);
      emit_number(v);
      if (!advance()) return false;
      out = result(static_type::number, first);
      return true;
    }
    if (!parse_primary(out)) return false;
    if (minus.empty()) return true;
    if (!numeric(out))
      return fail(out.position, std::string("expected a number after '") + (minus.back() ? '-' : '+') + "', found " + a(out.type));
    for (auto sign = minus.rbegin(); sign != minus.rend(); ++sign) emit(*sign ? opcode::negate : opcode::plus);
    out = result(static_type::number, first);
    return true;
  }

  bool parse_primary(operand& out) {
    out = operand{};
    out.position = current_.position;
    switch (current_.kind) {
      case token_kind::left_paren: {
        const std::size_t open = current_.position;
        if (++depth_ > kSelectorMaxDepth)
          return fail(open, "parentheses nested deeper than " + std::to_string(kSelectorMaxDepth) + " levels (the limit)");
        if (!advance()) return false;
        if (!parse_or(out)) return false;
        if (current_.kind != token_kind::right_paren)
          return fail(current_.position, "expected ')' to close the '(' at column " + std::to_string(utf8_column(text_, open)) +
                                             ", found " + found());
        --depth_;
        out.position = open;
        return advance();
      }
      case token_kind::string: {
        constant c;
        c.type = kind::string;
        c.text = program_.add_to_pool(current_.text);
        emit_constant(c);
        out.type = static_type::string;
        return advance();
      }
      case token_kind::kw_true:
      case token_kind::kw_false: {
        constant c;
        c.type = kind::boolean;
        c.boolean = current_.kind == token_kind::kw_true;
        emit_constant(c);
        out.type = static_type::condition;
        return advance();
      }
      case token_kind::identifier:
        if (auto field = find_jms_field(current_.text)) {
          emit(opcode::push_jms, static_cast<std::uint32_t>(*field));
          const kind k = jms_type(*field);
          out.type = k == kind::string ? static_type::string : k == kind::boolean ? static_type::condition : static_type::number;
          out.identifier = true;
          out.name = current_.text;
          return advance();
        }
        [[fallthrough]];
      case token_kind::quoted_identifier:
        program_.names.push_back(program_.add_to_pool(current_.text));
        emit(opcode::push_header, static_cast<std::uint32_t>(program_.names.size() - 1));
        out.type = static_type::header;
        out.identifier = true;
        out.name = current_.text;
        return advance();
      case token_kind::kw_null:
        return fail(current_.position, "expected a value" + after() + ", found 'NULL' (a missing header is tested with IS NULL)");
      default: return fail_expected("a value");
    }
  }

  std::string_view text_;
  lexer lexer_;
  token current_, previous_;
  bool has_previous_ = false;
  program program_;
  std::size_t stack_ = 0;
  std::size_t depth_ = 0;
  std::optional<selector_error> error_;
};

}  // namespace

std::variant<std::shared_ptr<const program>, selector_error> compile(std::string_view text) { return parser(text).run(); }

}  // namespace escrow::broker::selector_detail
