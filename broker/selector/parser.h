// The selector grammar (JMS 2.0 3.8.1.1), lowest precedence first:
//
//   condition  := and ( OR and )*
//   and        := not ( AND not )*
//   not        := NOT* comparison
//   comparison := sum [ (= | <> | < | <= | > | >=) sum
//                     | [NOT] BETWEEN sum AND sum
//                     | identifier [NOT] IN ( string {, string} )
//                     | identifier [NOT] LIKE string [ESCAPE string]
//                     | identifier IS [NOT] NULL ]
//   sum        := product ( (+ | -) product )*
//   product    := signed ( (* | /) signed )*
//   signed     := (+ | -)* primary
//   primary    := literal | identifier | "quoted name" | ( condition )
//
// compile() parses and type-checks the text and writes the program (program.h) as it goes: one
// pass, no tree. Types are checked where the text alone decides them: arithmetic, <, <=, >, >= and
// BETWEEN need numbers (a string or boolean literal there is refused: JMS allows strings and
// booleans only = and <>), AND, OR and NOT need conditions, IN, LIKE and IS NULL an identifier.
// A plain header's type is known only at evaluation (values.h).
#pragma once

#include <memory>
#include <string_view>
#include <variant>

#include "escrow/broker/selector/selector.h"  // selector_error
#include "program.h"

namespace escrow::broker::selector_detail {

// The compiled program, or the first error. A text that is empty or only whitespace compiles to
// no program (nullptr): no selector, which selects everything.
std::variant<std::shared_ptr<const program>, selector_error> compile(std::string_view text);

}  // namespace escrow::broker::selector_detail
