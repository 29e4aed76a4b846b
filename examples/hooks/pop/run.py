#!/usr/bin/env python3
"""Session stacking for the gateway: /pop N and the context it leaves behind.

The gateway sends one JSON event on stdin and reads one JSON result on stdout:
  command  {"name": "pop", "args": ["2"], "entries": [...]}  -> {"text", "entries": [stack_pop]}
  context  {"messages": [...], "entries": [...]}             -> {"messages": [...]}
"""
import json
import sys

SUMMARY_CHARS = 160


def live_messages(entries):
    """The message entries still on the stack: not popped by an earlier stack_pop."""
    popped = set()
    for e in entries:
        if e.get("type") == "stack_pop":
            popped.update(e.get("popped", []))
    return [e for e in entries if e.get("type") == "message" and e.get("id") not in popped]


def clip(text):
    text = " ".join((text or "").split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def pop(event):
    args = event.get("args") or []
    try:
        n = int(args[0]) if args else 1
    except ValueError:
        return {"text": "Use /pop N, where N is how many turns to go back (default 1)."}
    if n < 1:
        return {"text": "Use /pop N with N of at least 1."}
    msgs = live_messages(event.get("entries") or [])
    starts = [i for i, e in enumerate(msgs) if e["message"].get("role") == "user"]
    if not starts:
        return {"text": "There is nothing to pop yet."}
    n = min(n, len(starts))
    gone = msgs[starts[-n]:]
    lines = []
    for e in gone:
        m = e["message"]
        if m.get("role") == "user":
            lines.append("the user said: " + clip(m.get("content")))
        elif m.get("role") == "assistant" and m.get("content"):
            lines.append("the assistant answered: " + clip(m.get("content")))
    summary = "; ".join(lines)
    entry = {"type": "stack_pop", "count": n, "popped": [e["id"] for e in gone], "summary": summary}
    return {"text": "Went back %d turn%s. I keep a short summary of %s." % (n, "" if n == 1 else "s", "it" if n == 1 else "them"),
            "entries": [entry]}


def context(event):
    entries = event.get("entries") or []
    if not any(e.get("type") == "stack_pop" for e in entries):
        return None  # nothing popped: the messages stay as they are
    popped = set()
    for e in entries:
        if e.get("type") == "stack_pop":
            popped.update(e.get("popped", []))
    out = []
    for e in entries:
        t = e.get("type")
        if t == "compaction":
            out.append({"role": "user", "content": "Summary of the earlier conversation: " + e.get("summary", "")})
        elif t == "message" and e.get("id") not in popped:
            out.append(e["message"])
        elif t == "stack_pop":
            out.append({"role": "user", "content": "(Earlier turns were set aside; in short: " + e.get("summary", "") + ")"})
    return {"messages": out}


def main():
    event = json.load(sys.stdin)
    kind = event.get("type")
    result = pop(event) if kind == "command" else context(event) if kind == "context" else None
    if result is not None:
        json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
