"""tether.tools.bash — the model-visible one-shot ``bash`` and ``pwsh`` tools (spec 000).

Invariant: the input schema is a pure function of the deployment facts the spec lets change it (a
job registry attached, a confining executor) and never shows a deployment-only knob (``schema``);
every successful call returns exactly one of the result shapes ``foreground``, ``promoted`` or
``background``, validating against ``OUTPUT_SCHEMA``, while a caller's cancellation kills the
process tree and is ``ToolAborted``, never a result (``results``). A foreground command sits in the
job table while it runs, so ``job_kill`` stops it (``tools``). Each module states the rest of
what it owns (``tools``: the plugin and its executor; ``schema``: what the model sees;
``results``: the result shapes and their schema).

The face::

    ShellToolPlugin, ShellToolOptions     the two tools of one process, and their deployment options
    ShellName, make_executor,             which shell; its executor (confined where the config says);
      pwsh_available                      whether pwsh is here
    ToolAborted                           the caller cancelled; the command was killed
    SANDBOX_SCHEMA, sandbox_json          a result's sandbox facts, shared with the shell tools
    SPILL_PATHS_SCHEMA, spill_paths       where dropped output still is, shared with job_output
    SUSPENDED_SCHEMA, suspended_line      a job stopped by a signal, shared with the job tools
"""

from tether.tools.bash.results import (
    SANDBOX_SCHEMA,
    SPILL_PATHS_SCHEMA,
    SUSPENDED_SCHEMA,
    ToolAborted,
    sandbox_json,
    spill_paths,
    suspended_line,
)
from tether.tools.bash.schema import ShellName
from tether.tools.bash.tools import ShellToolOptions, ShellToolPlugin, make_executor, pwsh_available

__all__ = [
    "SANDBOX_SCHEMA",
    "SPILL_PATHS_SCHEMA",
    "SUSPENDED_SCHEMA",
    "ShellName",
    "ShellToolOptions",
    "ShellToolPlugin",
    "ToolAborted",
    "make_executor",
    "pwsh_available",
    "sandbox_json",
    "spill_paths",
    "suspended_line",
]
