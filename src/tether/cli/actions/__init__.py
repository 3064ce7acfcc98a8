"""The command groups' handlers: one module per group, each imported on the first call of one of its commands.

Invariant: nothing imports these modules while the parser is built; ``tether.cli.lazy.handler``
(or, for ``tether mcp``, its early front in ``tether.cli.commands.mcp``) imports a group's module
when one of its commands runs, so each command pays only for its own imports (the SDK, the shell
engine, SQLite, cryptography). The arguments are defined in the same-named module of
``tether.cli.commands``.
"""
