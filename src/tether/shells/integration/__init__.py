"""Shell integration: the bash start-up file, its events, and the loader's payloads."""
