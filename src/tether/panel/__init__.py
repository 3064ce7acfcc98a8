"""The web panel: people watch and drive the agents' shells (front door, thin)."""
