#!/usr/bin/env python3
"""A calculator tool: reads the tool event on stdin, answers {"content", "is_error"}.

Only numbers and arithmetic operators are evaluated (through Python's ast, never eval),
with bounds on the size of powers, so no expression can run away.
"""
import ast
import json
import operator
import sys

OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def evaluate(node):
    if isinstance(node, ast.Expression):
        return evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
        return OPS[type(node.op)](evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        left, right = evaluate(node.left), evaluate(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 1000 or abs(left) > 10**6):
            raise ValueError("that power is too large")
        return OPS[type(node.op)](left, right)
    raise ValueError("only numbers and + - * / // % ** ( ) are allowed")


def main():
    event = json.load(sys.stdin)
    if event.get("type") != "tool":
        return
    expr = str((event.get("arguments") or {}).get("expression", ""))
    try:
        value = evaluate(ast.parse(expr, mode="eval"))
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        result = {"content": "%s = %s" % (expr, value), "is_error": False}
    except ZeroDivisionError:
        result = {"content": "division by zero in %r" % expr, "is_error": True}
    except (SyntaxError, ValueError, TypeError, OverflowError) as e:
        result = {"content": "cannot evaluate %r: %s" % (expr, e), "is_error": True}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
