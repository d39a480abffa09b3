#!/usr/bin/env python3
"""A scripted MCP server over stdio for agentloop's fault tests (our own; stdlib only).

Options:
  --era legacy|modern|both   legacy: only 2025-06-18 (no server/discover);
                             modern: only 2026-07-28 (no initialize; _meta required);
                             both (default): answers server/discover.
  --slow-start SECONDS       sleep before reading anything.
  --garbage                  write a line that is not JSON before every answer.
  --log FILE                 append every message received (one JSON per line), and
                             "pid <n>" first.
  --page-size N              tools/list pages of N tools (nextCursor).
  --deaf                     stop reading stdin after answering tools/list.
  --discover-delay SECONDS   answer server/discover that late (on a thread).
  --resources                declare resources (subscribe, listChanged) and prompts, and
                             serve them: five resources in pages of two (text, a PNG, a
                             60 MB text, ...), a template, two prompts.

Tools: echo, add, crash (exits mid-call), big (10 MB of text), slow (progress every
0.2 s for `seconds`, then a result), hang (never answers; stops on cancel), a tool whose
name is 100 characters, schema_tool (a schema with $schema, additionalProperties: {} and
anyOf + not), grow (adds a tool and sends notifications/tools/list_changed), image,
ask (an elicitation: a server request in the 2025 eras, an input_required result in
2026-07-28), roots (asks the client for its roots), sample (asks for sampling),
change (adds a resource and a prompt, and says the lists changed).
"""
import json
import os
import sys
import threading
import time

args = sys.argv[1:]


def option(name, default=None):
    if name in args:
        return args[args.index(name) + 1]
    return default


ERA = option("--era", "both")
GARBAGE = "--garbage" in args
LOG = option("--log")
PAGE = int(option("--page-size", "0"))
LONG_NAME = "t" * 100
RESOURCES = "--resources" in args
write_lock = threading.Lock()
cancelled = set()
extra_tools = []
extra_resources = []
answers = {}
answered = threading.Condition()
next_request = [0]

if LOG:
    with open(LOG, "a") as f:
        f.write("pid %d\n" % os.getpid())


def log(message):
    if LOG:
        with write_lock:
            with open(LOG, "a") as f:
                f.write(json.dumps(message) + "\n")


def send(message):
    with write_lock:
        if GARBAGE:
            sys.stdout.write("this line is not json {\n")
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def result(rid, value):
    send({"jsonrpc": "2.0", "id": rid, "result": value})


def error(rid, code, message):
    send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def text(value):
    return {"content": [{"type": "text", "text": value}]}


def tools():
    obj = {"type": "object"}
    listed = [
        {"name": "echo", "description": "Echoes its text.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                         "required": ["text"]}},
        {"name": "add", "description": "Adds a and b.",
         "inputSchema": {"type": "object",
                         "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                         "required": ["a", "b"]}},
        {"name": "crash", "description": "Exits during the call.", "inputSchema": obj},
        {"name": "big", "description": "10 MB of text.", "inputSchema": obj},
        {"name": "slow", "description": "Progress, then done.",
         "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}},
        {"name": "hang", "description": "Never answers.", "inputSchema": obj},
        {"name": LONG_NAME, "description": "A long name.", "inputSchema": obj},
        {"name": "schema_tool", "description": "A schema providers reject.",
         "inputSchema": {
             "$schema": "http://json-schema.org/draft-07/schema#",
             "type": "object",
             "additionalProperties": {},
             "properties": {
                 "value": {"anyOf": [{"type": "string"}, {"not": {"type": "null"}}]}
             }}},
        {"name": "grow", "description": "Adds a tool.", "inputSchema": obj},
        {"name": "image", "description": "A tiny PNG.", "inputSchema": obj},
    ]
    if RESOURCES:
        listed += [
            {"name": "ask", "description": "Asks the user.", "inputSchema": obj},
            {"name": "roots", "description": "Lists the client's roots.", "inputSchema": obj},
            {"name": "sample", "description": "Asks for sampling.", "inputSchema": obj},
            {"name": "change", "description": "Changes the lists.", "inputSchema": obj},
            {"name": "flood", "description": "Sends 300 roots/list requests at once.",
             "inputSchema": obj},
            {"name": "ask_forever", "description": "Always asks for more input.",
             "inputSchema": obj},
        ]
    return listed + extra_tools


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
ASK = {"message": "What is your name?", "requestedSchema": {"type": "object", "properties": {
    "name": {"type": "string", "description": "Your name"},
    "color": {"type": "string", "enum": ["red", "blue"], "default": "blue"}},
    "required": ["name"]}}


def resources():
    listed = [
        {"uri": "res://a.txt", "name": "a.txt", "mimeType": "text/plain",
         "description": "Alpha."},
        {"uri": "res://b.png", "name": "b.png", "mimeType": "image/png"},
        {"uri": "res://big.txt", "name": "big.txt", "mimeType": "text/plain",
         "size": 60 * 1024 * 1024},
        {"uri": "res://c.md", "name": "c.md", "title": "See", "mimeType": "text/markdown"},
        {"uri": "res://d.json", "name": "d.json", "mimeType": "application/json"},
    ]
    return listed + extra_resources


def read_resource(uri):
    texts = {"res://a.txt": "alpha text", "res://c.md": "# See", "res://d.json": "{}"}
    if uri in texts:
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": texts[uri]}]}
    if uri == "res://b.png":
        return {"contents": [{"uri": uri, "mimeType": "image/png", "blob": PNG}]}
    if uri == "res://big.txt":
        return {"contents": [{"uri": uri, "mimeType": "text/plain",
                              "text": "y" * (60 * 1024 * 1024)}]}
    if uri.startswith("res://items/"):
        return {"contents": [{"uri": uri, "text": "item " + uri.rsplit("/", 1)[1]}]}
    if any(r["uri"] == uri for r in extra_resources):
        return {"contents": [{"uri": uri, "text": "new resource"}]}
    return None


def ask_client(method, params):
    """Sends a request to the client and waits (at most 20 s) for its answer."""
    with answered:
        next_request[0] += 1
        rid = "s%d" % next_request[0]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    with answered:
        answered.wait_for(lambda: rid in answers, timeout=20)
        return answers.pop(rid, {"error": {"message": "no answer"}})


def call(rid, params, meta):
    name = params.get("name")
    arguments = params.get("arguments") or {}
    token = meta.get("progressToken")
    if name == "echo":
        result(rid, text(arguments.get("text", "")))
    elif name == "add":
        total = arguments["a"] + arguments["b"]
        result(rid, {"content": [{"type": "text", "text": str(total)}],
                     "structuredContent": {"sum": total}})
    elif name == "crash":
        sys.stderr.write("fake server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "big":
        result(rid, text("x" * (10 * 1024 * 1024)))
    elif name == "slow":
        end = time.time() + float(arguments.get("seconds", 1))
        step = 0
        while time.time() < end:
            time.sleep(0.2)
            step += 1
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": step}})
        result(rid, text("slow done after %d steps" % step))
    elif name == "hang":
        while rid not in cancelled:
            time.sleep(0.01)
    elif name == LONG_NAME:
        result(rid, text("long name called"))
    elif name == "schema_tool":
        result(rid, text("schema ok: %s" % json.dumps(arguments)))
    elif name == "grow":
        extra_tools.append({"name": "grown", "description": "Added later.",
                            "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result(rid, text("grew"))
    elif name == "grown":
        result(rid, text("grown called"))
    elif name == "flood":
        ids = []
        with answered:
            for _ in range(300):
                next_request[0] += 1
                ids.append("s%d" % next_request[0])
        for rid_ in ids:
            send({"jsonrpc": "2.0", "id": rid_, "method": "roots/list", "params": {}})
        # The tests' generous ceiling (20 s): every answer comes long before it unless the
        # client drops some, and under a loaded CI machine 5 s was not always enough.
        with answered:
            answered.wait_for(lambda: all(i in answers for i in ids), timeout=20)
            got = [answers.pop(i, None) for i in ids]
        results = sum(1 for a in got if a and "result" in a)
        busy = sum(1 for a in got if a and "error" in a)
        result(rid, text("results %d busy %d missing %d" % (results, busy, got.count(None))))
    elif name == "ask_forever":
        result(rid, {"resultType": "input_required", "requestState": "again",
                     "inputRequests": {"q": {"method": "roots/list", "params": {}}}})
    elif name == "ask" and ERA == "modern":
        responses = params.get("inputResponses")
        if not responses:
            return result(rid, {"resultType": "input_required", "requestState": "state-1",
                                "inputRequests": {"q1": {"method": "elicitation/create",
                                                         "params": ASK}}})
        answer = responses.get("q1")
        result(rid, text("answer: %s state: %s" % (json.dumps(answer, sort_keys=True),
                                                   params.get("requestState"))))
    elif name == "ask":
        answer = ask_client("elicitation/create", ASK)
        result(rid, text("answer: %s" % json.dumps(answer.get("result", answer), sort_keys=True)))
    elif name == "roots":
        answer = ask_client("roots/list", {})
        result(rid, text(json.dumps(answer.get("result", answer), sort_keys=True)))
    elif name == "sample":
        answer = ask_client("sampling/createMessage", {"messages": [], "maxTokens": 5})
        result(rid, text(json.dumps(answer, sort_keys=True)))
    elif name == "change":
        extra_resources.append({"uri": "res://new.txt", "name": "new.txt"})
        send({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})
        send({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"})
        result(rid, text("changed"))
    elif name == "image":
        png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
        result(rid, {"content": [{"type": "image", "data": png, "mimeType": "image/png"}]})
    else:
        result(rid, {"content": [{"type": "text", "text": "unknown tool %s" % name}],
                     "isError": True})


def handle(message):
    log(message)
    method = message.get("method")
    rid = message.get("id")
    params = message.get("params") or {}
    meta = params.get("_meta") or {}
    if rid is None:
        if method == "notifications/cancelled":
            cancelled.add(params.get("requestId"))
        return
    if method is None:
        with answered:
            answers[rid] = message
            answered.notify_all()
        return
    modern_meta = meta.get("io.modelcontextprotocol/protocolVersion")
    if ERA == "legacy" and method == "server/discover":
        return error(rid, -32601, "Method not found")
    if ERA == "modern":
        if method == "initialize":
            return error(rid, -32022, "this connection serves 2026-07-28")
        if modern_meta != "2026-07-28":
            return error(rid, -32022, "Unsupported protocol version")
    if method == "server/discover" and option("--discover-delay") and not meta.get("late"):
        def late():
            time.sleep(float(option("--discover-delay")))
            meta["late"] = True
            handle(message)
        return threading.Thread(target=late, daemon=True).start()
    capabilities = {"tools": {"listChanged": True}}
    if RESOURCES:
        capabilities["resources"] = {"subscribe": True, "listChanged": True}
        capabilities["prompts"] = {"listChanged": True}
    if method == "server/discover":
        return result(rid, {"supportedVersions": ["2026-07-28"],
                            "capabilities": capabilities,
                            "serverInfo": {"name": "fake", "version": "1"}})
    if method == "initialize":
        version = "2025-06-18" if ERA == "legacy" else params.get("protocolVersion")
        return result(rid, {"protocolVersion": version,
                            "capabilities": capabilities,
                            "serverInfo": {"name": "fake", "version": "1"}})
    if RESOURCES and method in ("resources/list", "resources/templates/list", "prompts/list"):
        key, listed = {
            "resources/list": ("resources", resources()),
            "resources/templates/list": ("resourceTemplates",
                                         [{"uriTemplate": "res://items/{id}", "name": "item",
                                           "description": "An item by id."}]),
            "prompts/list": ("prompts", [
                {"name": "greet", "description": "Greets someone.",
                 "arguments": [{"name": "who", "description": "Whom", "required": True}]},
                {"name": "plain", "title": "Plain"}]),
        }[method]
        start = int(params.get("cursor") or 0)
        page = {key: listed[start:start + 2]}
        if start + 2 < len(listed):
            page["nextCursor"] = str(start + 2)
        return result(rid, page)
    if RESOURCES and method == "resources/read":
        contents = read_resource(params.get("uri"))
        if contents is None:
            return error(rid, -32002, "Resource not found: %s" % params.get("uri"))
        return threading.Thread(target=result, args=(rid, contents), daemon=True).start()
    if RESOURCES and method == "prompts/get":
        who = (params.get("arguments") or {}).get("who", "nobody")
        return result(rid, {"description": "A greeting", "messages": [
            {"role": "user", "content": {"type": "text", "text": "Hello, %s!" % who}},
            {"role": "assistant", "content": {"type": "image", "data": PNG,
                                              "mimeType": "image/png"}}]})
    if RESOURCES and method in ("resources/subscribe", "resources/unsubscribe"):
        uri = params.get("uri")
        if method == "resources/subscribe":
            def updated():
                time.sleep(0.2)
                send({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                      "params": {"uri": uri}})
            threading.Thread(target=updated, daemon=True).start()
        return result(rid, {})
    if method == "tools/list":
        listed = tools()
        if PAGE:
            start = int(params.get("cursor") or 0)
            page = {"tools": listed[start:start + PAGE]}
            if start + PAGE < len(listed):
                page["nextCursor"] = str(start + PAGE)
            return result(rid, page)
        result(rid, {"tools": listed})
        if "--deaf" in args:
            time.sleep(3600)
        return None
    if method == "tools/call":
        return threading.Thread(target=call, args=(rid, params, meta), daemon=True).start()
    if method == "ping":
        return result(rid, {})
    error(rid, -32601, "Method not found")


def main():
    delay = float(option("--slow-start", "0"))
    if delay:
        time.sleep(delay)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        handle(message)


main()
