#!/usr/bin/env python3
"""/remind DURATION TEXT: answers at once, delivers TEXT to the chat after DURATION.

The delivery goes through the gateway's admin API (POST $GATEWAY_API_URL/send with
$GATEWAY_API_TOKEN), from a background process detached from the hook run (its own
session, so the gateway's clean-up of the hook's process group leaves it alone).
A reminder lives in that process: it does not survive a restart of the machine.
"""
import json
import os
import re
import sys
import time

UNITS = {"s": 1, "m": 60, "h": 3600}
MAX_SECONDS = 7 * 24 * 3600


def deliver(event, text):
    import urllib.request  # here, not at the top: the command's answer need not wait for it

    body = json.dumps({"channel": event["channel"], "chat_id": event["chat_id"],
                       "thread_id": event.get("thread_id", ""), "text": text}).encode()
    req = urllib.request.Request(os.environ["GATEWAY_API_URL"] + "/send", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    token = os.environ.get("GATEWAY_API_TOKEN", "")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    for attempt in range(5):  # the gateway may be restarting
        try:
            urllib.request.urlopen(req, timeout=30).read()
            return
        except Exception:
            time.sleep(2 ** attempt)


def main():
    event = json.load(sys.stdin)
    if event.get("type") != "command":
        return
    m = re.fullmatch(r"(\d+)([smh])\s+(.+)", (event.get("args_raw") or "").strip(), re.S)
    if not m:
        json.dump({"text": "Use /remind 10m stretch (a number with s, m or h, then the text)."}, sys.stdout)
        return
    seconds = int(m.group(1)) * UNITS[m.group(2)]
    if seconds > MAX_SECONDS:
        json.dump({"text": "I can wait at most a week."}, sys.stdout)
        return
    if "GATEWAY_API_URL" not in os.environ:
        json.dump({"text": "This hook needs api: true in its HOOK.yaml."}, sys.stdout)
        return
    text = m.group(3).strip()
    # The gateway kills the hook's process group once this program exits: the background
    # process leaves it (setsid) before the program may exit, which the pipe tells.
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        os.close(ready_w)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        time.sleep(seconds)
        deliver(event, "⏰ " + text)
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)  # end of file once the background process has its own session
    json.dump({"text": "OK, I'll remind you in %s%s." % (m.group(1), m.group(2))}, sys.stdout)


if __name__ == "__main__":
    main()
