"""What the model sees of the ``bash`` / ``pwsh`` tools: tool hints, description, input schema.

Invariant: the input schema is a pure function of the deployment facts that the spec lets change
it — whether a job registry is attached (``run_in_background``, the ``timeoutMs`` wording), whether
the executor confines (``sandbox_permissions`` + ``justification``) — and never contains a
deployment-only knob such as ``stdout_max_bytes``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

ShellName = Literal["bash", "pwsh"]
# Narrow → wide; a confining executor may publish its own as ``permission_modes``.
DEFAULT_SANDBOX_MODES: Final = ("read-only", "workspace-write", "full-access")

HINTS: Final[dict[str, str]] = {
    "bash": (
        "`bash` runs each command in a fresh non-interactive `bash -c` process: `cd`, variables and "
        "functions do not carry over between calls, so pass `workdir` or chain with `&&`. There is no "
        "terminal and stdin is empty: use non-interactive flags (`-y`, `--no-pager`); prompts fail. Always "
        "give `description` (one sentence). Output is capped per stream; when it is cut, the text ends "
        "with `[output truncated; full output: PATH]` and PATH holds the whole stream. A non-zero exit is "
        "shown as `[exit code: N]`; it is a result, not an error. For servers, watchers or anything "
        "longer than the timeout, use `run_in_background` (when offered) and follow it with "
        "`job_output`; stop it with `job_kill`. For an interactive program or a long-lived session, use "
        "the persistent shell tools instead."
    ),
    "pwsh": (
        "`pwsh` runs each command in a fresh non-interactive `pwsh -Command` process: location and "
        "variables do not carry over between calls, so pass `workdir`. There is no console input: avoid "
        "Read-Host and confirmation prompts (`-Confirm:$false`). Always give `description`. A non-zero "
        "exit is shown as `[exit code: N]`; long-running commands can use `run_in_background` (when "
        "offered) with `job_output` / `job_kill`."
    ),
}


def shell_description(shell: ShellName) -> str:
    runner = "pwsh -Command" if shell == "pwsh" else "bash -c"
    return (
        f"Run one command in a fresh non-interactive `{runner}` process and return its output and exit "
        f"status.\n\n{HINTS[shell]}"
    )


def shell_input_schema(
    *,
    default_timeout_ms: int,
    max_timeout_ms: int,
    promotes: bool,
    sandbox_modes: tuple[str, ...] | None,
    current_sandbox_mode: str,
    background: bool,
) -> dict[str, Any]:
    """The JSON Schema of the arguments; ``sandbox_modes`` is None for an unconfined executor."""
    on_timeout = (
        "if the command is still running then, it moves to a background job and you get its job id"
        if promotes
        else "if the command is still running then, it is killed"
    )
    properties: dict[str, Any] = {
        "command": {"type": "string", "minLength": 1, "description": "The command text to run."},
        "description": {
            "type": "string",
            "minLength": 1,
            "description": "One short sentence saying what the command does.",
        },
        # No "maximum": a larger value is clamped (spec: Resolve caps per-call overrides), and a
        # client that validates against the schema must not refuse what the server accepts.
        "timeoutMs": {
            "type": "integer",
            "minimum": 1,
            "description": f"Foreground deadline in milliseconds (default {default_timeout_ms}, "
            f"at most {max_timeout_ms}: a larger value is clamped to it); {on_timeout}.",
        },
        "workdir": {"type": "string", "description": "Working directory (default: the server's)."},
    }
    if sandbox_modes is not None:
        properties["sandbox_permissions"] = {
            "type": "string",
            "enum": list(sandbox_modes),
            "description": f"Sandbox mode for this command (default {current_sandbox_mode!r}). "
            "A wider mode needs a justification.",
        }
        properties["justification"] = {
            "type": "string",
            "description": "Why this command needs a wider sandbox mode (required when widening).",
        }
    if background:
        properties["run_in_background"] = {
            "type": "boolean",
            "description": "Start the command as a background job and return its job id at once.",
        }
    return {
        "type": "object",
        "properties": properties,
        "required": ["command", "description"],
        "additionalProperties": False,
    }
