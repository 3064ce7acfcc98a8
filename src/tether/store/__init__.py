"""Durable state shared by every tether process using one ``TETHER_HOME``."""
