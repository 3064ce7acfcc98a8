"""tether: a shell for AI agents.

Layers import downward only (see docs/development.md and tests/test_layers.py)::

    cli · mcp/ · panel/        front doors, thin
    tools/                     model-visible tools
    jobs/ · shells/           background jobs; persistent tmux shells
    shell/                     the one-shot executor seam and its providers
    process/                   spawning, bounded capture, tree kill
    store/ · audit/            SQLite store and the append-only audit log
    config · home · inotify    settings, TETHER_HOME, file-change wake-ups
    errors
"""

__version__ = "0.1.0"
