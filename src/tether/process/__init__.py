"""Spawning, bounded capture + spill, observed readers, process-tree tracking, kill and reaping.

``spawn(SpawnRequest) -> ManagedProcess`` (``tether.process.spawn``) is the entry point; the child
environment is built by ``tether.process.env.build_child_env``. Every process ``spawn`` starts
(unless ``keep_background``) is born in this tether process's command container
(``tether.process.container``): a PID + mount namespace that the kernel empties when tether ends,
however it ends. Callers need do nothing for it; a wrapper such as bubblewrap runs inside it.
"""
