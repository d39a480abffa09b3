"""agentloop as a Harbor installed agent (Harbor 0.25), ready to propose upstream.

Install places one static binary in the task container: no network, no package manager,
no runtime. Run is one headless command: ``agentloop --provider P --model M --json
--trajectory /logs/agent/trajectory.json -- INSTRUCTION`` with stdin from /dev/null, its
JSON events in /logs/agent/agentloop.jsonl and its log in /logs/agent/agentloop.log. The
provider's key and endpoint come from the environment (the host's, or ``--ae``); they are
passed to the command's environment, never on its command line. The token counts and
cost come from the CLI's final ``exit`` record; the trajectory is agentloop's own ATIF
file, replaced whole after every step, so a killed trial still leaves a valid one.

Harbor imports it by its path, ``-a MODULE:CLASS``, with this directory on PYTHONPATH::

    PYTHONPATH=examples/harbor harbor run -e podman -p TASK \\
        -a agentloop_agent:Agentloop -m anthropic/claude-sonnet-4-5 \\
        --ak binary_path=/path/to/static/agentloop

This file never downloads anything and never reads a file of the task's container except
the logs Harbor copies back.
"""

import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Any, override

from pydantic import Field

from harbor.agents.capabilities import AgentCapabilities
from harbor.agents.installed.base import BaseInstalledAgent, with_prompt_template
from harbor.agents.options import InstalledAgentOptions
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

# Where the binary goes in the container, and the files it leaves under /logs/agent/.
_REMOTE_BINARY = PurePosixPath("/installed-agent/agentloop")
_EVENTS_FILENAME = "agentloop.jsonl"
_LOG_FILENAME = "agentloop.log"
_TRAJECTORY_FILENAME = "trajectory.json"

# The variables agentloop reads for each provider: keys and endpoints, forwarded from the
# host's environment (or Harbor's --ae) to the command's environment when set.
_PROVIDER_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GEMINI_BASE_URL",
    "GOOGLE_GEMINI_BASE_URL",
    "OPENAI_COMPATIBLE_API_KEY",
    "OPENAI_COMPATIBLE_BASE_URL",
    "OPENAI_COMPATIBLE_MODEL",
)


class AgentloopOptions(InstalledAgentOptions):
    binary_path: str | None = Field(
        default=None,
        description=(
            "Host path of the static agentloop binary to place in the container "
            "(default: $AGENTLOOP_BINARY)."
        ),
    )
    max_turns: int | None = Field(
        default=None, ge=1, description="Stop after this many model calls."
    )
    sandbox: str = Field(
        default="full-access",
        description=(
            "agentloop's --sandbox: the task container is the sandbox, and tasks write "
            "outside the working directory."
        ),
    )


class Agentloop(BaseInstalledAgent):
    """agentloop, installed as one static binary and run headless."""

    capabilities = AgentCapabilities(atif=True)
    options_model = AgentloopOptions
    options: AgentloopOptions

    @staticmethod
    @override
    def name() -> str:
        return "agentloop"

    @override
    def get_version_command(self) -> str | None:
        return f"{_REMOTE_BINARY} --version"

    @override
    def parse_version(self, stdout: str) -> str:
        # `agentloop --version` prints "agentloop X.Y.Z".
        return stdout.strip().split()[-1]

    def _binary(self) -> Path:
        path = self.options.binary_path or self._get_env("AGENTLOOP_BINARY")
        if not path:
            raise ValueError(
                "agentloop needs its binary: --ak binary_path=PATH or AGENTLOOP_BINARY"
            )
        binary = Path(path)
        if not binary.is_file():
            raise FileNotFoundError(f"agentloop binary not found: {binary}")
        return binary

    @override
    async def install(self, environment: BaseEnvironment) -> None:
        await environment.upload_file(
            source_path=self._binary(), target_path=str(_REMOTE_BINARY)
        )
        await self.exec_as_root(
            environment, command=f"chmod 755 {_REMOTE_BINARY} && {_REMOTE_BINARY} --version"
        )

    def _command(self, instruction: str) -> str:
        if not self.model_name or "/" not in self.model_name:
            raise ValueError("agentloop needs -m provider/model")
        provider, model = self.model_name.split("/", 1)
        logs = self.environment_logs_dir
        flags = ["--provider", provider, "--model", model]
        flags += ["--sandbox", self.options.sandbox, "--json"]
        flags += ["--trajectory", str(logs / _TRAJECTORY_FILENAME)]
        if self.options.max_turns is not None:
            flags += ["--max-turns", str(self.options.max_turns)]
        quoted = " ".join(shlex.quote(flag) for flag in flags)
        return (
            f"mkdir -p {shlex.quote(str(logs))} && "
            f"{_REMOTE_BINARY} {quoted} -- {shlex.quote(instruction)} "
            f"</dev/null >{shlex.quote(str(logs / _EVENTS_FILENAME))} "
            f"2>{shlex.quote(str(logs / _LOG_FILENAME))}"
        )

    @with_prompt_template
    @override
    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        env = {
            name: value
            for name in _PROVIDER_ENV
            if (value := self._get_env(name)) is not None
        }
        await self.exec_as_agent(environment, command=self._command(instruction), env=env)

    def _exit_record(self) -> dict[str, Any] | None:
        """The CLI's last `exit` record, or None when the run left none."""
        events = self.logs_dir / _EVENTS_FILENAME
        if not events.is_file():
            return None
        record = None
        for line in events.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and event.get("kind") == "exit":
                record = event.get("data")
        return record if isinstance(record, dict) else None

    @override
    def populate_context_post_run(self, context: AgentContext) -> None:
        record = self._exit_record()
        if record is None:
            return
        usage = record.get("usage") or {}
        cache_read = int(usage.get("cache_read_tokens") or 0)
        cache_write = int(usage.get("cache_write_tokens") or 0)
        # Harbor's input count includes the cached tokens. agentloop reports each
        # provider's own count: Anthropic's leaves the cache reads and writes out, the
        # others' include them.
        input_tokens = int(usage.get("input_tokens") or 0)
        if (self.model_name or "").startswith("anthropic/"):
            input_tokens += cache_read + cache_write
        context.n_input_tokens = input_tokens
        context.n_cache_tokens = cache_read
        context.n_output_tokens = int(usage.get("output_tokens") or 0)
        context.cost_usd = usage.get("cost_usd")
        context.metadata = {
            "exit_code": record.get("code"),
            "exit_reason": record.get("reason"),
            "exit_detail": record.get("detail"),
            "cache_write_tokens": cache_write,
        }
