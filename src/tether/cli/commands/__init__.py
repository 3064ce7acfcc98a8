"""The command groups' argument definitions: one module per group, each exposing ``register(subparsers)``.

Invariant: these modules hold argument definitions only and import nothing beyond the standard
library (and ``tether.cli.lazy``), so ``tether.cli.build_parser`` can import every one of them at
parser-build time and ``tether --help`` stays an interpreter start plus argparse. A command's
``func`` names its handler in ``tether.cli.actions`` by dotted string (``tether.cli.lazy.handler``),
imported only when the command runs. ``tether.cli.commands.mcp`` also holds ``tether mcp``'s early
front, which imports tether's light modules when it runs, never at import.
"""
