"""Turns the logs of Harbor's ACP runner (acp-events.jsonl, acp-summary.json in LOGS_DIR)
into LOGS_DIR/trajectory.json with Harbor's own ACP agent class, as Harbor does after a
trial, and prints the token counts Harbor read as one JSON line.

Usage: python acp_to_atif.py LOGS_DIR
"""
import json
import sys
from pathlib import Path

from harbor.agents.installed.acp import AcpAgent
from harbor.models.agent.context import AgentContext

logs = Path(sys.argv[1])
# agentloop as a local ACP distribution: the static binary, `agentloop acp`.
entry = {
    "id": "agentloop",
    "name": "agentloop",
    "version": "0.1.0",
    "description": "agentloop acp",
    "distribution": {"local": {"cmd": "agentloop", "args": ["acp"]}},
}
agent = AcpAgent(logs_dir=logs, registry_entry=entry)
context = AgentContext()
agent.populate_context_post_run(context)
print(json.dumps({
    "n_input_tokens": context.n_input_tokens,
    "n_output_tokens": context.n_output_tokens,
    "n_cache_tokens": context.n_cache_tokens,
    "trajectory": (logs / "trajectory.json").exists(),
}))
