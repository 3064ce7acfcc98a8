"""Hosts a shell can live on: this machine (``local``)."""
