#!/usr/bin/env python3
"""Writes schemas.json, the grammar tests' corpus of JSON Schemas: hand-written shapes of what clients send
(Pydantic-style objects, tool parameters, enums, recursive $defs, tuples, type lists, patterns, bounded numbers) and
seeded random compositions of every supported keyword. Deterministic: rerunning it rewrites the same file.
   python3 tests/grammar/make_corpus.py"""
import json
import os
import random

HAND = [
    {"type": "object"},
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": "array"},
    {},
    True,
    {"type": ["string", "null"]},
    {"enum": ["red", "green", "blue"]},
    {"const": {"kind": "fixed", "n": [1, 2.5, None]}},
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"title": "Weather", "type": "object", "properties": {
        "city": {"type": "string", "description": "the city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string", "minLength": 3, "maxLength": 8}, "qty": {"type": "integer"},
        "price": {"type": "number"}}, "required": ["sku", "qty"]}, "minItems": 1, "maxItems": 4}},
     "required": ["items"]},
    {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["value", "children"]}},
     "$ref": "#/$defs/node"},
    {"definitions": {"list": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "head": {"type": "string", "maxLength": 4}, "tail": {"$ref": "#/definitions/list"}},
        "required": ["head", "tail"]}]}}, "$ref": "#/definitions/list"},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}],
     "items": False},
    {"type": "array", "prefixItems": [{"const": "point"}], "items": {"type": "number"}, "minItems": 3,
     "maxItems": 3},
    {"oneOf": [
        {"type": "object", "properties": {"type": {"const": "circle"}, "r": {"type": "number"}},
         "required": ["type", "r"]},
        {"type": "object", "properties": {"type": {"const": "square"}, "side": {"type": "number"}},
         "required": ["type", "side"]}]},
    {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": True},
    {"type": "object", "properties": {"id": {"type": "integer"}},
     "additionalProperties": {"type": "string", "maxLength": 5}},
    {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "boolean"}}},
    {"type": "object", "properties": {"meta": {"type": "object"}}, "required": ["meta"]},
    {"type": "string", "minLength": 5, "maxLength": 5},
    {"type": "string", "minLength": 10},
    {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 2},
    {"allOf": [{"$ref": "#/$defs/x"}], "$defs": {"x": {"type": "integer"}}},
    {"type": "object", "properties": {"é": {"type": "string"}, "naïve key": {"type": "boolean"},
                                      "quote\"d": {"type": "null"}}, "required": ["é", "quote\"d"]},
    {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 3}]},
    {"type": "object", "properties": {"when": {"type": "object", "properties": {
        "year": {"type": "integer"}, "month": {"enum": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}},
        "required": ["year", "month"], "additionalProperties": False}, "note": {"type": ["string", "null"]}},
     "required": ["when", "note"]},
    {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
    {"type": "string", "pattern": "^[^@\\s]{1,8}@[a-z]{1,8}\\.(com|org)$"},
    {"type": "string", "pattern": "^\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])$"},
    {"type": "string", "pattern": "[aeiou]"},
    {"type": "string", "pattern": "^(?:\\+?1[ -]?)?\\(?\\d{3}\\)?[ -]?\\d{3}-\\d{4}$"},
    {"type": "string", "pattern": "^[\\u00c0-\\u024f a-z]*$"},
    {"type": "string", "pattern": "^\"[^\"\\\\]{0,12}\"$"},
    {"type": "string", "pattern": "^(?<word>[a-z]+)(, [a-z]+)*\\.?$"},
    {"type": "integer", "minimum": 1, "maximum": 12},
    {"type": "integer", "exclusiveMinimum": -100, "exclusiveMaximum": 100},
    {"type": "integer", "minimum": 1000},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": -1.5, "maximum": 2.25},
    {"type": "object", "properties": {
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "zip": {"type": "string", "pattern": "^\\d{5}(-\\d{4})?$"},
        "score": {"type": "number", "minimum": -10, "exclusiveMaximum": 10}},
     "required": ["age", "zip", "score"], "additionalProperties": False},
]

SCALARS = [
    lambda r: {"type": "string"},
    lambda r: {"type": "string", "maxLength": r.randint(0, 6)},
    lambda r: {"type": "string", "minLength": r.randint(1, 4), "maxLength": r.randint(4, 9)},
    lambda r: {"type": "integer"},
    lambda r: {"type": "number"},
    lambda r: {"type": "boolean"},
    lambda r: {"type": "null"},
    lambda r: {"enum": r.sample(["x", "yy", "zzz", 0, 1, -3, 2.5, True, None, "é"], r.randint(1, 4))},
    lambda r: {"const": r.choice(["on", 42, False, None, [1, "a"], {"k": "v"}])},
    lambda r: {"type": r.sample(["string", "integer", "number", "boolean", "null"], 2)},
    lambda r: {"type": "integer", "minimum": r.randint(-50, 10), "maximum": r.randint(10, 5000)},
    lambda r: {"type": "number", "minimum": r.choice([0, -1, -2.5]), "exclusiveMaximum": r.choice([1, 10, 100])},
    lambda r: {"type": "string", "pattern": r.choice(["^[a-z]{1,8}$", "^[A-Z][a-z]*( [A-Z][a-z]*)?$",
                                                      "^#[0-9a-f]{6}$", "^(yes|no|maybe)$", "^[^\\s]{2,5}$"])},
]


def random_schema(r, depth, defs):
    roll = r.random()
    if depth >= 3 or roll < 0.35:
        return r.choice(SCALARS)(r)
    if roll < 0.65:
        names = r.sample(["id", "name", "value", "kind", "tags", "a", "ab", "abc", "b", "meta", "x_y"],
                         r.randint(0, 5))
        props = {n: random_schema(r, depth + 1, defs) for n in names}
        s = {"type": "object", "properties": props}
        if names:
            s["required"] = r.sample(names, r.randint(0, len(names)))
        extra = r.random()
        if extra < 0.2:
            s["additionalProperties"] = True
        elif extra < 0.35:
            s["additionalProperties"] = r.choice(SCALARS[:7])(r)
        elif extra < 0.7:
            s["additionalProperties"] = False
        return s
    if roll < 0.85:
        s = {"type": "array"}
        if r.random() < 0.3:
            s["prefixItems"] = [random_schema(r, depth + 1, defs) for _ in range(r.randint(1, 3))]
            if r.random() < 0.5:
                s["items"] = False
        if "items" not in s:
            s["items"] = random_schema(r, depth + 1, defs)
        lo = r.choice([None, 0, 1, 2])
        hi = r.choice([None, 3, 4])
        if lo is not None:
            s["minItems"] = min(lo, len(s.get("prefixItems", [])) if s.get("items") is False else lo)
        if hi is not None:
            s["maxItems"] = hi
        return s
    if roll < 0.93:
        name = "d%d" % len(defs)
        defs[name] = None  # reserved before the nested schemas pick their names
        defs[name] = random_schema(r, depth + 1, defs)
        return {"$ref": "#/$defs/" + name}
    key = r.choice(["anyOf", "oneOf"])
    # oneOf alternatives of distinct types, so a value matches exactly one of them.
    types = r.sample(["string", "integer", "boolean", "null", "object", "array"], r.randint(2, 3))
    return {key: [{"type": t} for t in types]}


def main():
    r = random.Random(18)
    corpus = list(HAND)
    while len(corpus) < 140:
        defs = {}
        s = random_schema(r, 0, defs)
        if defs:
            s = {"$defs": defs, "allOf": [s]} if "$ref" not in s else {"$defs": defs, **s}
        corpus.append(s)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write("[\n" + ",\n".join(json.dumps(s, ensure_ascii=False) for s in corpus) + "\n]\n")


if __name__ == "__main__":
    main()
