"""Model-visible tools: schemas, validation, rendering, and the tool registry."""
