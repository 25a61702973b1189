// Chat-template parser (see parser.h): recursive descent over jinja2's expression grammar, lowest precedence first:
// conditional (a if b else c), or, and, not, comparisons (== != < <= > >= in, not in), + -, ~, * / // %, **,
// unary - +, then primaries with their postfixes (.attr, [index], [a:b:c], (call)) and filters/tests (| f, is t).
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/strings.h"

namespace plumb::tokenizer::jinja {
namespace {

ExprPtr make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

Node make_node(NodeKind kind, int line) {
  Node n;
  n.kind = kind;
  n.line = line;
  return n;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse_all() {
    Body body = parse_body({});
    PLUMB_CHECK(peek().type == TokenType::kEnd, "chat template line {}: unexpected tag", peek().line);
    return body;
  }

 private:
  // ---- token helpers
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  Token next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool at_op(std::string_view op) const { return peek().type == TokenType::kOperator && peek().value == op; }
  bool at_name(std::string_view name) const { return peek().type == TokenType::kName && peek().value == name; }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    ++pos_;
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    ++pos_;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    const Token& t = peek();
    const std::string near = t.type == TokenType::kEnd ? "end of template"
                             : t.type == TokenType::kBlockEnd || t.type == TokenType::kVariableEnd
                                 ? "end of tag"
                                 : "'" + t.value + "'";
    PLUMB_FAIL("chat template line {}: {} (at {})", t.line, what, near);
  }
  [[noreturn]] void fail_nesting(int line) const {
    PLUMB_FAIL("chat template line {}: expressions and blocks nest deeper than {} levels (the limit)", line,
               kMaxTemplateNesting);
  }

  // Held while the parser recurses into a nested block or expression, so hostile input fails with a message instead
  // of overflowing the stack.
  class Nesting {
   public:
    explicit Nesting(Parser& parser) : parser_(parser) {
      if (parser_.nesting_ == kMaxTemplateNesting) parser_.fail_nesting(parser_.peek().line);
      ++parser_.nesting_;
    }
    ~Nesting() { --parser_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Parser& parser_;
  };

  // Records the depth of a finished node's tree and refuses one deeper than the limit. Chains such as 1+1+...+1 and
  // a.b.c... are parsed in loops, not recursion, but still build a tree that evaluation walks recursively.
  ExprPtr sized(ExprPtr e) const {
    int below = 0;
    for (const ExprPtr& item : e->items)
      if (item) below = std::max(below, item->depth);
    for (const auto& keyword : e->keywords) below = std::max(below, keyword.second->depth);
    e->depth = below + 1;
    if (e->depth > kMaxTemplateNesting) fail_nesting(e->line);
    return e;
  }

  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}'", op));
  }
  std::string expect_name() {
    if (peek().type != TokenType::kName) fail("expected a name");
    return next().value;
  }
  void expect_block_end() {
    if (peek().type != TokenType::kBlockEnd) fail("expected end of statement block");
    ++pos_;
  }

  // ---- statements
  // Parses nodes until a {% tag %} whose name is in `stops` (left unconsumed: pos_ at the tag's name).
  Body parse_body(std::initializer_list<std::string_view> stops) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == TokenType::kEnd) {
        if (stops.size() > 0) fail(fmt::format("missing '{{% {} %}}'", *(stops.end() - 1)));  // the end tag
        return body;
      }
      if (t.type == TokenType::kText) {
        Node n = make_node(NodeKind::kText, t.line);
        n.text = next().value;
        body.push_back(std::move(n));
      } else if (t.type == TokenType::kVariableBegin) {
        ++pos_;
        Node n = make_node(NodeKind::kOutput, t.line);
        n.expr = parse_tuple_or_expression();
        if (peek().type != TokenType::kVariableEnd) fail("expected end of print statement");
        ++pos_;
        body.push_back(std::move(n));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& name = peek(1);
        for (std::string_view stop : stops) {
          if (name.type == TokenType::kName && name.value == stop) {
            ++pos_;
            return body;
          }
        }
        ++pos_;
        body.push_back(parse_statement());
      } else {
        fail("unexpected token");
      }
    }
  }

  Node parse_statement() {
    const Nesting nesting(*this);
    const int line = peek().line;
    if (peek().type != TokenType::kName) fail("expected a statement name");
    const std::string keyword = next().value;
    if (keyword == "if") return parse_if(line);
    if (keyword == "for") return parse_for(line);
    if (keyword == "set") return parse_set(line);
    if (keyword == "macro") return parse_macro(line);
    if (keyword == "call") return parse_call_block(line);
    if (keyword == "filter") return parse_filter_block(line);
    if (keyword == "break" || keyword == "continue") {
      PLUMB_CHECK(loop_depth_ > 0, "chat template line {}: '{}' outside a loop", line, keyword);
      expect_block_end();
      return make_node(keyword == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    }
    if (keyword == "generation") {
      expect_block_end();
      Node n = make_node(NodeKind::kGeneration, line);
      n.body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return n;
    }
    PLUMB_FAIL("chat template line {}: '{{% {} %}}' is not supported", line, keyword);
  }

  void end_tag(std::string_view name) {
    if (!skip_name(name)) fail(fmt::format("expected '{}'", name));
    expect_block_end();
  }

  Node parse_if(int line) {
    Node n = make_node(NodeKind::kIf, line);
    ExprPtr condition = parse_tuple_or_expression();
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      n.branches.emplace_back(std::move(condition), std::move(body));
      const std::string tag = next().value;
      if (tag == "elif") {
        condition = parse_tuple_or_expression();
        expect_block_end();
      } else if (tag == "else") {
        expect_block_end();
        n.branches.emplace_back(nullptr, parse_body({"endif"}));
        end_tag("endif");
        return n;
      } else {
        expect_block_end();
        return n;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names{expect_name()};
    while (skip_op(",")) names.push_back(expect_name());
    return names;
  }

  Node parse_for(int line) {
    Node n = make_node(NodeKind::kFor, line);
    n.targets = parse_targets();
    if (!skip_name("in")) fail("expected 'in'");
    n.expr = parse_or();  // no conditional here: "if" introduces the loop filter
    if (skip_name("if")) n.filter = parse_expression();
    if (at_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    n.body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (next().value == "else") {
      expect_block_end();
      n.else_body = parse_body({"endfor"});
      end_tag("endfor");
    } else {
      expect_block_end();
    }
    return n;
  }

  Node parse_set(int line) {
    if (peek(1).type == TokenType::kBlockEnd) {  // {% set name %}...{% endset %}
      Node n = make_node(NodeKind::kSetBlock, line);
      n.text = expect_name();
      expect_block_end();
      n.body = parse_body({"endset"});
      end_tag("endset");
      return n;
    }
    Node n = make_node(NodeKind::kSet, line);
    const std::string first = expect_name();
    if (skip_op(".")) {  // set ns.attr = value
      n.attr_object = make(ExprKind::kName, line);
      n.attr_object->name = first;
      n.targets.push_back(expect_name());
    } else {
      n.targets.push_back(first);
      while (skip_op(",")) n.targets.push_back(expect_name());
    }
    expect_op("=");
    n.expr = parse_tuple_or_expression();
    expect_block_end();
    return n;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!skip_op(")")) {
      if (!params.empty()) expect_op(",");
      if (skip_op(")")) break;
      MacroParam p{expect_name(), nullptr};
      if (skip_op("=")) p.default_value = parse_expression();
      params.push_back(std::move(p));
    }
    return params;
  }

  Node parse_macro(int line) {
    Node n = make_node(NodeKind::kMacro, line);
    n.text = expect_name();
    n.params = parse_params();
    expect_block_end();
    n.body = parse_body({"endmacro"});
    end_tag("endmacro");
    return n;
  }

  Node parse_call_block(int line) {
    Node n = make_node(NodeKind::kCallBlock, line);
    if (at_op("(")) n.params = parse_params();
    n.expr = parse_expression();
    PLUMB_CHECK(n.expr->kind == ExprKind::kCall, "chat template line {}: '{{% call %}}' needs a macro call", line);
    expect_block_end();
    n.body = parse_body({"endcall"});
    end_tag("endcall");
    return n;
  }

  Node parse_filter_block(int line) {
    Node n = make_node(NodeKind::kFilterBlock, line);
    ExprPtr placeholder = make(ExprKind::kName, line);
    placeholder->name = "";  // stands for the rendered body
    n.expr = parse_filters(std::move(placeholder), /*first_pipe_consumed=*/true);
    expect_block_end();
    n.body = parse_body({"endfilter"});
    end_tag("endfilter");
    return n;
  }

  // ---- expressions
  ExprPtr parse_tuple_or_expression() {
    const int line = peek().line;
    ExprPtr first = parse_expression();
    if (!at_op(",")) return first;
    ExprPtr tuple = make(ExprKind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().type == TokenType::kVariableEnd || peek().type == TokenType::kBlockEnd) break;
      tuple->items.push_back(parse_expression());
    }
    return sized(std::move(tuple));
  }

  ExprPtr parse_expression() {
    const Nesting nesting(*this);
    ExprPtr value = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      ExprPtr e = make(ExprKind::kCondition, line);
      e->items.push_back(parse_or());
      e->items.push_back(std::move(value));
      e->items.push_back(skip_name("else") ? parse_expression() : nullptr);
      value = sized(std::move(e));
    }
    return value;
  }

  ExprPtr binary_chain(ExprKind kind, std::string_view word, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (at_name(word)) {
      ExprPtr e = make(kind, next().line);
      e->items.push_back(std::move(left));
      e->items.push_back((this->*operand)());
      left = sized(std::move(e));
    }
    return left;
  }
  ExprPtr parse_or() { return binary_chain(ExprKind::kOr, "or", &Parser::parse_and); }
  ExprPtr parse_and() { return binary_chain(ExprKind::kAnd, "and", &Parser::parse_not); }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const Nesting nesting(*this);
      ExprPtr e = make(ExprKind::kNot, next().line);
      e->items.push_back(parse_not());
      return sized(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (peek().type == TokenType::kOperator &&
          (peek().value == "==" || peek().value == "!=" || peek().value == "<" || peek().value == "<=" ||
           peek().value == ">" || peek().value == ">=")) {
        op = next().value;
      } else if (skip_name("in")) {
        op = "in";
      } else if (at_name("not") && peek(1).type == TokenType::kName && peek(1).value == "in") {
        pos_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!e) {
        e = make(ExprKind::kCompare, line);
        e->items.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->items.push_back(parse_math1());
    }
    return e ? sized(std::move(e)) : std::move(first);
  }

  ExprPtr binary_ops(std::initializer_list<std::string_view> ops, ExprPtr (Parser::*operand)()) {
    ExprPtr left = (this->*operand)();
    while (true) {
      bool matched = false;
      for (std::string_view op : ops) {
        if (at_op(op)) {
          ExprPtr e = make(ExprKind::kBinary, next().line);
          e->name = std::string(op);
          e->items.push_back(std::move(left));
          e->items.push_back((this->*operand)());
          left = sized(std::move(e));
          matched = true;
          break;
        }
      }
      if (!matched) return left;
    }
  }
  ExprPtr parse_math1() { return binary_ops({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return binary_ops({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return binary_ops({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return binary_ops({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filters) {
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Nesting nesting(*this);
      const Token sign = next();
      node = make(ExprKind::kNegate, sign.line);
      node->name = sign.value;
      node->items.push_back(parse_unary(false));
      node = sized(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    return with_filters ? parse_filters(std::move(node), false) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Token t = next();
    switch (t.type) {
      case TokenType::kName: {
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        if (t.value == "true" || t.value == "True") {
          e->value = Value::boolean(true);
        } else if (t.value == "false" || t.value == "False") {
          e->value = Value::boolean(false);
        } else if (t.value == "none" || t.value == "None") {
          e->value = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.value;
        }
        return e;
      }
      case TokenType::kString: {
        std::string s = t.value;
        while (peek().type == TokenType::kString) s += next().value;  // adjacent literals concatenate
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        e->value = Value::string(std::move(s));
        return e;
      }
      case TokenType::kInteger: {
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        e->value =
            Value::integer(decimal_int64(t.value, fmt::format("chat template line {}: integer literal", t.line)));
        return e;
      }
      case TokenType::kFloat: {
        ExprPtr e = make(ExprKind::kLiteral, t.line);
        e->value = Value::real(std::strtod(t.value.c_str(), nullptr));
        return e;
      }
      case TokenType::kOperator:
        if (t.value == "(") return parse_parenthesized(t.line);
        if (t.value == "[") return parse_sequence(ExprKind::kList, "]", t.line);
        if (t.value == "{") return parse_dict(t.line);
        break;
      default:
        break;
    }
    --pos_;
    fail("expected an expression");
  }

  ExprPtr parse_parenthesized(int line) {
    if (skip_op(")")) return make(ExprKind::kTuple, line);
    ExprPtr first = parse_expression();
    if (skip_op(")")) return first;
    ExprPtr tuple = make(ExprKind::kTuple, line);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_op(")")) break;
      tuple->items.push_back(parse_expression());
    }
    expect_op(")");
    return sized(std::move(tuple));
  }

  ExprPtr parse_sequence(ExprKind kind, std::string_view close, int line) {
    ExprPtr e = make(kind, line);
    while (!skip_op(close)) {
      if (!e->items.empty()) expect_op(",");
      if (skip_op(close)) break;
      e->items.push_back(parse_expression());
    }
    return sized(std::move(e));
  }

  ExprPtr parse_dict(int line) {
    ExprPtr e = make(ExprKind::kDict, line);
    while (!skip_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (skip_op("}")) break;
      e->items.push_back(parse_expression());
      expect_op(":");
      e->items.push_back(parse_expression());
    }
    return sized(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        ExprPtr e = make(ExprKind::kAttr, line);
        if (peek().type == TokenType::kInteger) {  // foo.0 is foo[0]
          e->kind = ExprKind::kItem;
          e->items.push_back(std::move(node));
          ExprPtr index = make(ExprKind::kLiteral, line);
          const Token& digits = next();
          index->value =
              Value::integer(decimal_int64(digits.value, fmt::format("chat template line {}: index", digits.line)));
          e->items.push_back(std::move(index));
        } else {
          e->name = expect_name();
          e->items.push_back(std::move(node));
        }
        node = sized(std::move(e));
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node), next().line);
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, int line) {
    ExprPtr bounds[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!at_op(":") && !at_op("]")) bounds[k] = parse_expression();
      if (k < 2 && skip_op(":")) {
        slice = true;
      } else {
        break;
      }
    }
    expect_op("]");
    ExprPtr e = make(slice ? ExprKind::kSlice : ExprKind::kItem, line);
    e->items.push_back(std::move(target));
    if (!slice && !bounds[0]) fail("expected a subscript");
    for (int k = 0; k < (slice ? 3 : 1); ++k) e->items.push_back(std::move(bounds[k]));
    return sized(std::move(e));
  }

  // Arguments after "(": positional expressions, then name=expression keywords.
  void parse_arguments(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (at_op("*") || at_op("**")) fail("*args and **kwargs in calls are not supported");
      if (peek().type == TokenType::kName && peek(1).type == TokenType::kOperator && peek(1).value == "=") {
        std::string name = next().value;
        ++pos_;
        e.keywords.emplace_back(std::move(name), parse_expression());
      } else {
        if (!e.keywords.empty()) fail("positional argument after keyword argument");
        e.items.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = make(ExprKind::kCall, peek().line);
    e->items.push_back(std::move(callee));
    parse_arguments(*e);
    return sized(std::move(e));
  }

  // "| name(args)" filters and "is [not] name args" tests; calls may follow either.
  ExprPtr parse_filters(ExprPtr node, bool first_pipe_consumed) {
    bool pipe = first_pipe_consumed;
    while (true) {
      if (pipe || at_op("|")) {
        if (!pipe) ++pos_;
        pipe = false;
        ExprPtr e = make(ExprKind::kFilter, peek().line);
        e->name = expect_name();
        PLUMB_CHECK(is_known_filter(e->name), "chat template line {}: filter '{}' is not supported", e->line, e->name);
        e->items.push_back(std::move(node));
        if (at_op("(")) parse_arguments(*e);
        node = sized(std::move(e));
      } else if (at_name("is")) {
        ExprPtr e = make(ExprKind::kTest, next().line);
        e->negated = skip_name("not");
        e->name = expect_name();
        PLUMB_CHECK(is_known_test(e->name), "chat template line {}: test '{}' is not supported", e->line, e->name);
        e->items.push_back(std::move(node));
        if (at_op("(")) {
          parse_arguments(*e);
        } else if (starts_test_argument()) {
          e->items.push_back(parse_postfix(parse_primary()));
        }
        node = sized(std::move(e));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // jinja2 takes one bare argument after a test name when a value follows ("x is divisibleby 3").
  bool starts_test_argument() const {
    const Token& t = peek();
    if (t.type == TokenType::kName) return t.value != "else" && t.value != "or" && t.value != "and";
    return t.type == TokenType::kString || t.type == TokenType::kInteger || t.type == TokenType::kFloat ||
           (t.type == TokenType::kOperator && (t.value == "(" || t.value == "[" || t.value == "{"));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;  // blocks and expressions open around the token being parsed
};

}  // namespace

Body parse_template(std::string_view source) {
  return Parser(tokenize_template(source)).parse_all();
}

}  // namespace plumb::tokenizer::jinja
