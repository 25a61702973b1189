// The syntax tree of a parsed chat template. Expressions and statements are plain structs with a kind tag; every node
// keeps the template line it came from, so runtime errors can name it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace plumb::tokenizer::jinja {

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // items
  kTuple,     // items (evaluates to a list; Python tuples print differently, see Interpreter)
  kDict,      // items = key0, value0, key1, value1, ...
  kAttr,      // items[0].name
  kItem,      // items[0][items[1]]
  kSlice,     // items[0][items[1]:items[2]:items[3]] (null for an omitted bound)
  kCall,      // items[0](items[1..], keywords)
  kFilter,    // items[0] | name(items[1..], keywords)
  kTest,      // items[0] is name(items[1..]); negated for "is not"
  kNot,       // not items[0]
  kNegate,    // -items[0] (name "-") or +items[0] (name "+")
  kBinary,    // items[0] name items[1], name in + - * / // % ** ~
  kCompare,   // items[0] ops[0] items[1] ops[1] items[2] ...
  kAnd,       // items[0] and items[1]
  kOr,        // items[0] or items[1]
  kCondition  // items[1] if items[0] else items[2] (items[2] null when there is no else)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  bool negated = false;
  int depth = 1;  // levels of the tree from this node down (the parser bounds it)
};

enum class NodeKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches: (condition or null for else, body)
  kFor,          // for targets in expr [if filter] body [else else_body]
  kSet,          // set targets = expr, or set expr.name = value (attr_object set)
  kSetBlock,     // {% set name %}body{% endset %}
  kMacro,        // macro name(params) body
  kCallBlock,    // {% call macro(...) %}body{% endcall %}; the body is the macro's caller()
  kFilterBlock,  // {% filter f %}body{% endfilter %}; expr is the filter applied to a placeholder
  kBreak,
  kContinue,
  kGeneration  // {% generation %}body{% endgeneration %} (transformers' assistant-mask marker): renders body
};

struct Node;
using Body = std::vector<Node>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when the parameter is required
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;                  // kText; the name of kSetBlock / kMacro
  ExprPtr expr;                      // kOutput, kFor iterable, kSet value, kCallBlock call, kFilterBlock filter
  ExprPtr attr_object;               // kSet of ns.attr: the object (targets[0] is the attribute)
  ExprPtr filter;                    // kFor "if" condition
  std::vector<std::string> targets;  // kFor / kSet names
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  std::vector<MacroParam> params;                  // kMacro
  Body body;
  Body else_body;
};

}  // namespace plumb::tokenizer::jinja
