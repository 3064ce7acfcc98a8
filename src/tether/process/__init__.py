"""Spawning, bounded capture + spill, observed readers, process-tree tracking, kill and reaping.

``spawn(SpawnRequest) -> ManagedProcess`` (``tether.process.spawn``) is the entry point; the child
environment is built by ``tether.process.env.build_child_env``.
"""
