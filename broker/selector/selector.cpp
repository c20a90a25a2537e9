// The public face of selectors (escrow/broker/selector/selector.h): parse through the compiler
// (parser.cpp), match through the evaluator (evaluate.cpp).
#include "escrow/broker/selector/selector.h"

#include "parser.h"

namespace escrow::broker {

std::variant<selector, selector_error> selector::parse(std::string_view text) {
  auto compiled = selector_detail::compile(text);
  if (auto* error = std::get_if<selector_error>(&compiled)) return std::move(*error);
  selector s;
  s.text_ = std::string(text);
  s.program_ = std::move(std::get<std::shared_ptr<const selector_detail::program>>(compiled));
  return s;
}

bool selector::matches(const selector_lookup& lookup) const {
  return run({&lookup, [](const void* context, std::string_view header) -> std::optional<std::string_view> {
                return (*static_cast<const selector_lookup*>(context))(header);
              }});
}

bool selector::run(selector_detail::lookup_ref lookup) const {
  return program_ == nullptr || selector_detail::run(*program_, lookup);
}

}  // namespace escrow::broker
