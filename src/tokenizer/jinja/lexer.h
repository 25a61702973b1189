// Splits a chat template into tokens the way Jinja's lexer does under transformers' settings (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False): template text, {{ }} and {% %} delimiters with the expression
// tokens between them. Comments vanish; whitespace control ({%- -%}, {%+) is applied to the text here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace plumb::tokenizer::jinja {

enum class TokenType {
  kText,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd
};

struct Token {
  TokenType type;
  std::string value;  // text, name, operator, or the unescaped string literal / number spelling
  int line;           // 1-based line of the template where the token starts
};

// Throws plumb::Error "chat template line N: ..." on an unterminated tag, string or comment.
std::vector<Token> tokenize_template(std::string_view source);

}  // namespace plumb::tokenizer::jinja
