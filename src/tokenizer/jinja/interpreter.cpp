// The chat-template interpreter (see interpreter.h).
#include "tokenizer/jinja/interpreter.h"

#include <memory>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja/builtins.h"

namespace plumb::tokenizer::jinja {
namespace {

constexpr int64_t kMaxSteps = 2'000'000;       // statements and expressions evaluated per render
constexpr size_t kMaxOutputBytes = 64u << 20;  // rendered prompt size
constexpr int kMaxCallDepth = 64;              // macro recursion

using Scope = std::unordered_map<std::string, Value>;
using ScopeStack = std::vector<std::shared_ptr<Scope>>;

enum class Flow { kNormal, kBreak, kContinue };

bool has_line_prefix(const char* message) {
  return std::string_view(message).rfind("chat template line ", 0) == 0;
}

class Renderer {
 public:
  explicit Renderer(const Dict& variables) {
    auto globals = std::make_shared<Scope>();
    for (auto& [k, v] : default_globals()) (*globals)[k] = v;
    for (const auto& [k, v] : variables) (*globals)[k] = v;
    scopes_ = {globals, std::make_shared<Scope>()};  // globals, then the template's own top-level variables
  }

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  void step() { PLUMB_CHECK(++steps_ <= kMaxSteps, "the template does too much work (over {} steps)", kMaxSteps); }

  Flow exec(const Body& body, std::string& out) {
    for (const Node& node : body) {
      Flow flow = Flow::kNormal;
      try {
        flow = exec_node(node, out);
      } catch (const Error& e) {
        if (has_line_prefix(e.what())) throw;
        throw Error(fmt::format("chat template line {}: {}", node.line, e.what()));
      }
      PLUMB_CHECK(out.size() <= kMaxOutputBytes, "the rendered prompt is larger than {} bytes", kMaxOutputBytes);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec_node(const Node& node, std::string& out) {
    step();
    switch (node.kind) {
      case NodeKind::kText:
        out += node.text;
        return Flow::kNormal;
      case NodeKind::kOutput:
        out += eval(*node.expr).str();
        return Flow::kNormal;
      case NodeKind::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (!condition || eval(*condition).truthy()) return exec(body, out);
        }
        return Flow::kNormal;
      case NodeKind::kFor:
        return exec_for(node, out);
      case NodeKind::kSet: {
        const Value value = eval(*node.expr);
        if (node.attr_object) {
          const Value target = eval(*node.attr_object);
          PLUMB_CHECK(target.kind() == Kind::kNamespace, "cannot assign attribute on non-namespace object");
          Dict& items = target.namespace_items();
          auto it = std::find_if(items.begin(), items.end(), [&](const auto& i) { return i.first == node.targets[0]; });
          if (it != items.end()) {
            it->second = value;
          } else {
            items.emplace_back(node.targets[0], value);
          }
        } else {
          assign(node.targets, value);
        }
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        std::string captured;
        exec(node.body, captured);
        (*scopes_.back())[node.text] = Value::string(std::move(captured));
        return Flow::kNormal;
      }
      case NodeKind::kMacro:
        (*scopes_.back())[node.text] = make_macro(node);
        return Flow::kNormal;
      case NodeKind::kCallBlock: {
        const Node* block = &node;
        const ScopeStack caller_scopes = scopes_;
        const Value caller = Value::function(
            "caller", [this, block, caller_scopes](CallArgs& args) { return invoke(*block, caller_scopes, args); });
        out += eval_call(*node.expr, &caller).str();
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        std::string captured;
        exec(node.body, captured);
        scopes_.push_back(std::make_shared<Scope>(Scope{{"", Value::string(std::move(captured))}}));
        const Value filtered = eval(*node.expr);
        scopes_.pop_back();
        out += filtered.str();
        return Flow::kNormal;
      }
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      case NodeKind::kGeneration:
        return exec(node.body, out);
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, const Value& value) {
    Scope& scope = *scopes_.back();
    if (targets.size() == 1) {
      scope[targets[0]] = value;
      return;
    }
    const std::vector<Value> items = iterate(value);
    PLUMB_CHECK(items.size() == targets.size(), "cannot unpack {} values into {} names", items.size(), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = items[i];
  }

  Flow exec_for(const Node& node, std::string& out) {
    std::vector<Value> items;
    {
      const Value iterable = eval(*node.expr);
      PLUMB_CHECK(!iterable.is_none(), "'NoneType' object is not iterable");
      for (Value& item : iterate(iterable)) {
        step();
        if (node.filter) {
          scopes_.push_back(std::make_shared<Scope>());
          assign(node.targets, item);
          const bool keep = eval(*node.filter).truthy();
          scopes_.pop_back();
          if (!keep) continue;
        }
        items.push_back(std::move(item));
      }
    }
    const auto n = static_cast<int64_t>(items.size());
    auto index = std::make_shared<int64_t>(0);  // one loop.cycle for the whole loop, reading the current index
    const Value cycle = Value::function("cycle", [index](CallArgs& a) {
      PLUMB_CHECK(!a.positional.empty(), "no items for cycling given");
      return a.positional[static_cast<size_t>(*index) % a.positional.size()];
    });
    for (int64_t i = 0; i < n; ++i) {
      step();  // an empty body still costs an iteration
      Dict loop{{"index", Value::integer(i + 1)},    {"index0", Value::integer(i)},
                {"revindex", Value::integer(n - i)}, {"revindex0", Value::integer(n - i - 1)},
                {"first", Value::boolean(i == 0)},   {"last", Value::boolean(i == n - 1)},
                {"length", Value::integer(n)},       {"depth", Value::integer(1)},
                {"depth0", Value::integer(0)}};
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[i + 1]);
      *index = i;
      loop.emplace_back("cycle", cycle);
      scopes_.push_back(std::make_shared<Scope>());
      (*scopes_.back())["loop"] = Value::dict(std::move(loop));
      assign(node.targets, items[i]);
      Flow flow = Flow::kNormal;
      try {
        flow = exec(node.body, out);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    if (n == 0) return exec(node.else_body, out);
    return Flow::kNormal;
  }

  // A macro sees the globals and the template's top-level variables. It must not hold those scopes itself: it is
  // stored in one of them, and the cycle would never be freed.
  Value make_macro(const Node& node) {
    const Node* macro = &node;
    return Value::function(node.text, [this, macro](CallArgs& args) {
      return invoke(*macro, ScopeStack{scopes_[0], scopes_[1]}, args);
    });
  }

  // Runs a macro (or a call block's body) with its parameters bound, in a fresh scope on top of `base`.
  Value invoke(const Node& macro, const ScopeStack& base, CallArgs& args) {
    PLUMB_CHECK(++depth_ <= kMaxCallDepth, "macro calls nest deeper than {}", kMaxCallDepth);
    ScopeStack saved = std::move(scopes_);
    scopes_ = base;
    scopes_.push_back(std::make_shared<Scope>());
    Scope& scope = *scopes_.back();
    List varargs;
    Dict kwargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < macro.params.size()) {
        scope[macro.params[i].name] = args.positional[i];
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    for (const auto& keyword : args.keyword) {  // not a structured binding: clang 14 cannot capture those
      const bool is_param = std::any_of(macro.params.begin(), macro.params.end(),
                                        [&](const MacroParam& p) { return p.name == keyword.first; });
      if (is_param || keyword.first == "caller") {
        scope[keyword.first] = keyword.second;
      } else {
        kwargs.push_back(keyword);
      }
    }
    std::string out;
    try {
      for (const MacroParam& p : macro.params) {
        if (scope.count(p.name) == 0) scope[p.name] = p.default_value ? eval(*p.default_value) : Value();
      }
      scope["varargs"] = Value::list(std::move(varargs));
      scope["kwargs"] = Value::dict(std::move(kwargs));
      exec(macro.body, out);
    } catch (...) {
      scopes_ = std::move(saved);
      --depth_;
      throw;
    }
    scopes_ = std::move(saved);
    --depth_;
    return Value::string(std::move(out));
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = (*it)->find(name);
      if (found != (*it)->end()) return found->second;
    }
    return Value();
  }

  CallArgs eval_arguments(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.items.size(); ++i) args.positional.push_back(eval(*e.items[i]));
    for (const auto& [k, v] : e.keywords) args.keyword.emplace_back(k, eval(*v));
    return args;
  }

  Value eval_call(const Expr& e, const Value* caller) {
    const Value callee = eval(*e.items[0]);
    if (callee.kind() != Kind::kFunction) {
      const std::string what = e.items[0]->kind == ExprKind::kName   ? "'" + e.items[0]->name + "'"
                               : e.items[0]->kind == ExprKind::kAttr ? "'" + e.items[0]->name + "'"
                                                                     : "the value";
      PLUMB_FAIL("{} is {}, not callable", what, callee.is_undefined() ? "undefined" : callee.type_name());
    }
    CallArgs args = eval_arguments(e, 1);
    if (caller) args.keyword.emplace_back("caller", *caller);
    return callee.call(args);
  }

  Value eval(const Expr& e) {
    step();
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.value;
      case ExprKind::kName:
        return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& item : e.items) items.push_back(eval(*item));
        return Value::list(std::move(items));
      }
      case ExprKind::kDict: {
        Dict items;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          PLUMB_CHECK(key.is_string(), "dict keys must be strings here, not {}", key.type_name());
          const Value value = eval(*e.items[i + 1]);
          auto it = std::find_if(items.begin(), items.end(), [&](const auto& p) { return p.first == key.as_string(); });
          if (it != items.end()) {
            it->second = value;
          } else {
            items.emplace_back(key.as_string(), value);
          }
        }
        return Value::dict(std::move(items));
      }
      case ExprKind::kAttr:
        return get_attr(eval(*e.items[0]), e.name);
      case ExprKind::kItem:
        return get_item(eval(*e.items[0]), eval(*e.items[1]));
      case ExprKind::kSlice: {
        const Value target = eval(*e.items[0]);
        Value bounds[3];
        for (int k = 0; k < 3; ++k) bounds[k] = e.items[k + 1] ? eval(*e.items[k + 1]) : Value::none();
        return slice(target, bounds[0], bounds[1], bounds[2]);
      }
      case ExprKind::kCall:
        return eval_call(e, nullptr);
      case ExprKind::kFilter: {
        const Value target = eval(*e.items[0]);
        CallArgs args = eval_arguments(e, 1);
        return call_filter(e.name, target, args);
      }
      case ExprKind::kTest: {
        const Value target = eval(*e.items[0]);
        CallArgs args = eval_arguments(e, 1);
        return Value::boolean(call_test(e.name, target, args) != e.negated);
      }
      case ExprKind::kNot:
        return Value::boolean(!eval(*e.items[0]).truthy());
      case ExprKind::kNegate: {
        const Value v = eval(*e.items[0]);
        PLUMB_CHECK(v.is_number(), "bad operand type for unary {}: '{}'", e.name, v.type_name());
        if (e.name == "+") return v.kind() == Kind::kBool ? Value::integer(v.as_int()) : v;
        if (v.kind() == Kind::kFloat) return Value::real(-v.as_float());
        PLUMB_CHECK(v.as_int() != INT64_MIN, "integer overflow in unary -");
        return Value::integer(-v.as_int());
      }
      case ExprKind::kBinary:
        return binary_op(e.name, eval(*e.items[0]), eval(*e.items[1]));
      case ExprKind::kCompare: {
        Value left = eval(*e.items[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i + 1]);
          const std::string& op = e.ops[i];
          const bool result = op == "=="   ? equal(left, right)
                              : op == "!=" ? !equal(left, right)
                              : op == "<"  ? less(left, right)
                              : op == ">"  ? less(right, left)
                              : op == "<=" ? !less(right, left)
                              : op == ">=" ? !less(left, right)
                              : op == "in" ? contains(right, left)
                                           : !contains(right, left);
          if (!result) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kAnd: {
        Value left = eval(*e.items[0]);
        return left.truthy() ? eval(*e.items[1]) : left;
      }
      case ExprKind::kOr: {
        Value left = eval(*e.items[0]);
        return left.truthy() ? left : eval(*e.items[1]);
      }
      case ExprKind::kCondition:
        if (eval(*e.items[0]).truthy()) return eval(*e.items[1]);
        return e.items[2] ? eval(*e.items[2]) : Value();
    }
    return Value();
  }

  ScopeStack scopes_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

std::string render(const Body& body, const Dict& variables) {
  return Renderer(variables).run(body);
}

}  // namespace plumb::tokenizer::jinja
